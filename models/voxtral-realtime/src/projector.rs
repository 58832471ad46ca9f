//! Frame stacking and the audio-to-text projector (transformers
//! `VoxtralRealtimeMultiModalProjector`): every `downsample_factor` consecutive encoder frames are
//! concatenated, then `Linear -> GELU (erf) -> Linear` (no biases) maps them to one decoder
//! embedding per 80 ms.

use infer_core::{Result, Tensor, Weights};
use infer_layers::Linear;

use crate::config::Params;

pub struct Projector {
    linear_1: Linear,
    linear_2: Linear,
    stack: usize,
}

impl Projector {
    /// `w` is the checkpoint under `multi_modal_projector`.
    pub fn load(w: &Weights, p: &Params) -> Result<Self> {
        let (inp, out) = (p.encoder.hidden * p.downsample_factor, p.decoder.hidden);
        Ok(Projector {
            linear_1: Linear::load(&w.prefixed("linear_1"), out, inp, false)?,
            linear_2: Linear::load(&w.prefixed("linear_2"), out, out, false)?,
            stack: p.downsample_factor,
        })
    }

    /// Encoder frames `(1, t, d)`, `t` a multiple of the stack, -> `(1, t / stack, hidden)`.
    pub fn forward(&self, frames: &Tensor) -> Result<Tensor> {
        let (b, t, d) = (frames.dim(0), frames.dim(1), frames.dim(2));
        let stacked = frames.reshape(&[b, t / self.stack, d * self.stack])?;
        self.linear_2.forward(&self.linear_1.forward(&stacked)?.gelu_erf()?)
    }
}
