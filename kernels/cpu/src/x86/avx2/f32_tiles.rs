//! The f32 register tiles (`crate::f32_tiles`) on AVX2 + FMA: 8 lanes.

use std::arch::x86_64::*;

use crate::f32_tiles::{column, Lanes, Shape};
use crate::out_ptr::OutPtr;

/// One 8-lane register.
struct Ymm;

/// 8 lanes × 6 weight rows × 2 blocks: 12 accumulators, 2 activation registers, 1 weight.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn units(w: &[f32], xp: &[f32], s: Shape, range: std::ops::Range<usize>, out: &OutPtr) {
    for u in range {
        column::<Ymm, 6>(w, xp, s, u * 6, out);
    }
}

impl Lanes for Ymm {
    const LANES: usize = 8;
    type V = __m256;
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> __m256 {
        _mm256_set1_ps(v)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
}
