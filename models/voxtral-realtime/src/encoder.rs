//! The causal audio encoder (transformers `VoxtralRealtimeEncoder`):
//!
//! ```text
//! log-mel (1, 128, T) -> causal conv k3 s1 + GELU -> causal conv k3 s2 + GELU -> (1, T/2, d)
//!   -> N x [RMSNorm -> RoPE self-attention (sliding window) -> + ; RMSNorm -> SwiGLU -> +]
//!   -> RMSNorm
//! ```
//!
//! It runs incrementally: [`EncoderState`] carries the convolutions' left context (the last two
//! mel frames, the last conv1 frame) and a sliding-window KV cache per layer, so feeding the mel in
//! pieces gives the frames of one pass over the whole mel (transformers applies the sliding window
//! offline too), and a session holds at most `window` keys per layer however long it runs.
//! Attention: q, v and o projections carry biases, k does not (Whisper); the MLP's down projection
//! carries one.

use infer_core::{Backend, Conv1dParams, DType, LayerCache, Result, RopeLayout, Tensor, Weights};
use infer_layers::{
    AttentionConfig, BlockConfig, BlockNames, DecoderBlock, KvTarget, MlpConfig, ProjectionBias, RmsNorm, Rotary,
};

use crate::config::EncoderParams;

/// A causal 1-D convolution whose left padding comes from the previous chunk.
struct CausalConv {
    weight: Tensor,
    bias: Tensor,
    stride: usize,
    /// Input frames carried between chunks (kernel - stride).
    context: usize,
}

impl CausalConv {
    fn load(w: &Weights, out_ch: usize, in_ch: usize, kernel: usize, stride: usize) -> Result<Self> {
        Ok(CausalConv {
            weight: w.get_shaped("weight", &[out_ch, in_ch, kernel])?,
            bias: w.get_shaped("bias", &[out_ch])?,
            stride,
            context: kernel - stride,
        })
    }

    /// `x` (1, c, t) after `tail` (1, c, context): returns the outputs and the new tail.
    fn forward(&self, tail: &Tensor, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let input = Tensor::concat(&[tail, x], 2)?;
        let len = input.dim(2);
        let new_tail = input.narrow(2, len - self.context, self.context)?.contiguous()?;
        let p = Conv1dParams { stride: self.stride, ..Conv1dParams::default() };
        Ok((input.conv1d(&self.weight, Some(&self.bias), p)?.gelu_erf()?, new_tail))
    }
}

/// The blocks' shape: pre-norm RMSNorm, biases on q, v, o and on the MLP's down projection
/// (separate products, as the checkpoint stores them), the sliding window.
fn block_config(p: &EncoderParams) -> BlockConfig {
    let bias = ProjectionBias { k: false, ..ProjectionBias::ALL };
    let attention = AttentionConfig::new(p.hidden, p.heads, p.heads, p.head_dim).bias(bias).window(p.window);
    let mlp = MlpConfig::new(p.hidden, p.intermediate).biases(false, true).stack_gate_up(false);
    BlockConfig::new(attention, mlp, p.rms_eps).names(BlockNames::WHISPER)
}

/// What the encoder remembers between chunks of one stream.
#[derive(Clone)]
pub struct EncoderState {
    mel_tail: Tensor,
    conv1_tail: Tensor,
    caches: Vec<LayerCache>,
    /// Encoder frames produced so far (the next frame's RoPE position).
    position: usize,
}

impl EncoderState {
    /// A copy whose caches are its own (see `LayerCache::detached`); the tails are replaced,
    /// never written, so they are shared.
    pub fn detached(&self) -> Result<Self> {
        let caches = self.caches.iter().map(LayerCache::detached).collect::<Result<_>>()?;
        Ok(EncoderState { caches, ..self.clone() })
    }
}

pub struct AudioEncoder {
    conv1: CausalConv,
    conv2: CausalConv,
    layers: Vec<DecoderBlock>,
    norm: RmsNorm,
    rotary: Rotary,
    params: EncoderParams,
}

impl AudioEncoder {
    /// `w` is the checkpoint under `audio_tower`.
    pub fn load(w: &Weights, p: &EncoderParams, rope: RopeLayout) -> Result<Self> {
        let block = block_config(p);
        Ok(AudioEncoder {
            conv1: CausalConv::load(&w.prefixed("embedder.conv1"), p.hidden, p.num_mel_bins, 3, 1)?,
            conv2: CausalConv::load(&w.prefixed("embedder.conv2"), p.hidden, p.hidden, 3, 2)?,
            layers: DecoderBlock::load_stack(w, p.layers, |_| block.clone())?,
            norm: RmsNorm::load(&w.prefixed("norm"), p.hidden, p.rms_eps)?,
            rotary: Rotary::new(p.head_dim, p.rope_theta, rope, w.dtype())?,
            params: p.clone(),
        })
    }

    /// A fresh stream: zero left context, empty caches.
    pub fn start(&self, backend: &Backend, dtype: DType) -> Result<EncoderState> {
        let p = &self.params;
        Ok(EncoderState {
            mel_tail: Tensor::zeros(backend, dtype, &[1, p.num_mel_bins, self.conv1.context])?,
            conv1_tail: Tensor::zeros(backend, dtype, &[1, p.hidden, self.conv2.context])?,
            caches: (0..p.layers).map(|_| LayerCache::new(p.window)).collect(),
            position: 0,
        })
    }

    /// The next mel frames `(1, n_mels, t)`, `t` even, -> encoder frames `(1, t/2, hidden)`.
    pub fn forward(&self, state: &mut EncoderState, mel: &Tensor) -> Result<Tensor> {
        let (h1, mel_tail) = self.conv1.forward(&state.mel_tail, mel)?;
        let (h2, conv1_tail) = self.conv2.forward(&state.conv1_tail, &h1)?;
        state.mel_tail = mel_tail;
        state.conv1_tail = conv1_tail;
        let mut x = h2.transpose(1, 2)?.contiguous()?;
        let t = x.dim(1);
        let rope = self.rotary.angles(x.backend(), state.position, t)?;
        for (layer, cache) in self.layers.iter().zip(state.caches.iter_mut()) {
            x = layer.forward(&x, &rope, &mut KvTarget::One { cache, mask: None })?;
        }
        state.position += t;
        self.norm.forward(&x)
    }
}
