//! Q8_0 weight quantization at load (`--quant q8_0`), vectorized and bit for bit candle's
//! `BlockQ8_0::from_float`: scale `amax / 127` stored as f16, values `round(x / d)` rounded
//! half away from zero (Rust's `f32::round`) and saturated to i8. candle's scalar loop calls libm
//! `roundf` per value and was most of a quantized speech model's start-up.

use candle_core::quantized::k_quants::{BlockQ8_0, GgmlType};

/// Values per block.
const QK: usize = 32;
/// Bytes per block: the f16 scale, then 32 signed values (candle's `repr(C)` layout).
const BLOCK_BYTES: usize = 34;

/// Quantizes `xs` (whole blocks) into `ys`, as candle's `BlockQ8_0::from_float` does.
pub fn from_float(xs: &[f32], ys: &mut [BlockQ8_0]) {
    assert_eq!(xs.len(), ys.len() * QK, "Q8_0: {} values for {} blocks", xs.len(), ys.len());
    const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == BLOCK_BYTES);
    #[cfg(target_arch = "x86_64")]
    if infer_cpu_kernels::features().avx2 {
        for (x, y) in xs.chunks_exact(QK).zip(ys.iter_mut()) {
            // SAFETY: `BlockQ8_0` is `repr(C)` plain data of BLOCK_BYTES bytes (asserted above,
            // no padding); AVX2 was just detected.
            let bytes = unsafe { std::slice::from_raw_parts_mut(y as *mut BlockQ8_0 as *mut u8, BLOCK_BYTES) };
            if !unsafe { avx2::block(x, bytes) } {
                BlockQ8_0::from_float(x, std::slice::from_mut(y));
            }
        }
        return;
    }
    BlockQ8_0::from_float(xs, ys);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{BLOCK_BYTES, QK};

    /// One block; `false` (nothing written) when a value is NaN or infinite, which the scalar
    /// code handles (its `max` skips NaN, its `as i8` maps NaN to 0).
    ///
    /// # Safety
    /// The CPU has AVX2; `x` holds QK values and `y` BLOCK_BYTES bytes.
    #[target_feature(enable = "avx2")]
    pub unsafe fn block(x: &[f32], y: &mut [u8]) -> bool {
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
            let step =
                _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), _mm256_or_ps(one, _mm256_and_ps(sign, s)));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candle_blocks(xs: &[f32]) -> Vec<BlockQ8_0> {
        let mut ys = vec![BlockQ8_0::zeros(); xs.len() / QK];
        BlockQ8_0::from_float(xs, &mut ys);
        ys
    }

    fn bytes(ys: &[BlockQ8_0]) -> &[u8] {
        // SAFETY: repr(C) plain data, BLOCK_BYTES each.
        unsafe { std::slice::from_raw_parts(ys.as_ptr() as *const u8, std::mem::size_of_val(ys)) }
    }

    /// Blocks that hit every branch: exact halves (amax 127 gives scale 1), negative halves,
    /// all zeros, a saturating value, tiny and huge magnitudes, NaN and infinities, random data.
    #[test]
    fn vectorized_quantization_matches_candle_bit_for_bit() {
        let mut xs = Vec::new();
        let mut block = |f: &dyn Fn(usize) -> f32| xs.extend((0..QK).map(f));
        block(&|i| if i == 0 { 127.0 } else { i as f32 - 16.5 });
        block(&|i| if i == 31 { -127.0 } else { -(i as f32) - 0.5 });
        block(&|_| 0.0);
        block(&|i| if i == 3 { -0.0 } else { 0.0 });
        block(&|i| (i as f32 * 0.37).sin() * 1e-30);
        block(&|i| (i as f32 * 0.91).cos() * 3e37);
        block(&|i| if i == 7 { f32::NAN } else { i as f32 });
        block(&|i| if i == 9 { f32::INFINITY } else { -(i as f32) });
        block(&|i| if i == 2 { f32::NEG_INFINITY } else { 1.0 });
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..4096 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let scale = f32::from_bits(((state >> 40) as u32 % 60 + 100) << 23);
            block(&|i| {
                let h = state.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(i as u32 * 2);
                ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            });
        }
        let want = candle_blocks(&xs);
        let mut got = vec![BlockQ8_0::zeros(); xs.len() / QK];
        from_float(&xs, &mut got);
        for (b, (g, w)) in bytes(&got).chunks(BLOCK_BYTES).zip(bytes(&want).chunks(BLOCK_BYTES)).enumerate() {
            assert_eq!(g, w, "block {b}: {:?}", &xs[b * QK..(b + 1) * QK]);
        }
    }
}
