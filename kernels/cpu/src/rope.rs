//! Rotary embedding over rows of a contiguous (…, t, d) tensor with (t, d/2) cos and sin
//! tables: the same operations as candle's kernel, in the element type (each product, and the
//! sum of two, rounded to it: what PyTorch's eager `q * cos + rotate_half(q) * sin` does in
//! bf16), so the same bits. A row is widened once and the roundings vectorize, 16 lanes wide
//! with AVX-512 (uncapped).

use crate::out_ptr::OutPtr;
use crate::pool::Pool;
use crate::row_elem::{RowElem, ROW_PARALLEL_MIN};

/// Longest head dim [`rope_rows`] takes (its row buffers live on the stack).
pub const MAX_DIM: usize = 1024;

/// Which values a rotation pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Value i with value i + d/2.
    SplitHalf,
    /// Value 2i with value 2i + 1.
    Interleaved,
}

/// `x`'s rows of `d` (even, at most [`MAX_DIM`]) values, row r at position r mod t, rotated by
/// the tables' (t rows of d/2) cos and sin into a new buffer; rows are split over `pool` when
/// large.
pub fn rope_rows<E: RowElem + Default>(
    x: &[E],
    cos: &[E],
    sin: &[E],
    t: usize,
    d: usize,
    layout: RopeLayout,
    pool: &impl Pool,
) -> Vec<E> {
    assert!(d <= MAX_DIM, "rope_rows takes head dims up to {MAX_DIM}, got {d}");
    let half = d / 2;
    let rows = x.len() / d;
    let mut out = vec![E::default(); x.len()];
    let dst = OutPtr(out.as_mut_ptr());
    // The tables are widened once: every head at a position reads the same row.
    let (cos, sin): (Vec<f32>, Vec<f32>) =
        (cos.iter().map(|v| v.widen()).collect(), sin.iter().map(|v| v.widen()).collect());
    #[cfg(target_arch = "x86_64")]
    let wide = crate::cpu_features::features().avx512();
    let body = |range: std::ops::Range<usize>| {
        for r in range {
            let p = r % t;
            let (cw, sw) = (&cos[p * half..(p + 1) * half], &sin[p * half..(p + 1) * half]);
            // SAFETY: row r's d values are written by this work item only, inside `out`.
            let o = unsafe { std::slice::from_raw_parts_mut(dst.at(r * d), d) };
            let xr = &x[r * d..(r + 1) * d];
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: the CPU has AVX-512 F/BW (`wide`).
                unsafe { crate::x86::avx512::rope::rope_row(xr, cw, sw, layout, o) };
                continue;
            }
            crate::generic::rope::rope_row(xr, cw, sw, layout, o)
        }
    };
    pool.execute_chunked_if(rows * d >= ROW_PARALLEL_MIN, rows, body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Inline, ScopedThreads};

    /// The definition's bits in f32 for both layouts, on one thread and split over a pool.
    #[test]
    fn rotates_as_defined() {
        let (rows, t, d) = (64, 8, 128);
        let x = crate::bench_inputs::values(rows * d, 21);
        let angles = crate::bench_inputs::values(t * d / 2, 22);
        let (cos, sin): (Vec<f32>, Vec<f32>) =
            (angles.iter().map(|a| a.cos()).collect(), angles.iter().map(|a| a.sin()).collect());
        for layout in [RopeLayout::SplitHalf, RopeLayout::Interleaved] {
            let mut want = vec![0f32; x.len()];
            for (r, (xr, yr)) in x.chunks_exact(d).zip(want.chunks_exact_mut(d)).enumerate() {
                for i in 0..d / 2 {
                    let (c, s) = (cos[r % t * d / 2 + i], sin[r % t * d / 2 + i]);
                    let (ia, ib) = if layout == RopeLayout::SplitHalf { (i, i + d / 2) } else { (2 * i, 2 * i + 1) };
                    (yr[ia], yr[ib]) = (xr[ia] * c - xr[ib] * s, xr[ia] * s + xr[ib] * c);
                }
            }
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let one = rope_rows(&x, &cos, &sin, t, d, layout, &Inline);
            assert_eq!(bits(&one), bits(&want), "{layout:?}");
            let split = rope_rows(&x, &cos, &sin, t, d, layout, &ScopedThreads(3));
            assert_eq!(bits(&split), bits(&want), "{layout:?} split");
        }
    }
}
