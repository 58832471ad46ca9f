//! The SwiGLU feed-forward of the Llama-like decoders.

use infer_core::{Result, Tensor, Weights};

use crate::{Linear, StackedLinear};

/// SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`.
pub struct SwiGlu {
    /// gate and up (one product when quantized at load).
    gate_up: StackedLinear,
    down: Linear,
}

impl SwiGlu {
    pub fn load(w: &Weights, hidden: usize, intermediate: usize, bias: bool) -> Result<Self> {
        Ok(SwiGlu {
            gate_up: StackedLinear::load(
                &[(w.prefixed("gate_proj"), intermediate), (w.prefixed("up_proj"), intermediate)],
                hidden,
                bias,
            )?,
            down: Linear::load(&w.prefixed("down_proj"), hidden, intermediate, bias)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [gate, up]: [Tensor; 2] = self
            .gate_up
            .forward(x)?
            .try_into()
            .map_err(|_| infer_core::Error::backend("gate/up projection: expected two outputs"))?;
        self.down.forward(&gate.silu()?.mul(&up)?)
    }
}
