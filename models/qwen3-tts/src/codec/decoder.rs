//! Codes -> waveform (`decoder.*`, the reference's `Qwen3TTSTokenizerV2Decoder`):
//!
//! ```text
//! codes [16, T] -> split RVQ lookup + output projections      -> [codebook_dim, T]
//!   -> pre-conv (causal, k=3)                                 -> [latent, T]
//!   -> pre-transformer (input_proj, N x sliding-window layer, norm, output_proj)
//!   -> 2 x (causal conv-transpose x2, ConvNeXt block)         -> [latent, 4T]
//!   -> conv (k=7) -> 4 x BigVGAN block (SnakeBeta, causal conv-transpose x r, 3 residual units)
//!   -> SnakeBeta -> conv (k=7, 1 channel) -> clamp(-1, 1)     -> [1920 T] samples
//! ```
//!
//! Every layer is causal and output frame `i` depends on code frames `<= i` only, so the same
//! forward runs whole utterances (fresh [`Carry`]) and streams (a `Carry` kept between calls).

use infer_core::{Result, Tensor, Weights};

use super::config::DecoderConfig;
use super::layers::{CausalConv, CausalConvTranspose, ConvShape, Linear, SnakeBeta};
use super::quantizer::SplitRvqDecoder;
use super::state::Carry;
use super::transformer::{Flavour, Transformer, TransformerShape};

/// Per-stage wall time of a decode, logged at trace level (`INFER_LOG=infer_qwen3_tts=trace`):
/// the split the codec's profile in docs/benchmarks-log.md is read from. Costs nothing when off.
struct StageClock {
    last: Option<std::time::Instant>,
}

impl StageClock {
    fn new() -> Self {
        StageClock { last: tracing::enabled!(tracing::Level::TRACE).then(std::time::Instant::now) }
    }

    fn stage(&mut self, name: &'static str) {
        if let Some(t) = self.last {
            tracing::trace!(stage = name, ms = t.elapsed().as_secs_f64() * 1e3, "qwen3-tts codec stage");
            self.last = Some(std::time::Instant::now());
        }
    }
}

/// ConvNeXt block: depthwise causal conv (k=7), LayerNorm, pointwise MLP with GELU, gamma, residual.
struct ConvNeXt {
    dwconv: CausalConv,
    norm_weight: Tensor,
    norm_bias: Tensor,
    pwconv1: Linear,
    pwconv2: Linear,
    gamma: Tensor,
}

impl ConvNeXt {
    fn load(w: &Weights, dim: usize) -> Result<Self> {
        Ok(ConvNeXt {
            dwconv: CausalConv::load(&w.prefixed("dwconv.conv"), ConvShape::new(dim, dim, 7).depthwise(), true)?,
            norm_weight: w.get_shaped("norm.weight", &[dim])?,
            norm_bias: w.get_shaped("norm.bias", &[dim])?,
            pwconv1: Linear::load(&w.prefixed("pwconv1"), 4 * dim, dim, true)?,
            pwconv2: Linear::load(&w.prefixed("pwconv2"), dim, 4 * dim, true)?,
            gamma: w.get_shaped("gamma", &[dim])?,
        })
    }

    /// `x`: `(1, dim, t)`.
    fn forward(&self, x: &Tensor, carry: &mut Carry) -> Result<Tensor> {
        let h = self.dwconv.forward_stream(x, carry)?.transpose(1, 2)?;
        // LayerNorm eps 1e-6 (nn.LayerNorm(dim, eps=1e-6) in the reference); nn.GELU is exact.
        let h = h.layer_norm(&self.norm_weight, Some(&self.norm_bias), 1e-6)?;
        let h = self.pwconv2.forward(&self.pwconv1.forward(&h)?.gelu_erf()?)?.mul(&self.gamma)?;
        x.add(&h.transpose(1, 2)?)
    }
}

/// BigVGAN residual unit: SnakeBeta, dilated causal conv (k=7), SnakeBeta, conv (k=1), residual.
struct ResidualUnit {
    act1: SnakeBeta,
    conv1: CausalConv,
    act2: SnakeBeta,
    conv2: CausalConv,
}

impl ResidualUnit {
    fn load(w: &Weights, dim: usize, dilation: usize) -> Result<Self> {
        Ok(ResidualUnit {
            act1: SnakeBeta::load(&w.prefixed("act1"), dim)?,
            conv1: CausalConv::load(&w.prefixed("conv1.conv"), ConvShape::new(dim, dim, 7).dilation(dilation), true)?,
            act2: SnakeBeta::load(&w.prefixed("act2"), dim)?,
            conv2: CausalConv::load(&w.prefixed("conv2.conv"), ConvShape::new(dim, dim, 1), true)?,
        })
    }

    fn forward(&self, x: &Tensor, carry: &mut Carry) -> Result<Tensor> {
        let h = self.conv1.forward_stream(&self.act1.forward(x)?, carry)?;
        let h = self.conv2.forward_stream(&self.act2.forward(&h)?, carry)?;
        h.add(x)
    }
}

/// BigVGAN block: SnakeBeta, causal conv-transpose (k = 2r, stride r), residual units (1, 3, 9).
struct DecoderBlock {
    act: SnakeBeta,
    upsample: CausalConvTranspose,
    units: Vec<ResidualUnit>,
}

impl DecoderBlock {
    fn load(w: &Weights, in_dim: usize, out_dim: usize, rate: usize) -> Result<Self> {
        let units = [1, 3, 9]
            .iter()
            .enumerate()
            .map(|(i, &d)| ResidualUnit::load(&w.prefixed(format!("block.{}", i + 2)), out_dim, d))
            .collect::<Result<_>>()?;
        Ok(DecoderBlock {
            act: SnakeBeta::load(&w.prefixed("block.0"), in_dim)?,
            upsample: CausalConvTranspose::load(&w.prefixed("block.1.conv"), in_dim, out_dim, 2 * rate, rate)?,
            units,
        })
    }

    fn forward(&self, x: &Tensor, carry: &mut Carry, lap: &mut StageClock) -> Result<Tensor> {
        let mut h = self.upsample.forward_stream(&self.act.forward(x)?, carry)?;
        lap.stage("block SnakeBeta + conv-transpose");
        for unit in &self.units {
            h = unit.forward(&h, carry)?;
        }
        lap.stage("block residual units");
        Ok(h)
    }
}

pub struct Decoder {
    quantizer: SplitRvqDecoder,
    pre_conv: CausalConv,
    input_proj: Linear,
    transformer: Transformer,
    final_norm: Tensor,
    output_proj: Linear,
    rms_eps: f32,
    upsample: Vec<(CausalConvTranspose, ConvNeXt)>,
    conv_in: CausalConv,
    blocks: Vec<DecoderBlock>,
    act_out: SnakeBeta,
    conv_out: CausalConv,
}

impl Decoder {
    /// `w` holds `decoder.*`.
    pub fn load(w: &Weights, c: &DecoderConfig) -> Result<Self> {
        let latent = c.latent_dim;
        let t = w.prefixed("pre_transformer");
        let shape = TransformerShape {
            hidden: c.hidden_size,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim(),
            intermediate: c.intermediate_size,
            layers: c.num_hidden_layers,
            eps: c.rms_norm_eps,
            rope_theta: c.rope_theta,
            window: c.sliding_window,
            attention_bias: c.attention_bias,
        };
        let upsample = c
            .upsampling_ratios
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let u = w.prefixed(format!("upsample.{i}"));
                Ok((
                    CausalConvTranspose::load(&u.prefixed("0.conv"), latent, latent, r, r)?,
                    ConvNeXt::load(&u.prefixed("1"), latent)?,
                ))
            })
            .collect::<Result<_>>()?;
        let dim = |i: usize| c.decoder_dim >> i;
        let blocks = c
            .upsample_rates
            .iter()
            .enumerate()
            .map(|(i, &r)| DecoderBlock::load(&w.prefixed(format!("decoder.{}", i + 1)), dim(i), dim(i + 1), r))
            .collect::<Result<_>>()?;
        let n = c.upsample_rates.len();
        Ok(Decoder {
            quantizer: SplitRvqDecoder::load(
                &w.prefixed("quantizer"),
                c.num_quantizers,
                c.codebook_size,
                c.codebook_dim,
            )?,
            pre_conv: CausalConv::load(&w.prefixed("pre_conv.conv"), ConvShape::new(c.codebook_dim, latent, 3), true)?,
            input_proj: Linear::load(&t.prefixed("input_proj"), c.hidden_size, latent, true)?,
            transformer: Transformer::load(&t, shape, Flavour::RmsSwiGlu)?,
            final_norm: t.get_shaped("norm.weight", &[c.hidden_size])?,
            output_proj: Linear::load(&t.prefixed("output_proj"), latent, c.hidden_size, true)?,
            rms_eps: c.rms_norm_eps as f32,
            upsample,
            conv_in: CausalConv::load(&w.prefixed("decoder.0.conv"), ConvShape::new(latent, c.decoder_dim, 7), true)?,
            blocks,
            act_out: SnakeBeta::load(&w.prefixed(format!("decoder.{}", n + 1)), dim(n))?,
            conv_out: CausalConv::load(
                &w.prefixed(format!("decoder.{}.conv", n + 2)),
                ConvShape::new(dim(n), 1, 7),
                true,
            )?,
        })
    }

    /// `ids[q]`: `(t,)` u32 codes of codebook `q` (validated by the caller). Gives `(1, 1, 1920 t)`.
    pub fn forward(&self, ids: &[Tensor], carry: &mut Carry) -> Result<Tensor> {
        carry.begin();
        let mut lap = StageClock::new();
        let x = self.quantizer.decode(ids)?;
        lap.stage("rvq dequantize");
        let x = self.pre_conv.forward_stream(&x, carry)?.transpose(1, 2)?;
        lap.stage("pre-conv");
        let x = self.pre_transformer(&x, carry)?.transpose(1, 2)?;
        let mut x = x.contiguous()?;
        lap.stage("pre-transformer");
        for (up, block) in &self.upsample {
            x = up.forward_stream(&x, carry)?;
            lap.stage("upsample conv-transpose");
            x = block.forward(&x, carry)?;
            lap.stage("upsample ConvNeXt");
        }
        let mut x = self.conv_in.forward_stream(&x, carry)?;
        lap.stage("decoder conv-in");
        for block in &self.blocks {
            x = block.forward(&x, carry, &mut lap)?;
        }
        let x = self.conv_out.forward_stream(&self.act_out.forward(&x)?, carry)?;
        let x = x.clamp(-1.0, 1.0)?;
        lap.stage("SnakeBeta + conv-out");
        Ok(x)
    }

    /// `(1, t, latent)` -> `(1, t, latent)`.
    fn pre_transformer(&self, x: &Tensor, carry: &mut Carry) -> Result<Tensor> {
        let h = self.transformer.forward(&self.input_proj.forward(x)?, carry)?;
        self.output_proj.forward(&h.rms_norm(&self.final_norm, self.rms_eps)?)
    }

    /// Debug taps: the quantizer, pre-conv and pre-transformer outputs as `(channels, t)`.
    pub fn front_activations(&self, ids: &[Tensor]) -> Result<Vec<(&'static str, Tensor)>> {
        let mut carry = Carry::default();
        carry.begin();
        let q = self.quantizer.decode(ids)?;
        let c = self.pre_conv.forward_stream(&q, &mut carry)?;
        let t = self.pre_transformer(&c.transpose(1, 2)?, &mut carry)?.transpose(1, 2)?;
        Ok(vec![("quantized", q), ("pre_conv", c), ("pre_transformer", t)])
    }
}
