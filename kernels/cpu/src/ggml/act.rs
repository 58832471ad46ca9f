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
        if crate::isa() >= crate::Isa::Avx2 {
            // SAFETY: `isa()` checked avx2, fma and f16c at run time.
            return unsafe { Self::quantize_with(kind, x, k, crate::x86::avx2::ggml_act::quantize_block) };
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
pub(crate) fn quantize_block_scalar(kind: ActKind, xs: &[f32], q: &mut [i8], sums: &mut [i16]) -> f32 {
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
