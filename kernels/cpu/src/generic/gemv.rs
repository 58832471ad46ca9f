//! The portable parts of the decode products (`crate::gemv`): the 16-accumulator dot (a
//! macro, so that each instruction set compiles it with its own multiply-add), the axpy loops
//! and the exact bf16 widening. The SIMD kernels take the same lanes and order.

use half::bf16;

#[inline(always)]
pub(crate) fn axpy4_body(a: [f32; 4], x: [&[f32]; 4], y: &mut [f32], madd: impl Fn(f32, f32, f32) -> f32) {
    let n = y.len().min(x[0].len()).min(x[1].len()).min(x[2].len()).min(x[3].len());
    let (y, x0, x1, x2, x3) = (&mut y[..n], &x[0][..n], &x[1][..n], &x[2][..n], &x[3][..n]);
    for i in 0..n {
        y[i] = madd(a[3], x3[i], madd(a[2], x2[i], madd(a[1], x1[i], madd(a[0], x0[i], y[i]))));
    }
}

#[inline(always)]
pub(crate) fn axpy_body(a: f32, x: &[f32], y: &mut [f32], madd: impl Fn(f32, f32, f32) -> f32) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = madd(a, x, *y);
    }
}

/// Sum of `f(i) * x[i]` with 16 independent accumulators (so the loop vectorizes).
macro_rules! dot_body {
    ($row:expr, $x:expr, $widen:expr, $madd:expr) => {{
        let (row, x) = ($row, $x);
        let mut acc = [0f32; 16];
        let mut rc = row.chunks_exact(16);
        let mut xc = x.chunks_exact(16);
        for (r, xv) in (&mut rc).zip(&mut xc) {
            for l in 0..16 {
                acc[l] = $madd($widen(r[l]), xv[l], acc[l]);
            }
        }
        let mut s = 0f32;
        for (r, xv) in rc.remainder().iter().zip(xc.remainder()) {
            s = $madd($widen(*r), *xv, s);
        }
        acc.iter().sum::<f32>() + s
    }};
}
pub(crate) use dot_body;

#[inline(always)]
pub(crate) fn madd_plain(a: f32, b: f32, c: f32) -> f32 {
    a * b + c
}

#[inline(always)]
pub(crate) fn madd_fused(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

#[inline(always)]
pub(crate) fn widen_bf16(h: bf16) -> f32 {
    f32::from_bits((h.to_bits() as u32) << 16)
}
