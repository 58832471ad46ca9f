//! Activations quantized to 8 bits, the other operand of a quantized matmul (llama.cpp's
//! `Q8_0` for 32-value formats and `Q8_K` for k-quants, with the same rounding), so the inner
//! product is an integer one.
//!
//! Quantization runs once per matmul call on the calling thread, so it is on every decode step's
//! critical path: where the CPU has AVX2 it is done 8 values at a time (bit-identical to the
//! scalar code, which stays the reference and the fallback for non-finite blocks).

use half::f16;

use super::formats::{ActKind, QK8_0, QK_K};

/// `m` rows of `k` quantized values: per block a scale, per 16 values the sum of the q.
pub struct QuantizedActs {
    pub kind: ActKind,
    pub k: usize,
    pub d: Vec<f32>,
    pub q: Vec<i8>,
    pub sums: Vec<i16>,
}

/// One row of [`QuantizedActs`].
#[derive(Clone, Copy)]
pub struct ActRow<'a> {
    pub d: &'a [f32],
    pub q: &'a [i8],
    pub sums: &'a [i16],
}

impl QuantizedActs {
    /// Quantizes `x`, `m` rows of `k` values (`k` a multiple of the block size).
    pub fn new(kind: ActKind, x: &[f32], k: usize) -> QuantizedActs {
        #[cfg(target_arch = "x86_64")]
        if super::isa() >= super::Isa::Avx2 {
            // SAFETY: `isa()` checked avx2, fma and f16c at run time.
            return unsafe { Self::quantize_with(kind, x, k, avx2::quantize_block) };
        }
        // SAFETY: the scalar block function needs no CPU feature.
        unsafe { Self::quantize_with(kind, x, k, quantize_block_scalar) }
    }

    /// The portable path (the reference the SIMD one must match bit for bit).
    pub fn new_scalar(kind: ActKind, x: &[f32], k: usize) -> QuantizedActs {
        // SAFETY: as in `new`.
        unsafe { Self::quantize_with(kind, x, k, quantize_block_scalar) }
    }

    /// Quantizes block by block with `block_fn`, which writes each block's values and sums of 16
    /// and returns its scale.
    ///
    /// # Safety
    /// The CPU must have the features `block_fn` is compiled for.
    unsafe fn quantize_with(
        kind: ActKind,
        x: &[f32],
        k: usize,
        block_fn: unsafe fn(ActKind, &[f32], &mut [i8], &mut [i16]) -> f32,
    ) -> QuantizedActs {
        let m = x.len() / k;
        let block = block_values(kind);
        let blocks = m * k / block;
        let mut acts =
            QuantizedActs { kind, k, d: vec![0f32; blocks], q: vec![0i8; m * k], sums: vec![0i16; m * k / 16] };
        let per_block = acts.q.chunks_exact_mut(block).zip(acts.sums.chunks_exact_mut(block / 16));
        for ((xs, (q, sums)), d) in x.chunks_exact(block).zip(per_block).zip(acts.d.iter_mut()) {
            // SAFETY: the caller checked `block_fn`'s features.
            *d = unsafe { block_fn(kind, xs, q, sums) };
        }
        acts
    }

    pub fn rows(&self) -> usize {
        self.q.len() / self.k
    }

    pub fn row(&self, i: usize) -> ActRow<'_> {
        let k = self.k;
        let per_block = block_values(self.kind);
        let sums = &self.sums[i * k / 16..(i + 1) * k / 16];
        ActRow { d: &self.d[i * k / per_block..(i + 1) * k / per_block], q: &self.q[i * k..(i + 1) * k], sums }
    }
}

fn block_values(kind: ActKind) -> usize {
    match kind {
        ActKind::Q8_0 => QK8_0,
        ActKind::Q8K => QK_K,
    }
}

/// One block: its values into `q`, the sum of every 16 into `sums`; returns the block's scale.
fn quantize_block_scalar(kind: ActKind, xs: &[f32], q: &mut [i8], sums: &mut [i16]) -> f32 {
    let d = match kind {
        ActKind::Q8_0 => quantize_q8_0(xs, q),
        ActKind::Q8K => quantize_q8k(xs, q),
    };
    for (s, g) in sums.iter_mut().zip(q.chunks_exact(16)) {
        *s = g.iter().map(|&v| v as i16).sum();
    }
    d
}

/// Q8_0: scale `amax / 127`, stored rounded to f16 (as llama.cpp's block stores it); the values
/// are rounded from `x * 127 / amax` (ties to even), as llama.cpp's x86 code does.
fn quantize_q8_0(xs: &[f32], q: &mut [i8]) -> f32 {
    let amax = xs.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(xs) {
        *q = (v * id).round_ties_even() as i8;
    }
    f16::from_f32(d).to_f32()
}

/// Q8_K: the scale maps the largest-magnitude value to -127 (f32 scale).
fn quantize_q8k(xs: &[f32], q: &mut [i8]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in xs {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &v) in q.iter_mut().zip(xs) {
        *q = (iscale * v).round_ties_even().min(127.0) as i8;
    }
    1.0 / iscale
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{quantize_block_scalar, ActKind};

    /// [`super::quantize_block_scalar`] 32 values per step: the same `amax` (an exact max), the
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values with exact ties after scaling (k + 0.5 steps of amax / 127), repeated extremes of
    /// both signs, outliers, zeros and denormals.
    fn tricky(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut x: Vec<f32> = (0..n)
            .map(|i| {
                let r = next();
                let u = (r >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                match r % 11 {
                    0 => u * 300.0,
                    1 => 0.0,
                    2 => -0.0,
                    3 => f32::from_bits(1 + (r >> 60) as u32),
                    // Exact halves of 127 steps: ties once scaled by 127 / 127.
                    4 | 5 => ((r >> 32) % 255) as f32 / 2.0 - 63.5,
                    _ => u * if i % 7 == 0 { 9.0 } else { 1.0 },
                }
            })
            .collect();
        // Blocks whose max magnitude is exactly 127 (so the Q8_0 scale is 1 and halves stay
        // ties), blocks led by a negative extreme and by a positive one of the same magnitude.
        for (b, chunk) in x.chunks_mut(32).enumerate() {
            match b % 5 {
                0 => chunk[b % 32] = 127.0,
                1 => {
                    chunk[3] = -127.0;
                    chunk[20] = 127.0;
                }
                2 => {
                    chunk[5] = 127.0;
                    chunk[6] = -127.0;
                }
                3 => chunk.fill(0.0),
                _ => {}
            }
        }
        x
    }

    fn assert_same(a: &QuantizedActs, b: &QuantizedActs, what: &str) {
        assert_eq!(a.q, b.q, "{what}: q");
        assert_eq!(a.sums, b.sums, "{what}: sums");
        let (da, db): (Vec<u32>, Vec<u32>) =
            (a.d.iter().map(|v| v.to_bits()).collect(), b.d.iter().map(|v| v.to_bits()).collect());
        assert_eq!(da, db, "{what}: d");
    }

    #[test]
    fn simd_quantization_matches_scalar_bit_for_bit() {
        for kind in [ActKind::Q8_0, ActKind::Q8K] {
            for seed in 1..40u64 {
                let k = 512;
                let x = tricky(3 * k, seed);
                let fast = QuantizedActs::new(kind, &x, k);
                assert_same(&fast, &QuantizedActs::new_scalar(kind, &x, k), &format!("{kind:?} seed {seed}"));
            }
        }
    }

    #[test]
    fn non_finite_blocks_match_scalar() {
        for kind in [ActKind::Q8_0, ActKind::Q8K] {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut x = tricky(512, 3);
                x[40] = bad;
                x[300] = bad;
                let fast = QuantizedActs::new(kind, &x, 256);
                assert_same(&fast, &QuantizedActs::new_scalar(kind, &x, 256), &format!("{kind:?} {bad}"));
            }
        }
    }

    #[test]
    fn sums_are_the_sums_of_16() {
        let x = tricky(256, 9);
        let a = QuantizedActs::new(ActKind::Q8K, &x, 256);
        for (s, g) in a.sums.iter().zip(a.q.chunks_exact(16)) {
            assert_eq!(*s, g.iter().map(|&v| v as i16).sum::<i16>());
        }
    }
}
