//! The direct stride-1 f32 convolution's block kernel (see [`crate::conv1d`]): 16 columns.

use std::arch::x86_64::*;

use crate::conv1d::Operands;

/// [`Operands`] for R rows, the 2R accumulators in registers.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn block<const R: usize>(o: Operands) {
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for (r, a) in acc.iter_mut().enumerate() {
        let out = o.out.add(r * o.out_stride);
        *a = [_mm256_loadu_ps(out), _mm256_loadu_ps(out.add(8))];
    }
    for ci in 0..o.channels {
        let xr = o.x.add(ci * o.x_stride);
        let wr = o.w.add(ci * o.w_ci);
        for j in 0..o.taps {
            let xp = xr.add(j * o.dilation);
            let (x0, x1) = (_mm256_loadu_ps(xp), _mm256_loadu_ps(xp.add(8)));
            let wj = wr.add(j);
            for (r, a) in acc.iter_mut().enumerate() {
                let wv = _mm256_broadcast_ss(&*wj.add(r * o.w_row));
                a[0] = _mm256_fmadd_ps(wv, x0, a[0]);
                a[1] = _mm256_fmadd_ps(wv, x1, a[1]);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        let out = o.out.add(r * o.out_stride);
        _mm256_storeu_ps(out, a[0]);
        _mm256_storeu_ps(out.add(8), a[1]);
    }
}
