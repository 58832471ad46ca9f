//! Waveform -> codes (`encoder.*`, a transformers `MimiModel` of which the reference keeps the
//! encoder half):
//!
//! ```text
//! samples [1, 1, n]
//!   -> SEANet: conv (k=7) -> per ratio in reversed(ratios): residual block(s), ELU, strided conv
//!      -> ELU -> conv (k=3)                                    -> [hidden, n / 960]    (25 Hz)
//!   -> transformer (LayerNorm, causal attention, GELU MLP, layer scale)
//!   -> downsample conv (k=4, stride 2, replicate padding)     -> [hidden, n / 1920]   (12.5 Hz)
//!   -> split RVQ nearest-codebook search                      -> codes [frames][16]
//! ```
//!
//! Convolutions pad as Mimi does outside streaming mode: `span - stride` on the left, up to a
//! whole stride on the right.

use infer_core::{Result, Tensor, Weights};

use super::config::EncoderConfig;
use super::layers::{elu, CausalConv, ConvShape, Pad};
use super::quantizer::SplitRvqEncoder;
use super::state::Carry;
use super::transformer::{Flavour, Transformer, TransformerShape};

/// SEANet residual block: ELU, conv (k, dilation) to `dim / compress`, ELU, conv (k=1) back, + x.
struct ResnetBlock {
    conv1: CausalConv,
    conv2: CausalConv,
}

enum Stage {
    Resnet(ResnetBlock),
    /// ELU then a (strided) conv.
    EluConv(CausalConv),
}

pub struct Encoder {
    conv_in: CausalConv,
    stages: Vec<Stage>,
    transformer: Transformer,
    downsample: CausalConv,
    quantizer: SplitRvqEncoder,
}

impl Encoder {
    /// `w` holds `encoder.*`; `valid` is how many codebooks the codec keeps.
    pub fn load(w: &Weights, c: &EncoderConfig, valid: usize) -> Result<Self> {
        let layers = w.prefixed("encoder.layers");
        let mut index = 1; // layers.0 is the input conv; ELUs take an index of their own.
        let mut stages = Vec::new();
        let mut dim = c.num_filters;
        for &ratio in c.upsampling_ratios.iter().rev() {
            for j in 0..c.num_residual_layers {
                let b = layers.prefixed(format!("{index}.block"));
                let hidden = dim / c.compress;
                let dilation = c.dilation_growth_rate.pow(j as u32);
                let shape1 = ConvShape::new(dim, hidden, c.residual_kernel_size).dilation(dilation);
                stages.push(Stage::Resnet(ResnetBlock {
                    conv1: CausalConv::load(&b.prefixed("1.conv"), shape1, true)?,
                    conv2: CausalConv::load(&b.prefixed("3.conv"), ConvShape::new(hidden, dim, 1), true)?,
                }));
                index += 1;
            }
            let shape = ConvShape::new(dim, dim * 2, ratio * 2).stride(ratio);
            stages.push(Stage::EluConv(CausalConv::load(
                &layers.prefixed(format!("{}.conv", index + 1)),
                shape,
                true,
            )?));
            index += 2;
            dim *= 2;
        }
        let last = ConvShape::new(dim, c.hidden_size, c.last_kernel_size);
        stages.push(Stage::EluConv(CausalConv::load(&layers.prefixed(format!("{}.conv", index + 1)), last, true)?));

        let shape = TransformerShape {
            hidden: c.hidden_size,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim(),
            intermediate: c.intermediate_size,
            layers: c.num_hidden_layers,
            eps: c.norm_eps,
            rope_theta: c.rope_theta,
            window: 0,
            attention_bias: c.attention_bias,
        };
        let down = ConvShape::new(c.hidden_size, c.hidden_size, c.downsample_kernel()).stride(2);
        Ok(Encoder {
            conv_in: CausalConv::load(
                &layers.prefixed("0.conv"),
                ConvShape::new(1, c.num_filters, c.kernel_size),
                true,
            )?,
            stages,
            transformer: Transformer::load(&w.prefixed("encoder_transformer"), shape, Flavour::LayerNormGelu)?,
            downsample: CausalConv::load(&w.prefixed("downsample.conv"), down, false)?,
            quantizer: SplitRvqEncoder::load(
                &w.prefixed("quantizer"),
                valid,
                c.codebook_size,
                c.codebook_dim,
                c.hidden_size,
            )?,
        })
    }

    /// SEANet, transformer and downsample: `(1, 1, n)` -> `(1, hidden, frames)`.
    pub fn embed(&self, wav: &Tensor) -> Result<Tensor> {
        let mut x = self.conv_in.forward_padded(wav, Pad::Zeros)?;
        for stage in &self.stages {
            x = match stage {
                Stage::Resnet(b) => {
                    let h = b.conv1.forward_padded(&elu(&x)?, Pad::Zeros)?;
                    b.conv2.forward_padded(&elu(&h)?, Pad::Zeros)?.add(&x)?
                }
                Stage::EluConv(conv) => conv.forward_padded(&elu(&x)?, Pad::Zeros)?,
            };
        }
        let h = self.transformer.forward(&x.transpose(1, 2)?.contiguous()?, &mut Carry::default())?;
        self.downsample.forward_padded(&h.transpose(1, 2)?.contiguous()?, Pad::Replicate)
    }

    /// Codes `[frame][codebook]` of `(1, 1, n)` samples, `valid` codebooks.
    pub fn encode(&self, wav: &Tensor, valid: usize) -> Result<Vec<Vec<u32>>> {
        self.quantizer.encode(&self.embed(wav)?, valid)
    }
}
