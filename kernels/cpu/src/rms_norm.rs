//! RMSNorm over rows, `x / sqrt(mean(x²) + eps) * weight`, computed as candle's f32 kernel
//! computes it on the widened row (a sequential sum of squares, `x / rms * weight`, rounded
//! once), so the same bits. With AVX-512 (uncapped) 16 rows' sums run at once, one row per lane
//! (`x86/avx512/rms_norm.rs`), each still summed in order.

use crate::out_ptr::OutPtr;
use crate::pool::Pool;
use crate::row_elem::{RowElem, ROW_PARALLEL_MIN};

/// Rows whose sums of squares the AVX-512 kernel takes at once.
pub(crate) const SUM_ROWS: usize = 16;

/// RMSNorm of `rows` rows of `w.len()` values, row r at `x[row_at(r)..]`, by the weight `w`,
/// into a new contiguous buffer; rows are split over `pool` when large.
pub fn rms_norm_rows<E: RowElem + Default>(
    x: &[E],
    rows: usize,
    row_at: impl Fn(usize) -> usize + Sync,
    w: &[E],
    eps: f32,
    pool: &impl Pool,
) -> Vec<E> {
    let n = w.len();
    let w: Vec<f32> = w.iter().map(|v| v.widen()).collect();
    let mut out = vec![E::default(); rows * n];
    let dst = OutPtr(out.as_mut_ptr());
    let wide = crate::cpu_features::features().avx512();
    let body = |range: std::ops::Range<usize>| {
        let mut xw = vec![0f32; SUM_ROWS * n];
        let mut sums = [0f32; SUM_ROWS];
        let mut r = range.start;
        while r < range.end {
            let rows = if wide && range.end - r >= SUM_ROWS { SUM_ROWS } else { 1 };
            for (j, xw) in xw.chunks_exact_mut(n).take(rows).enumerate() {
                let at = row_at(r + j);
                x[at..at + n].iter().zip(xw).for_each(|(v, d)| *d = v.widen());
            }
            if rows == SUM_ROWS {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX-512 (`wide`); xw holds SUM_ROWS rows of n values.
                unsafe {
                    crate::x86::avx512::rms_norm::sums_of_squares(&xw, n, &mut sums)
                };
            } else {
                // In order, as candle sums (a reordered sum would change the last bits).
                sums[0] = xw[..n].iter().map(|&v| v * v).sum::<f32>();
            }
            for (j, xw) in xw.chunks_exact(n).take(rows).enumerate() {
                let rms = (sums[j] / n as f32 + eps).sqrt();
                // SAFETY: row r + j's n values are written by this work item only, inside `out`.
                let o = unsafe { std::slice::from_raw_parts_mut(dst.at((r + j) * n), n) };
                o.iter_mut().zip(xw).zip(&w).for_each(|((o, &v), &a)| *o = E::narrow(v / rms * a));
            }
            r += rows;
        }
    };
    pool.execute_chunked_if(rows * n >= ROW_PARALLEL_MIN, rows, body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Inline, ScopedThreads};

    /// The one-row loop's bits for every row, whether its sum ran 16 rows at once or alone.
    #[test]
    fn every_row_sums_in_order() {
        for (rows, n) in [(37, 100), (16, 7), (40, 1024)] {
            let x = crate::bench_inputs::values(rows * n, 11);
            let w = crate::bench_inputs::values(n, 12);
            let want: Vec<u32> = x
                .chunks_exact(n)
                .flat_map(|row| {
                    let rms = (row.iter().map(|&v| v * v).sum::<f32>() / n as f32 + 1e-6).sqrt();
                    row.iter().zip(&w).map(move |(&v, &a)| (v / rms * a).to_bits())
                })
                .collect();
            let bits = |v: Vec<f32>| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(rms_norm_rows(&x, rows, |r| r * n, &w, 1e-6, &Inline)), want, "{rows}x{n}");
            let split = rms_norm_rows(&x, rows, |r| r * n, &w, 1e-6, &ScopedThreads(3));
            assert_eq!(bits(split), want, "{rows}x{n} split");
        }
    }
}
