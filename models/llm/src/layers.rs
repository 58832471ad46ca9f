//! Building blocks shared by the decoder architectures, all written against the core op set.

use infer_core::{DType, Result, RopeLayout, Tensor, Weights};

/// `y = x Wᵀ + b`; the weight may be quantized.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn load(w: &Weights, out_dim: usize, in_dim: usize, bias: bool) -> Result<Self> {
        let weight = w.get_shaped("weight", &[out_dim, in_dim])?;
        let bias = if bias { Some(w.get_shaped("bias", &[out_dim])?) } else { None };
        Ok(Linear { weight, bias })
    }

    pub fn from_weight(weight: Tensor) -> Self {
        Linear { weight, bias: None }
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// RMSNorm over the last dim: `x / sqrt(mean(x²) + eps) * weight`.
pub struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    pub fn load(w: &Weights, dim: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm { weight: w.get_shaped("weight", &[dim])?, eps: eps as f32 })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.rms_norm(&self.weight, self.eps)
    }
}

/// SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`.
pub struct SwiGlu {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl SwiGlu {
    pub fn load(w: &Weights, hidden: usize, intermediate: usize, bias: bool) -> Result<Self> {
        Ok(SwiGlu {
            gate: Linear::load(&w.pp("gate_proj"), intermediate, hidden, bias)?,
            up: Linear::load(&w.pp("up_proj"), intermediate, hidden, bias)?,
            down: Linear::load(&w.pp("down_proj"), hidden, intermediate, bias)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate.forward(x)?.silu()?;
        self.down.forward(&gate.mul(&self.up.forward(x)?)?)
    }
}

/// Precomputed RoPE angles: `cos`/`sin` tables of shape (max_positions, rotary_dim / 2).
pub struct Rotary {
    cos: Tensor,
    sin: Tensor,
    pub layout: RopeLayout,
}

impl Rotary {
    /// Standard RoPE, `inv_freq[i] = 1 / base^(2i/dim)`, in f32 as transformers computes it;
    /// the HF checkpoints use the split-half layout.
    pub fn new(w: &Weights, dim: usize, base: f64, max_positions: usize, dtype: DType) -> Result<Self> {
        let inv_freq: Vec<f32> = (0..dim / 2).map(|i| 1.0 / (base as f32).powf((2 * i) as f32 / dim as f32)).collect();
        Self::from_inv_freq(w, &inv_freq, max_positions, dtype)
    }

    pub fn from_inv_freq(w: &Weights, inv_freq: &[f32], max_positions: usize, dtype: DType) -> Result<Self> {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            for f in inv_freq {
                let a = p as f32 * *f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let b = w.backend();
        Ok(Rotary {
            cos: Tensor::from_f32(b, &cos, &[max_positions, half])?.to_dtype(dtype)?,
            sin: Tensor::from_f32(b, &sin, &[max_positions, half])?.to_dtype(dtype)?,
            layout: RopeLayout::SplitHalf,
        })
    }

    /// `x` (b, h, t, d) rotated for positions `offset..offset+t`.
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let t = x.dim(2);
        let cos = self.cos.narrow(0, offset, t)?;
        let sin = self.sin.narrow(0, offset, t)?;
        x.rope(&cos, &sin, self.layout)
    }

    pub fn max_positions(&self) -> usize {
        self.cos.dim(0)
    }
}
