//! The Q8_0 weight quantizer (`crate::ggml::quantize_q8_0`) on AVX2.

use std::arch::x86_64::*;

use crate::ggml::quantize_q8_0::{BLOCK_BYTES, QK};

/// One block; `false` (nothing written) when a value is NaN or infinite, which the scalar
/// code handles (its `max` skips NaN, its `as i8` maps NaN to 0).
///
/// # Safety
/// The CPU has AVX2; `x` holds QK values and `y` BLOCK_BYTES bytes.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn block(x: &[f32], y: &mut [u8]) -> bool {
    debug_assert!(x.len() == QK && y.len() == BLOCK_BYTES);
    let p = x.as_ptr();
    let v = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))];
    let sign = _mm256_set1_ps(-0.0);
    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut amax = _mm256_setzero_ps();
    let mut bad = _mm256_setzero_ps();
    for &v in &v {
        let a = _mm256_andnot_ps(sign, v);
        // Not less than infinity (unordered included): NaN or ±inf.
        bad = _mm256_or_ps(bad, _mm256_cmp_ps::<_CMP_NLT_UQ>(a, inf));
        amax = _mm256_max_ps(amax, a);
    }
    if _mm256_movemask_ps(bad) != 0 {
        return false;
    }
    let m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps::<1>(amax));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    let amax = _mm_cvtss_f32(m);
    // The same scalar arithmetic as candle's.
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    y[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
    let vid = _mm256_set1_ps(id);
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    // round half away from zero: trunc, plus the sign where the dropped part is >= 0.5
    // (`s - t` is exact for |s| < 2^23, and |s| <= 127 plus rounding here).
    let round = |v: __m256| {
        let s = _mm256_mul_ps(v, vid);
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(s);
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(s, t));
        let step = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), _mm256_or_ps(one, _mm256_and_ps(sign, s)));
        _mm256_cvttps_epi32(_mm256_add_ps(t, step))
    };
    let (a, b, c, e) = (round(v[0]), round(v[1]), round(v[2]), round(v[3]));
    // Saturating packs (as Rust's `as i8` saturates), then undo AVX2's per-lane interleave.
    let ab = _mm256_packs_epi32(a, b);
    let ce = _mm256_packs_epi32(c, e);
    let q = _mm256_packs_epi16(ab, ce);
    let q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(y.as_mut_ptr().add(2) as *mut __m256i, q);
    true
}
