//! The Q4_K weight quantizer's search on AVX-512 F/BW.
//!
//! `scale_min` (`crate::ggml::quantize_q4k`) for the 16 sub-blocks of two blocks at once, one
//! per AVX-512 lane (block `a` in lanes 0..8): every lane runs the scalar code's operations in
//! its order, as the AVX2 search does.

use std::arch::x86_64::*;

use crate::ggml::quantize_q4k::{QK_K, SUB};

const NTRY: usize = 5;
const NMAX: i32 = 15;

/// `nearest_int(t).clamp(0, NMAX)` per lane (as `avx2::level`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn level(t: __m512) -> __m512i {
    let t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-1.0)), _mm512_set1_ps(NMAX as f32 + 1.0));
    let trunc = _mm512_cvttps_epi32(t);
    let frac = _mm512_sub_ps(t, _mm512_cvtepi32_ps(trunc));
    let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(frac, _mm512_set1_ps(0.5));
    let down = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(frac, _mm512_set1_ps(-0.5));
    let one = _mm512_set1_epi32(1);
    let rounded = _mm512_mask_sub_epi32(_mm512_mask_add_epi32(trunc, up, trunc, one), down, trunc, one);
    _mm512_min_epi32(_mm512_max_epi32(rounded, _mm512_setzero_si512()), _mm512_set1_epi32(NMAX))
}

/// `f32::total_cmp` order as signed integers (see `avx2::total_order_key`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn total_order_key(bits: __m512i) -> __m512i {
    _mm512_xor_si512(bits, _mm512_srli_epi32(_mm512_srai_epi32(bits, 31), 1))
}

/// # Safety
/// The CPU has AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn scales_mins_pair(a: &[f32; QK_K], b: &[f32; QK_K]) -> [([f32; 8], [f32; 8]); 2] {
    // Value i of every sub-block side by side: lane j < 8 is sub-block j of `a`, lane
    // 8 + j sub-block j of `b`.
    let mut cols = [[0f32; 16]; SUB];
    for (half, x) in [a, b].into_iter().enumerate() {
        for (j, sub) in x.chunks_exact(SUB).enumerate() {
            for (i, &v) in sub.iter().enumerate() {
                cols[i][8 * half + j] = v;
            }
        }
    }
    let col = |i: usize| _mm512_loadu_ps(cols[i].as_ptr());
    let key = |i: usize| total_order_key(_mm512_castps_si512(col(i)));
    let (mut lo, mut hi) = (key(0), key(0));
    for i in 1..SUB {
        (lo, hi) = (_mm512_min_epi32(lo, key(i)), _mm512_max_epi32(hi, key(i)));
    }
    let (mut lane_min, mut lane_max) = ([0f32; 16], [0f32; 16]);
    _mm512_storeu_si512(lane_min.as_mut_ptr() as *mut __m512i, total_order_key(lo));
    _mm512_storeu_si512(lane_max.as_mut_ptr() as *mut __m512i, total_order_key(hi));
    let (mut min0, mut iscale0, mut scale0) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    // Lanes still searching; a constant sub-block is done at once with (0, 0).
    let mut active: __mmask16 = 0xFFFF;
    for j in 0..16 {
        let (lo, hi) = (lane_min[j], lane_max[j]);
        if hi == lo {
            // Done with (0, 0): the -0.0 here is negated to the scalar code's +0.0 below.
            active &= !(1 << j);
            min0[j] = -0.0;
            continue;
        }
        min0[j] = lo.min(0.);
        iscale0[j] = NMAX as f32 / (hi - min0[j]);
        scale0[j] = 1.0 / iscale0[j];
    }
    let (mut min, mut iscale, mut scale) =
        (_mm512_loadu_ps(min0.as_ptr()), _mm512_loadu_ps(iscale0.as_ptr()), _mm512_loadu_ps(scale0.as_ptr()));
    let mut levels = [_mm512_setzero_si512(); SUB];
    // What `Iterator::sum` of f32 starts from (a sum of nothing).
    let sum_start = _mm512_set1_ps(std::iter::empty::<f32>().sum());
    for _ in 0..NTRY {
        if active == 0 {
            break;
        }
        let mut sumlx = _mm512_setzero_ps();
        let mut suml2 = _mm512_setzero_si512();
        let mut changed: __mmask16 = 0;
        for (i, l) in levels.iter_mut().enumerate() {
            let shifted = _mm512_sub_ps(col(i), min);
            let li = level(_mm512_mul_ps(iscale, shifted));
            changed |= _mm512_cmpneq_epi32_mask(li, *l);
            *l = li;
            sumlx = _mm512_add_ps(sumlx, _mm512_mul_ps(shifted, _mm512_cvtepi32_ps(li)));
            suml2 = _mm512_add_epi32(suml2, _mm512_mullo_epi32(li, li));
        }
        let new_scale = _mm512_div_ps(sumlx, _mm512_cvtepi32_ps(suml2));
        let mut sum = sum_start;
        for (i, l) in levels.iter().enumerate() {
            sum = _mm512_add_ps(sum, _mm512_sub_ps(col(i), _mm512_mul_ps(new_scale, _mm512_cvtepi32_ps(*l))));
        }
        let new_min = _mm512_div_ps(sum, _mm512_set1_ps(SUB as f32));
        // `if min > 0.0 { min = 0.0 }` (NaN stays).
        let positive = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(new_min, _mm512_setzero_ps());
        let new_min = _mm512_mask_blend_ps(positive, new_min, _mm512_setzero_ps());
        let new_iscale = _mm512_div_ps(_mm512_set1_ps(1.0), new_scale);
        scale = _mm512_mask_blend_ps(active, scale, new_scale);
        min = _mm512_mask_blend_ps(active, min, new_min);
        iscale = _mm512_mask_blend_ps(active, iscale, new_iscale);
        active &= changed;
    }
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    _mm512_storeu_ps(scales.as_mut_ptr(), scale);
    // `-min` (a sign flip: 0 - min would turn -0.0 into +0.0).
    _mm512_storeu_ps(mins.as_mut_ptr(), _mm512_xor_ps(min, _mm512_set1_ps(-0.0)));
    let half = |v: &[f32; 16], h: usize| -> [f32; 8] { v[8 * h..8 * h + 8].try_into().expect("8 lanes") };
    [(half(&scales, 0), half(&mins, 0)), (half(&scales, 1), half(&mins, 1))]
}
