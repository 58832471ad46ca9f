//! RMSNorm's sums of squares ([`crate::rms_norm`]) for 16 rows at once.

use std::arch::x86_64::*;

use crate::rms_norm::SUM_ROWS;

/// `sums[j]` = Σ x² over row j of 16 rows of `n` values, each summed in order from `Sum`'s
/// zero, a rounded product then a rounded add per value, as the one-row loop does (so the same
/// bits): lane j carries row j's sum, the rows' values transposed 16 at a time. One row's
/// in-order sum is a chain of dependent adds (4 cycles each): 6% of a 1-thread bf16 prefill.
///
/// # Safety
/// The CPU has AVX-512 F; `xw` holds 16 · n values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn sums_of_squares(xw: &[f32], n: usize, sums: &mut [f32; SUM_ROWS]) {
    assert!(xw.len() >= SUM_ROWS * n);
    let mut acc = _mm512_set1_ps([0f32; 0].iter().sum::<f32>());
    let full = n / 16 * 16;
    let p = xw.as_ptr();
    for c in (0..full).step_by(16) {
        let mut rows = [_mm512_setzero_ps(); 16];
        for (j, v) in rows.iter_mut().enumerate() {
            // SAFETY: values c .. c + 16 of row j, inside xw (asserted).
            *v = unsafe { _mm512_loadu_ps(p.add(j * n + c)) };
        }
        for v in super::simd::transpose16(rows) {
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
    }
    for e in full..n {
        let column: [f32; SUM_ROWS] = std::array::from_fn(|j| xw[j * n + e]);
        // SAFETY: reads the 16 values of `column`.
        let v = unsafe { _mm512_loadu_ps(column.as_ptr()) };
        acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
    }
    // SAFETY: writes the 16 values of `sums`.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), acc) };
}
