//! The SwiGLU feed-forward of the Llama-like decoders.

use infer_core::{Result, Tensor, Weights};

use crate::Linear;

/// SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`.
pub struct SwiGlu {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl SwiGlu {
    pub fn load(w: &Weights, hidden: usize, intermediate: usize, bias: bool) -> Result<Self> {
        Ok(SwiGlu {
            gate: Linear::load(&w.prefixed("gate_proj"), intermediate, hidden, bias)?,
            up: Linear::load(&w.prefixed("up_proj"), intermediate, hidden, bias)?,
            down: Linear::load(&w.prefixed("down_proj"), hidden, intermediate, bias)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate.forward(x)?.silu()?;
        self.down.forward(&gate.mul(&self.up.forward(x)?)?)
    }
}
