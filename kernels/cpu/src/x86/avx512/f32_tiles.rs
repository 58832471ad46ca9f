//! The f32 register tiles (`crate::f32_tiles`) on AVX-512F: 16 lanes.

use std::arch::x86_64::*;

use crate::f32_tiles::{column, scalar_columns, Lanes, Shape};
use crate::out_ptr::OutPtr;

/// One 16-lane register.
struct Zmm;

/// 16 lanes × 8 weight rows × 2 blocks: 16 accumulators, 2 activation registers, 1 weight.
#[target_feature(enable = "avx512f,avx512vl")]
pub(crate) unsafe fn units(w: &[f32], xp: &[f32], s: Shape, range: std::ops::Range<usize>, out: &OutPtr) {
    for u in range {
        column::<Zmm, 8>(w, xp, s, u * 8, out);
    }
}

impl Lanes for Zmm {
    const LANES: usize = 16;
    type V = __m512;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m512 {
        _mm512_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn store_columns<const NR: usize>(v: &[__m512; NR], out: *mut f32, stride: usize, rows: usize, cols: usize) {
        if NR == 8 {
            // SAFETY: NR is 8, so `v` is a [__m512; 8]; the caller writes with AVX-512 F/VL.
            super::simd::store_columns8(&*(v.as_ptr() as *const [__m512; 8]), out, stride, rows, cols)
        } else {
            scalar_columns::<Self, NR>(v, out, stride, rows, cols)
        }
    }
}
