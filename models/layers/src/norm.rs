//! RMSNorm, with Gemma's stored-offset convention.

use infer_core::{Result, Tensor, Weights};

/// RMSNorm over the last dim: `x / sqrt(mean(x²) + eps) * weight`.
pub struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    pub fn load(w: &Weights, dim: usize, eps: f64) -> Result<Self> {
        Self::load_offset(w, dim, eps, 0.0)
    }

    /// With `offset` added to the stored weight once at load (Gemma stores `w` for `(1 + w)`).
    pub fn load_offset(w: &Weights, dim: usize, eps: f64, offset: f64) -> Result<Self> {
        let mut weight = w.get_shaped("weight", &[dim])?;
        if offset != 0.0 {
            weight = weight.affine(1.0, offset)?;
        }
        Ok(RmsNorm { weight, eps: eps as f32 })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.rms_norm(&self.weight, self.eps)
    }
}
