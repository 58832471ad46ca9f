//! Activations quantized to 8 bits, the other operand of a quantized matmul (llama.cpp's
//! `Q8_0` for 32-value formats and `Q8_K` for k-quants, with the same rounding), so the inner
//! product is an integer one.

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
pub struct ActRow<'a> {
    pub d: &'a [f32],
    pub q: &'a [i8],
    pub sums: &'a [i16],
}

impl QuantizedActs {
    /// Quantizes `x`, `m` rows of `k` values (`k` a multiple of the block size).
    pub fn new(kind: ActKind, x: &[f32], k: usize) -> QuantizedActs {
        let m = x.len() / k;
        let block = match kind {
            ActKind::Q8_0 => QK8_0,
            ActKind::Q8K => QK_K,
        };
        let blocks = m * k / block;
        let mut acts =
            QuantizedActs { kind, k, d: vec![0f32; blocks], q: vec![0i8; m * k], sums: vec![0i16; m * k / 16] };
        for (b, (xs, q)) in x.chunks_exact(block).zip(acts.q.chunks_exact_mut(block)).enumerate() {
            acts.d[b] = match kind {
                ActKind::Q8_0 => quantize_q8_0(xs, q),
                ActKind::Q8K => quantize_q8k(xs, q),
            };
        }
        for (s, g) in acts.sums.iter_mut().zip(acts.q.chunks_exact(16)) {
            *s = g.iter().map(|&v| v as i16).sum();
        }
        acts
    }

    pub fn rows(&self) -> usize {
        self.q.len() / self.k
    }

    pub fn row(&self, i: usize) -> ActRow<'_> {
        let k = self.k;
        let per_block = match self.kind {
            ActKind::Q8_0 => QK8_0,
            ActKind::Q8K => QK_K,
        };
        let sums = &self.sums[i * k / 16..(i + 1) * k / 16];
        ActRow { d: &self.d[i * k / per_block..(i + 1) * k / per_block], q: &self.q[i * k..(i + 1) * k], sums }
    }
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
