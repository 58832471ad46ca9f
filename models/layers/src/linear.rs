//! The linear projection every architecture uses.

use infer_core::{Result, Tensor, Weights};

/// `y = x Wᵀ + b`; the weight may be quantized.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// Loads `weight` (quantized when `w` asks for it: [`Weights::get_linear`]) and `bias`.
    pub fn load(w: &Weights, out_dim: usize, in_dim: usize, bias: bool) -> Result<Self> {
        let weight = w.get_linear("weight", out_dim, in_dim)?;
        let bias = if bias { Some(w.get_shaped("bias", &[out_dim])?) } else { None };
        Ok(Linear { weight, bias })
    }

    pub fn from_weight(weight: Tensor) -> Self {
        Linear { weight, bias: None }
    }

    /// The weight's dtype (a block format when quantized).
    pub fn weight_dtype(&self) -> infer_core::DType {
        self.weight.dtype()
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.linear(&self.weight, self.bias.as_ref())
    }
}
