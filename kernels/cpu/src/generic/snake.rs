//! The Snake activation's portable code ([`crate::snake`]), the body every build compiles.

use crate::activation::sin_slice;

/// Values of one channel handled together (the sine buffer: 4 KB).
const BLOCK: usize = 1024;

/// `out[i] = x[i] + inv_beta · sin²(alpha · x[i])` (equal lengths), a block at a time.
#[inline(always)]
pub fn snake_body(x: &[f32], alpha: f32, inv_beta: f32, out: &mut [f32]) {
    let mut scaled = [0f32; BLOCK];
    for (xb, ob) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
        let scaled = &mut scaled[..xb.len()];
        scaled.iter_mut().zip(xb).for_each(|(s, &x)| *s = x * alpha);
        sin_slice(scaled, ob);
        ob.iter_mut().zip(xb).for_each(|(o, &x)| *o = x + (*o * *o) * inv_beta);
    }
}
