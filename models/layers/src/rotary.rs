//! Rotary position embeddings: frequencies, Llama 3 scaling, and per-forward angle tables.
//! A rotary built for fewer dims than the head rotates the leading ones and passes the rest
//! through (partial rotary: `partial_rotary_factor`, `rotary_dim`).

use infer_sdk::{Backend, DType, Error, Result, RopeLayout, Tensor};

/// Rotary position embedding frequencies. Angles are computed per forward for the positions it
/// covers (a few hundred floats), so no table bounds the context length.
pub struct Rotary {
    inv_freq: Vec<f32>,
    layout: RopeLayout,
    dtype: DType,
}

/// The cos/sin of one forward's positions, shared by every layer that uses the same rotary.
pub struct RopeAngles {
    cos: Tensor,
    sin: Tensor,
    layout: RopeLayout,
}

impl Rotary {
    /// Standard RoPE over `dim` dims (the head size, or the rotated part of it),
    /// `inv_freq[i] = 1 / base^(2i/dim)`, in f32 as transformers computes it.
    /// The head size comes from a config file before any weight has confirmed it, so an absurd one
    /// is refused here rather than allocated (published models use 64 to 512).
    pub fn new(dim: usize, base: f64, layout: RopeLayout, dtype: DType) -> Result<Self> {
        const MAX_HEAD_DIM: usize = 1 << 16;
        if dim > MAX_HEAD_DIM {
            return Err(Error::invalid(format!("rotary embedding: head size {dim} is larger than {MAX_HEAD_DIM}")));
        }
        let inv_freq = (0..dim / 2).map(|i| 1.0 / (base as f32).powf((2 * i) as f32 / dim as f32)).collect();
        Ok(Rotary { inv_freq, layout, dtype })
    }

    /// Divides each frequency by a factor (llama3 scaling as GGUF stores it, `rope_freqs`).
    pub fn with_freq_factors(mut self, factors: &[f32]) -> Self {
        for (f, k) in self.inv_freq.iter_mut().zip(factors) {
            *f /= k;
        }
        self
    }

    /// Llama 3.1 frequency scaling (transformers `_compute_llama3_parameters`).
    pub fn llama3_scaled(mut self, s: &Llama3Scaling) -> Self {
        let low_wavelen = s.original_max_position as f32 / s.low_freq_factor;
        let high_wavelen = s.original_max_position as f32 / s.high_freq_factor;
        for f in self.inv_freq.iter_mut() {
            let wavelen = 2.0 * std::f32::consts::PI / *f;
            if wavelen > low_wavelen {
                *f /= s.factor;
            } else if wavelen >= high_wavelen {
                let smooth = (s.original_max_position as f32 / wavelen - s.low_freq_factor)
                    / (s.high_freq_factor - s.low_freq_factor);
                *f = (1.0 - smooth) * *f / s.factor + smooth * *f;
            }
        }
        self
    }

    /// cos/sin for positions `offset..offset+len`, shape (len, dim/2).
    pub fn angles(&self, backend: &Backend, offset: usize, len: usize) -> Result<RopeAngles> {
        self.angles_at(backend, offset..offset + len)
    }

    /// cos/sin for any positions, one row each: several sequences packed along the token axis
    /// give each row its own sequence's position.
    pub fn angles_at(&self, backend: &Backend, positions: impl IntoIterator<Item = usize>) -> Result<RopeAngles> {
        let half = self.inv_freq.len();
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for p in positions {
            for f in &self.inv_freq {
                let a = p as f32 * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let len = cos.len() / half.max(1);
        Ok(RopeAngles {
            cos: Tensor::from_f32(backend, &cos, &[len, half])?.to_dtype(self.dtype)?,
            sin: Tensor::from_f32(backend, &sin, &[len, half])?.to_dtype(self.dtype)?,
            layout: self.layout,
        })
    }
}

impl RopeAngles {
    /// The angles of rows `start..start + len` (positions of a table built once and reused).
    pub fn narrow(&self, start: usize, len: usize) -> Result<RopeAngles> {
        Ok(RopeAngles {
            cos: self.cos.narrow(0, start, len)?,
            sin: self.sin.narrow(0, start, len)?,
            layout: self.layout,
        })
    }

    /// Rows (positions) held.
    pub fn len(&self) -> usize {
        self.cos.dim(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Dims rotated: twice the angles per position.
    pub fn rotary_dim(&self) -> usize {
        2 * self.cos.dim(1)
    }

    /// `x` (b, h, t, d) rotated; when the angles cover fewer than `d` dims, only the leading
    /// [`RopeAngles::rotary_dim`] ones (the rest pass through unchanged).
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let (d, r) = (x.dim(-1), self.rotary_dim());
        if r >= d {
            return x.rope(&self.cos, &self.sin, self.layout);
        }
        let last = x.rank() - 1;
        let rotated = x.narrow(last, 0, r)?.contiguous()?.rope(&self.cos, &self.sin, self.layout)?;
        Tensor::concat(&[&rotated, &x.narrow(last, r, d - r)?], last)
    }
}

/// `rope_scaling` of type llama3.
#[derive(Debug, Clone)]
pub struct Llama3Scaling {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_max_position: usize,
}

#[cfg(test)]
mod tests {
    use infer_backend_candle::CandleBackend;
    use infer_sdk::{DType, RopeLayout, Tensor};

    use super::Rotary;

    #[test]
    fn partial_rotary_rotates_the_leading_dims_and_passes_the_rest() {
        let backend = CandleBackend::backend().unwrap();
        let (heads, t, d, r) = (2, 3, 8, 4);
        let data: Vec<f32> = (0..heads * t * d).map(|i| (i as f32 * 0.61).sin()).collect();
        let x = Tensor::from_f32(&backend, &data, &[1, heads, t, d]).unwrap();
        for layout in [RopeLayout::SplitHalf, RopeLayout::Interleaved] {
            let angles = Rotary::new(r, 10_000.0, layout, DType::F32).unwrap().angles(&backend, 5, t).unwrap();
            let y = angles.apply(&x).unwrap();
            assert_eq!(y.dims(), x.dims());
            let lead = x.narrow(3, 0, r).unwrap().contiguous().unwrap();
            let want = angles.apply(&lead).unwrap().to_vec_f32().unwrap();
            assert_eq!(y.narrow(3, 0, r).unwrap().contiguous().unwrap().to_vec_f32().unwrap(), want);
            let rest = |z: &Tensor| z.narrow(3, r, d - r).unwrap().contiguous().unwrap().to_vec_f32().unwrap();
            assert_eq!(rest(&y), rest(&x));
        }
    }
}
