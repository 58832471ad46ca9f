//! The direct stride-1 f32 convolution's block kernel (see [`crate::conv1d`]): 64 columns,
//! per output the same order of operations as the AVX2 block.

use std::arch::x86_64::*;

use crate::conv1d::Operands;

/// [`Operands`] for R rows × 64 columns, the 4R accumulators in registers; per output the
/// same order of operations as the AVX2 block.
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn block<const R: usize>(o: Operands) {
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for (r, a) in acc.iter_mut().enumerate() {
        let out = o.out.add(r * o.out_stride);
        for (v, a) in a.iter_mut().enumerate() {
            *a = _mm512_loadu_ps(out.add(16 * v));
        }
    }
    for ci in 0..o.channels {
        let xr = o.x.add(ci * o.x_stride);
        let wr = o.w.add(ci * o.w_ci);
        for j in 0..o.taps {
            let xp = xr.add(j * o.dilation);
            let x = [
                _mm512_loadu_ps(xp),
                _mm512_loadu_ps(xp.add(16)),
                _mm512_loadu_ps(xp.add(32)),
                _mm512_loadu_ps(xp.add(48)),
            ];
            let wj = wr.add(j);
            for (r, a) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(*wj.add(r * o.w_row));
                for (a, &x) in a.iter_mut().zip(&x) {
                    *a = _mm512_fmadd_ps(wv, x, *a);
                }
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        let out = o.out.add(r * o.out_stride);
        for (v, &a) in a.iter().enumerate() {
            _mm512_storeu_ps(out.add(16 * v), a);
        }
    }
}
