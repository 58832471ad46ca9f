//! Q4_K weight quantization at load (`--quant q4_k`), bit for bit candle's
//! `BlockQ4K::from_float`: per 32 values a scale and a min found by candle's iterative search
//! (`make_qkx1_quants`, 15 levels, up to 5 rounds), both stored as 6-bit multiples of the
//! block's f16 `d` / `dmin`, then 4-bit values. The arithmetic is candle's, expression for
//! expression (the same f32 operations in the same order); what changes is cost: candle
//! allocates a vector per 32 values and calls libm `roundf` for every value of every round,
//! which made loading the 0.6B speech model with `--quant q4_k` take ~13 s. The sub-blocks'
//! least and greatest values (`total_cmp` order) and the final levels are vectorized too
//! (4.3-4.8 s -> 2.2 s for that load on a 2-core Xeon), and with AVX-512 two blocks' searches
//! share a 16-lane register (2.2 -> 1.8 s).

use candle_core::quantized::k_quants::BlockQ4K;
use half::f16;

use crate::ggml::formats::q4k_scale_min;

/// Values per block and per sub-block.
const QK_K: usize = 256;
const SUB: usize = 32;
/// Bytes per block: d, dmin (f16), 12 packed 6-bit scales and mins, 128 bytes of nibbles
/// (candle's `repr(C)` layout).
const BLOCK_BYTES: usize = 144;

/// Quantizes `xs` (whole blocks) into `ys`, as candle's `BlockQ4K::from_float` does.
pub fn from_float(xs: &[f32], ys: &mut [BlockQ4K]) {
    assert_eq!(xs.len(), ys.len() * QK_K, "Q4_K: {} values for {} blocks", xs.len(), ys.len());
    const _: () = assert!(std::mem::size_of::<BlockQ4K>() == BLOCK_BYTES);
    let as_bytes = |y: &mut BlockQ4K| -> &mut [u8; BLOCK_BYTES] {
        // SAFETY: `BlockQ4K` is `repr(C)` plain data of BLOCK_BYTES bytes (asserted above).
        let bytes = unsafe { std::slice::from_raw_parts_mut(y as *mut BlockQ4K as *mut u8, BLOCK_BYTES) };
        bytes.try_into().expect("BLOCK_BYTES")
    };
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::half_slices::has_avx512() {
        // Two blocks' searches in one 16-lane register.
        for (x, y) in xs.chunks_exact(2 * QK_K).zip(ys.chunks_exact_mut(2)) {
            let (a, b) = x.split_at(QK_K);
            let (a, b): (&[f32; QK_K], &[f32; QK_K]) = (a.try_into().expect("QK_K"), b.try_into().expect("QK_K"));
            // SAFETY: AVX-512 F/BW checked by `has_avx512`.
            let [found_a, found_b] = unsafe { avx512::scales_mins_pair(a, b) };
            let (ya, yb) = y.split_at_mut(1);
            block(a, found_a, as_bytes(&mut ya[0]));
            block(b, found_b, as_bytes(&mut yb[0]));
        }
        done = xs.len() / (2 * QK_K) * 2;
    }
    for (x, y) in xs[done * QK_K..].chunks_exact(QK_K).zip(&mut ys[done..]) {
        let x: &[f32; QK_K] = x.try_into().expect("QK_K values");
        block(x, scales_mins(x), as_bytes(y));
    }
}

/// `f32::round` (half away from zero) then `as i32` (saturating; NaN gives 0), which is
/// candle's `nearest_int`, without the libm call: below 2^23 the truncation and the remainder
/// are exact, above it every f32 is already an integer.
#[inline]
fn nearest_int(v: f32) -> i32 {
    // 2^23 and beyond, infinities and NaN (which compares false).
    if v.abs() >= 8_388_608.0 || v.is_nan() {
        return v as i32;
    }
    let t = v as i32;
    let frac = v - t as f32;
    // Branch-free: rounding directions are data-dependent and would mispredict.
    t + (frac >= 0.5) as i32 - (frac <= -0.5) as i32
}

/// candle's `make_qkx1_quants(nmax, ntry, x)` for one sub-block: (scale, -min).
fn scale_min(nmax: i32, ntry: usize, x: &[f32; SUB]) -> (f32, f32) {
    let n = x.len();
    let mut l = [0u8; SUB];
    let min = *x.iter().min_by(|a, b| a.total_cmp(b)).unwrap_or(&x[0]);
    let max = *x.iter().max_by(|a, b| a.total_cmp(b)).unwrap_or(&x[0]);
    if max == min {
        return (0.0, 0.0);
    }
    let mut min = min.min(0.);
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    for _ in 0..ntry {
        let mut sumlx = 0.0;
        let mut suml2 = 0;
        let mut did_change = false;
        for (value, l) in x.iter().zip(l.iter_mut()) {
            let li = nearest_int(iscale * (value - min)).clamp(0, nmax);
            if li as u8 != *l {
                *l = li as u8;
                did_change = true;
            }
            sumlx += (value - min) * li as f32;
            suml2 += li * li;
        }
        scale = sumlx / suml2 as f32;
        let sum: f32 = x.iter().zip(l.iter()).map(|(xi, &li)| xi - scale * li as f32).sum();
        min = sum / n as f32;
        if min > 0.0 {
            min = 0.0;
        }
        iscale = 1.0 / scale;
        if !did_change {
            break;
        }
    }
    (scale, -min)
}

/// The (scale, -min) of each of a block's 8 sub-blocks.
fn scales_mins(x: &[f32; QK_K]) -> ([f32; 8], [f32; 8]) {
    #[cfg(target_arch = "x86_64")]
    if infer_cpu_kernels::features().avx2 {
        // SAFETY: AVX2 was just detected.
        return unsafe { avx2::scales_mins(x) };
    }
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    for (j, sub) in x.chunks_exact(SUB).enumerate() {
        (scales[j], mins[j]) = scale_min(15, 5, sub.try_into().expect("SUB values"));
    }
    (scales, mins)
}

/// One block of 256 values into its 144 bytes, given its sub-blocks' (scale, -min).
fn block(x: &[f32; QK_K], (scales, mins): ([f32; 8], [f32; 8]), out: &mut [u8; BLOCK_BYTES]) {
    let max_scale = scales.iter().fold(0.0, |max, &val| val.max(max));
    let max_min = mins.iter().fold(0.0, |max, &val| val.max(max));
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };

    let mut packed = [0u8; 12];
    for j in 0..QK_K / SUB {
        let ls = nearest_int(inv_scale * scales[j]).min(63) as u8;
        let lm = nearest_int(inv_min * mins[j]).min(63) as u8;
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (f16::from_f32(max_scale / 63.0), f16::from_f32(max_min / 63.0));

    let mut l = [0u8; QK_K];
    for j in 0..QK_K / SUB {
        let (sc, m) = q4k_scale_min(&packed, j);
        let d = d.to_f32() * sc as f32;
        if d != 0.0 {
            let dm = dmin.to_f32() * m as f32;
            let (xs, ls) = (&x[SUB * j..SUB * (j + 1)], &mut l[SUB * j..SUB * (j + 1)]);
            #[cfg(target_arch = "x86_64")]
            if infer_cpu_kernels::features().avx2 {
                // SAFETY: AVX2 was just detected.
                unsafe { avx2::levels(xs, dm, d, ls) };
                continue;
            }
            for (l, &x) in ls.iter_mut().zip(xs) {
                *l = nearest_int((x + dm) / d).clamp(0, 15) as u8;
            }
        }
    }

    out[0..2].copy_from_slice(&d.to_le_bytes());
    out[2..4].copy_from_slice(&dmin.to_le_bytes());
    out[4..16].copy_from_slice(&packed);
    // Nibbles: low halves hold values 64i..64i+32, high halves 64i+32..64i+64.
    for (i, q) in out[16..].chunks_exact_mut(32).enumerate() {
        for (v, q) in q.iter_mut().enumerate() {
            *q = l[64 * i + v] | (l[64 * i + v + 32] << 4);
        }
    }
}

/// [`scale_min`] for the 8 sub-blocks of a block at once, one per AVX2 lane: every lane runs
/// the scalar code's operations in its order (sequential sums, multiply then add, no fused
/// multiply-add), and a lane whose levels stop changing keeps that round's result, as the
/// scalar loop breaks.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{QK_K, SUB};

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
    pub unsafe fn levels(x: &[f32], dm: f32, d: f32, out: &mut [u8]) {
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
    pub unsafe fn scales_mins(x: &[f32; QK_K]) -> ([f32; 8], [f32; 8]) {
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
                let term =
                    _mm256_sub_ps(_mm256_loadu_ps(col.as_ptr()), _mm256_mul_ps(new_scale, _mm256_cvtepi32_ps(*l)));
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
}

/// [`scale_min`] for the 16 sub-blocks of two blocks at once, one per AVX-512 lane (block `a`
/// in lanes 0..8): every lane runs the scalar code's operations in its order, as `avx2` does.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{QK_K, SUB};

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
    pub unsafe fn scales_mins_pair(a: &[f32; QK_K], b: &[f32; QK_K]) -> [([f32; 8], [f32; 8]); 2] {
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
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::k_quants::GgmlType;

    use super::*;

    fn bytes(ys: &[BlockQ4K]) -> &[u8] {
        // SAFETY: repr(C) plain data, BLOCK_BYTES each.
        unsafe { std::slice::from_raw_parts(ys.as_ptr() as *const u8, std::mem::size_of_val(ys)) }
    }

    #[test]
    fn nearest_int_is_round_then_saturating_cast() {
        let cases = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            0.49999997,
            -0.49999997,
            8_388_607.5,
            -8_388_607.5,
            8_388_608.0,
            1e10,
            -1e10,
            f32::MAX,
            f32::MIN,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
        ];
        for v in cases {
            assert_eq!(nearest_int(v), v.round() as i32, "{v}");
        }
    }

    /// Blocks that hit every branch (constant and all-zero sub-blocks, all-negative and
    /// all-positive data, tiny and huge magnitudes, NaN and infinities) and random data with
    /// outliers.
    #[test]
    fn quantization_matches_candle_bit_for_bit() {
        let mut xs = Vec::new();
        let mut block = |f: &dyn Fn(usize) -> f32| xs.extend((0..QK_K).map(f));
        block(&|_| 0.0);
        block(&|_| -0.0);
        block(&|i| if i < 32 { 1.25 } else { (i as f32 * 0.3).sin() });
        block(&|i| if i < 128 { 0.0 } else { (i as f32 * 0.7).cos() });
        block(&|i| if i % 32 == 0 { 0.5 } else { 0.25 });
        block(&|i| -(i as f32) - 0.5);
        block(&|i| i as f32 * 0.125 + 3.0);
        block(&|i| (i as f32 * 0.37).sin() * 1e-30);
        block(&|i| (i as f32 * 0.91).cos() * 3e30);
        block(&|i| if i == 7 { f32::NAN } else { i as f32 });
        block(&|i| if i == 40 { f32::INFINITY } else { -(i as f32) });
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for b in 0..512 {
            block(&|i| {
                let mut s = state ^ (b as u64).wrapping_mul(0x9E37_79B9) ^ i as u64;
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                if i % 61 == 5 {
                    u * 12.0
                } else {
                    u * 0.05
                }
            });
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
        // The lane-parallel search gives the scalar search's floats exactly (before the 6-bit
        // rounding of the block could hide a difference), 8 lanes and 16.
        #[cfg(target_arch = "x86_64")]
        if crate::half_slices::has_avx512() {
            for pair in xs.chunks_exact(2 * QK_K) {
                let (a, b) = pair.split_at(QK_K);
                // SAFETY: AVX-512 F/BW checked just above.
                let found = unsafe { avx512::scales_mins_pair(a.try_into().unwrap(), b.try_into().unwrap()) };
                for (x, (scales, mins)) in [a, b].into_iter().zip(found) {
                    for (j, sub) in x.chunks_exact(SUB).enumerate() {
                        let (scale, min) = scale_min(15, 5, sub.try_into().unwrap());
                        assert_eq!(
                            (scales[j].to_bits(), mins[j].to_bits()),
                            (scale.to_bits(), min.to_bits()),
                            "{sub:?}"
                        );
                    }
                }
            }
        }
        for x in xs.chunks_exact(QK_K) {
            let (scales, mins) = scales_mins(x.try_into().unwrap());
            for (j, sub) in x.chunks_exact(SUB).enumerate() {
                let (scale, min) = scale_min(15, 5, sub.try_into().unwrap());
                assert_eq!((scales[j].to_bits(), mins[j].to_bits()), (scale.to_bits(), min.to_bits()), "{sub:?}");
            }
        }
        let n = xs.len() / QK_K;
        let (mut ours, mut theirs) = (vec![BlockQ4K::zeros(); n], vec![BlockQ4K::zeros(); n]);
        from_float(&xs, &mut ours);
        BlockQ4K::from_float(&xs, &mut theirs);
        for (i, (a, b)) in bytes(&ours).chunks(BLOCK_BYTES).zip(bytes(&theirs).chunks(BLOCK_BYTES)).enumerate() {
            assert_eq!(a, b, "block {i}");
        }
    }
}
