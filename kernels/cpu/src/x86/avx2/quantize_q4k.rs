//! The Q4_K weight quantizer's search on AVX2.
//!
//! `scale_min` (`crate::ggml::quantize_q4k`) for the 8 sub-blocks of a block at once, one per
//! AVX2 lane: every lane runs the scalar code's operations in its order (sequential sums,
//! multiply then add, no fused multiply-add), and a lane whose levels stop changing keeps that
//! round's result, as the scalar loop breaks.

use std::arch::x86_64::*;

use crate::ggml::quantize_q4k::{QK_K, SUB};

/// Rounds of the search (candle's `ntry`) and the largest level (`nmax`).
const NTRY: usize = 5;
const NMAX: i32 = 15;

/// `nearest_int(t).clamp(0, NMAX)` per lane: `t` is first clamped to [-1, NMAX + 1] (NaN
/// becomes -1, so 0, as `NaN as i32` is), where truncation and remainder are exact.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn level(t: __m256) -> __m256i {
    let t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-1.0)), _mm256_set1_ps(NMAX as f32 + 1.0));
    let trunc = _mm256_cvttps_epi32(t);
    let frac = _mm256_sub_ps(t, _mm256_cvtepi32_ps(trunc));
    let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5)));
    let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(frac, _mm256_set1_ps(-0.5)));
    // The masks are -1 where true: subtracting `up` adds one.
    let rounded = _mm256_add_epi32(_mm256_sub_epi32(trunc, up), down);
    _mm256_min_epi32(_mm256_max_epi32(rounded, _mm256_setzero_si256()), _mm256_set1_epi32(NMAX))
}

/// `f32::total_cmp` order as signed integers: negative values' magnitude bits flipped (an
/// involution, so it also maps back).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn total_order_key(bits: __m256i) -> __m256i {
    _mm256_xor_si256(bits, _mm256_srli_epi32(_mm256_srai_epi32(bits, 31), 1))
}

/// Per lane, the least and the greatest of the 32 values in `f32::total_cmp` order (what
/// `min_by` / `max_by` with it return: -0.0 below +0.0, NaNs by sign at the ends).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn total_order_min_max(cols: &[[f32; 8]; SUB]) -> ([f32; 8], [f32; 8]) {
    let key = |c: &[f32; 8]| total_order_key(_mm256_loadu_si256(c.as_ptr() as *const __m256i));
    let (mut lo, mut hi) = (key(&cols[0]), key(&cols[0]));
    for c in &cols[1..] {
        let k = key(c);
        (lo, hi) = (_mm256_min_epi32(lo, k), _mm256_max_epi32(hi, k));
    }
    let (mut min, mut max) = ([0f32; 8], [0f32; 8]);
    _mm256_storeu_si256(min.as_mut_ptr() as *mut __m256i, total_order_key(lo));
    _mm256_storeu_si256(max.as_mut_ptr() as *mut __m256i, total_order_key(hi));
    (min, max)
}

/// `nearest_int((x + dm) / d).clamp(0, 15)` for the 32 values of a sub-block, as bytes.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn levels(x: &[f32], dm: f32, d: f32, out: &mut [u8]) {
    debug_assert!(x.len() == SUB && out.len() == SUB);
    let (dm, d) = (_mm256_set1_ps(dm), _mm256_set1_ps(d));
    for (x, out) in x.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
        let t = _mm256_div_ps(_mm256_add_ps(_mm256_loadu_ps(x.as_ptr()), dm), d);
        let mut l = [0i32; 8];
        _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, level(t));
        for (o, l) in out.iter_mut().zip(l) {
            *o = l as u8;
        }
    }
}

/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn scales_mins(x: &[f32; QK_K]) -> ([f32; 8], [f32; 8]) {
    // Value i of every sub-block side by side: lane j is sub-block j.
    let mut cols = [[0f32; 8]; SUB];
    for (j, sub) in x.chunks_exact(SUB).enumerate() {
        for (i, &v) in sub.iter().enumerate() {
            cols[i][j] = v;
        }
    }
    let (mut min0, mut iscale0, mut scale0) = ([0f32; 8], [0f32; 8], [0f32; 8]);
    // Lanes still searching: all ones; a constant sub-block is done at once with (0, 0).
    let mut active = [-1i32; 8];
    let (lane_min, lane_max) = total_order_min_max(&cols);
    for j in 0..8 {
        let (min, max) = (lane_min[j], lane_max[j]);
        if max == min {
            // Done with (0, 0): the -0.0 here is negated to the scalar code's +0.0 below.
            active[j] = 0;
            min0[j] = -0.0;
            continue;
        }
        min0[j] = min.min(0.);
        iscale0[j] = NMAX as f32 / (max - min0[j]);
        scale0[j] = 1.0 / iscale0[j];
    }
    let (mut min, mut iscale, mut scale) =
        (_mm256_loadu_ps(min0.as_ptr()), _mm256_loadu_ps(iscale0.as_ptr()), _mm256_loadu_ps(scale0.as_ptr()));
    let mut active = _mm256_loadu_si256(active.as_ptr() as *const __m256i);
    let mut levels = [_mm256_setzero_si256(); SUB];
    // What `Iterator::sum` of f32 starts from (a sum of nothing).
    let sum_start = _mm256_set1_ps(std::iter::empty::<f32>().sum());
    for _ in 0..NTRY {
        if _mm256_testz_si256(active, active) == 1 {
            break;
        }
        let mut sumlx = _mm256_setzero_ps();
        let mut suml2 = _mm256_setzero_si256();
        let mut changed = _mm256_setzero_si256();
        for (col, l) in cols.iter().zip(levels.iter_mut()) {
            let shifted = _mm256_sub_ps(_mm256_loadu_ps(col.as_ptr()), min);
            let li = level(_mm256_mul_ps(iscale, shifted));
            changed = _mm256_or_si256(changed, _mm256_xor_si256(_mm256_cmpeq_epi32(li, *l), _mm256_set1_epi32(-1)));
            *l = li;
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(shifted, _mm256_cvtepi32_ps(li)));
            suml2 = _mm256_add_epi32(suml2, _mm256_mullo_epi32(li, li));
        }
        let new_scale = _mm256_div_ps(sumlx, _mm256_cvtepi32_ps(suml2));
        let mut sum = sum_start;
        for (col, l) in cols.iter().zip(levels.iter()) {
            let term = _mm256_sub_ps(_mm256_loadu_ps(col.as_ptr()), _mm256_mul_ps(new_scale, _mm256_cvtepi32_ps(*l)));
            sum = _mm256_add_ps(sum, term);
        }
        let new_min = _mm256_div_ps(sum, _mm256_set1_ps(SUB as f32));
        // `if min > 0.0 { min = 0.0 }` (NaN stays).
        let positive = _mm256_cmp_ps::<_CMP_GT_OQ>(new_min, _mm256_setzero_ps());
        let new_min = _mm256_blendv_ps(new_min, _mm256_setzero_ps(), positive);
        let new_iscale = _mm256_div_ps(_mm256_set1_ps(1.0), new_scale);
        let keep = _mm256_castsi256_ps(active);
        scale = _mm256_blendv_ps(scale, new_scale, keep);
        min = _mm256_blendv_ps(min, new_min, keep);
        iscale = _mm256_blendv_ps(iscale, new_iscale, keep);
        active = _mm256_and_si256(active, changed);
    }
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    _mm256_storeu_ps(scales.as_mut_ptr(), scale);
    // `-min` (a sign flip: 0 - min would turn -0.0 into +0.0).
    _mm256_storeu_ps(mins.as_mut_ptr(), _mm256_xor_ps(min, _mm256_set1_ps(-0.0)));
    (scales, mins)
}
