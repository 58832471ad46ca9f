//! The normalization layers: RMSNorm (with Gemma's stored-offset convention), LayerNorm (with an
//! optional bias), and [`Norm`], either one chosen by a config.

use infer_sdk::{Result, Tensor, Weights};

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

/// LayerNorm over the last dim: `(x - mean) / sqrt(var + eps) * weight (+ bias)`, the core
/// `layer_norm` op.
pub struct LayerNorm {
    weight: Tensor,
    bias: Option<Tensor>,
    eps: f32,
}

impl LayerNorm {
    /// Loads `weight` and, when `bias`, `bias`.
    pub fn load(w: &Weights, dim: usize, eps: f64, bias: bool) -> Result<Self> {
        let bias = if bias { Some(w.get_shaped("bias", &[dim])?) } else { None };
        Ok(LayerNorm { weight: w.get_shaped("weight", &[dim])?, bias, eps: eps as f32 })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.layer_norm(&self.weight, self.bias.as_ref(), self.eps)
    }
}

/// Which normalization a layer uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NormKind {
    /// RMSNorm; `offset` is added to the stored weight at load (Gemma's `(1 + w)`: 1).
    Rms { offset: f64 },
    /// LayerNorm, with or without a bias.
    Layer { bias: bool },
}

impl NormKind {
    /// RMSNorm with the weight used as stored.
    pub const RMS: NormKind = NormKind::Rms { offset: 0.0 };
}

impl Default for NormKind {
    fn default() -> Self {
        NormKind::RMS
    }
}

/// An RMSNorm or a LayerNorm, as a [`NormKind`] says.
pub enum Norm {
    Rms(RmsNorm),
    Layer(LayerNorm),
}

impl Norm {
    pub fn load(w: &Weights, kind: NormKind, dim: usize, eps: f64) -> Result<Self> {
        Ok(match kind {
            NormKind::Rms { offset } => Norm::Rms(RmsNorm::load_offset(w, dim, eps, offset)?),
            NormKind::Layer { bias } => Norm::Layer(LayerNorm::load(w, dim, eps, bias)?),
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Norm::Rms(n) => n.forward(x),
            Norm::Layer(n) => n.forward(x),
        }
    }
}
