//! The gated feed-forward of the Llama-like decoders: `down(act(gate(x)) * up(x))`, SwiGLU
//! (SiLU) or GeGLU (Gemma's tanh GELU).

use infer_sdk::{Result, Tensor, Weights};

use crate::{Linear, StackedLinear};

/// The gate's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// SwiGLU (Llama, Qwen, Mistral).
    #[default]
    Silu,
    /// GELU, tanh approximation (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
    /// GELU, exact.
    GeluErf,
}

impl Activation {
    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Silu => x.silu(),
            Activation::GeluTanh => x.gelu_tanh(),
            Activation::GeluErf => x.gelu_erf(),
        }
    }
}

/// Sizes and quirks of a [`GatedMlp`]; [`MlpConfig::new`] gives SwiGLU without biases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlpConfig {
    pub hidden: usize,
    pub intermediate: usize,
    pub activation: Activation,
    /// gate and up carry biases.
    pub gate_up_bias: bool,
    /// down carries a bias.
    pub down_bias: bool,
    /// gate and up run as one product when quantized at load ([`StackedLinear`]); `false` keeps
    /// two products (the same numbers either way).
    pub stack_gate_up: bool,
}

impl MlpConfig {
    pub fn new(hidden: usize, intermediate: usize) -> Self {
        MlpConfig {
            hidden,
            intermediate,
            activation: Activation::Silu,
            gate_up_bias: false,
            down_bias: false,
            stack_gate_up: true,
        }
    }

    pub fn activation(mut self, a: Activation) -> Self {
        self.activation = a;
        self
    }

    /// Biases on gate/up and on down.
    pub fn biases(mut self, gate_up: bool, down: bool) -> Self {
        (self.gate_up_bias, self.down_bias) = (gate_up, down);
        self
    }

    pub fn stack_gate_up(mut self, stack: bool) -> Self {
        self.stack_gate_up = stack;
        self
    }
}

enum GateUp {
    /// gate and up (one product when quantized at load).
    Stacked(StackedLinear),
    Separate(Linear, Linear),
}

/// Gated feed-forward: `down(act(gate(x)) * up(x))`, weights `gate_proj`, `up_proj`, `down_proj`.
pub struct GatedMlp {
    gate_up: GateUp,
    down: Linear,
    activation: Activation,
}

/// The SwiGLU feed-forward ([`GatedMlp`] with SiLU).
pub type SwiGlu = GatedMlp;

impl GatedMlp {
    /// SwiGLU with `bias` on all three projections.
    pub fn load(w: &Weights, hidden: usize, intermediate: usize, bias: bool) -> Result<Self> {
        Self::load_config(w, &MlpConfig::new(hidden, intermediate).biases(bias, bias))
    }

    pub fn load_config(w: &Weights, c: &MlpConfig) -> Result<Self> {
        let (h, i) = (c.hidden, c.intermediate);
        let gate_up = if c.stack_gate_up {
            GateUp::Stacked(StackedLinear::load(
                &[(w.prefixed("gate_proj"), i), (w.prefixed("up_proj"), i)],
                h,
                c.gate_up_bias,
            )?)
        } else {
            GateUp::Separate(
                Linear::load(&w.prefixed("gate_proj"), i, h, c.gate_up_bias)?,
                Linear::load(&w.prefixed("up_proj"), i, h, c.gate_up_bias)?,
            )
        };
        Ok(GatedMlp {
            gate_up,
            down: Linear::load(&w.prefixed("down_proj"), h, i, c.down_bias)?,
            activation: c.activation,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let act = self.activation;
        let h = match &self.gate_up {
            GateUp::Stacked(s) => {
                let [gate, up]: [Tensor; 2] = s
                    .forward(x)?
                    .try_into()
                    .map_err(|_| infer_sdk::Error::backend("gate/up projection: expected two outputs"))?;
                act.apply(&gate)?.mul(&up)?
            }
            GateUp::Separate(gate, up) => act.apply(&gate.forward(x)?)?.mul(&up.forward(x)?)?,
        };
        self.down.forward(&h)
    }
}
