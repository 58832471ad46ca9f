//! Activations quantized for the GGML kernels (see [`crate::ggml::act`]), 8 values at a time.

use std::arch::x86_64::*;

use half::f16;

use crate::ggml::act::quantize_block_scalar;
use crate::ggml::formats::ActKind;

/// [`quantize_block_scalar`] 32 values per step: the same `amax` (an exact max), the
/// same scalar scale, the same f32 products, ties-to-even rounding, the same clamp, and
/// integer sums. A block holding a NaN or an infinity goes to the scalar code, whose
/// float-to-int casts (NaN to 0, saturation) the SIMD conversions do not mimic.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_block(kind: ActKind, xs: &[f32], q: &mut [i8], sums: &mut [i16]) -> f32 {
    let n = xs.len();
    debug_assert!(n.is_multiple_of(32) && q.len() == n && sums.len() == n / 16);
    let p = xs.as_ptr();
    let sign = _mm256_set1_ps(-0.0);
    let (mut amax, mut unordered) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n.
        let v = _mm256_loadu_ps(p.add(i));
        // max(|v|, acc) keeps acc where v is NaN, as f32::max does.
        amax = _mm256_max_ps(_mm256_andnot_ps(sign, v), amax);
        unordered = _mm256_or_ps(unordered, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
    }
    let amax = hmax(amax);
    if _mm256_movemask_ps(unordered) != 0 || !amax.is_finite() {
        return quantize_block_scalar(kind, xs, q, sums);
    }
    let (scale, clamp, d) = match kind {
        ActKind::Q8_0 => {
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            (id, false, f16::from_f32(amax / 127.0).to_f32())
        }
        ActKind::Q8K => {
            if amax == 0.0 {
                q.fill(0);
                sums.fill(0);
                return 0.0;
            }
            // The first value of largest magnitude sets the sign (as the scalar scan does).
            let max = first_with_magnitude(xs, amax);
            let iscale = -127.0 / max;
            (iscale, true, 1.0 / iscale)
        }
    };
    let (vs, hi) = (_mm256_set1_ps(scale), _mm256_set1_ps(127.0));
    let round = |v: __m256| {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(v, vs));
        // Exact: r is an integer of magnitude <= 127 (plus rounding slack the clamp or the
        // saturating packs absorb exactly as the scalar `min` / `as i8` do).
        _mm256_cvtps_epi32(if clamp { _mm256_min_ps(r, hi) } else { r })
    };
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let bias = _mm256_set1_epi8(-128);
    for (j, i) in (0..n).step_by(32).enumerate() {
        // SAFETY: i + 32 <= n.
        let a = round(_mm256_loadu_ps(p.add(i)));
        let b = round(_mm256_loadu_ps(p.add(i + 8)));
        let c = round(_mm256_loadu_ps(p.add(i + 16)));
        let e = round(_mm256_loadu_ps(p.add(i + 24)));
        // Saturating packs interleave 128-bit lanes; the permute restores value order.
        let packed = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, e));
        let bytes = _mm256_permutevar8x32_epi32(packed, order);
        _mm256_storeu_si256(q.as_mut_ptr().add(i) as *mut __m256i, bytes);
        // Sums of 16: bias to unsigned, sum absolute differences from 0 (8 bytes per lane).
        let sad = _mm256_sad_epu8(_mm256_xor_si256(bytes, bias), _mm256_setzero_si256());
        let mut l = [0i64; 4];
        _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, sad);
        sums[2 * j] = (l[0] + l[1] - 16 * 128) as i16;
        sums[2 * j + 1] = (l[2] + l[3] - 16 * 128) as i16;
    }
    d
}

#[inline]
#[target_feature(enable = "avx2")]
fn hmax(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
    _mm_cvtss_f32(m)
}

/// The first value of `xs` whose magnitude is `amax` (which one of them has).
#[inline]
#[target_feature(enable = "avx2")]
fn first_with_magnitude(xs: &[f32], amax: f32) -> f32 {
    let (sign, target) = (_mm256_set1_ps(-0.0), _mm256_set1_ps(amax));
    for (i, c) in xs.chunks_exact(8).enumerate() {
        // SAFETY: `c` holds 8 values.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, v), target));
        if hit != 0 {
            return xs[i * 8 + hit.trailing_zeros() as usize];
        }
    }
    amax
}
