//! The codec's two transformers, one layer shape with two flavours:
//! - decoder pre-transformer (Qwen3-TTS): RMSNorm, SwiGLU, sliding-window causal attention;
//! - encoder transformer (Mimi): LayerNorm with bias, GELU MLP, plain causal attention (the
//!   reference builds its mask with `create_causal_mask`, which ignores Mimi's `sliding_window`).
//!
//! Both: pre-norm residual blocks with per-channel layer scale on each branch, split-half RoPE
//! (`rotate_half`, as transformers), no q/k norm. Keys and values of the last `window - 1`
//! positions are carried between streaming calls.

use infer_core::{AttentionOpts, DType, Result, RopeLayout, Tensor, Weights};

use super::layers::Linear;
use super::state::Carry;

/// Sizes of one transformer.
#[derive(Debug, Clone, Copy)]
pub struct TransformerShape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub eps: f64,
    pub rope_theta: f64,
    /// 0: unlimited.
    pub window: usize,
    pub attention_bias: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// Qwen3-TTS decoder: RMSNorm + SwiGLU.
    RmsSwiGlu,
    /// Mimi encoder: LayerNorm + GELU (erf).
    LayerNormGelu,
}

enum Norm {
    Rms(Tensor),
    Layer(Tensor, Tensor),
}

impl Norm {
    fn load(w: &Weights, flavour: Flavour, dim: usize) -> Result<Self> {
        Ok(match flavour {
            Flavour::RmsSwiGlu => Norm::Rms(w.get_shaped("weight", &[dim])?),
            Flavour::LayerNormGelu => Norm::Layer(w.get_shaped("weight", &[dim])?, w.get_shaped("bias", &[dim])?),
        })
    }

    fn forward(&self, x: &Tensor, eps: f32) -> Result<Tensor> {
        match self {
            Norm::Rms(w) => x.rms_norm(w, eps),
            Norm::Layer(w, b) => x.layer_norm(w, Some(b), eps),
        }
    }
}

enum Mlp {
    SwiGlu { gate: Linear, up: Linear, down: Linear },
    Gelu { fc1: Linear, fc2: Linear },
}

impl Mlp {
    fn load(w: &Weights, flavour: Flavour, hidden: usize, inter: usize) -> Result<Self> {
        Ok(match flavour {
            Flavour::RmsSwiGlu => Mlp::SwiGlu {
                gate: Linear::load(&w.prefixed("gate_proj"), inter, hidden, false)?,
                up: Linear::load(&w.prefixed("up_proj"), inter, hidden, false)?,
                down: Linear::load(&w.prefixed("down_proj"), hidden, inter, false)?,
            },
            Flavour::LayerNormGelu => Mlp::Gelu {
                fc1: Linear::load(&w.prefixed("fc1"), inter, hidden, false)?,
                fc2: Linear::load(&w.prefixed("fc2"), hidden, inter, false)?,
            },
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Mlp::SwiGlu { gate, up, down } => down.forward(&gate.forward(x)?.silu()?.mul(&up.forward(x)?)?),
            Mlp::Gelu { fc1, fc2 } => fc2.forward(&fc1.forward(x)?.gelu_erf()?),
        }
    }
}

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
}

struct Layer {
    input_norm: Norm,
    attn: Attention,
    attn_scale: Tensor,
    post_norm: Norm,
    mlp: Mlp,
    mlp_scale: Tensor,
}

pub struct Transformer {
    shape: TransformerShape,
    layers: Vec<Layer>,
    inv_freq: Vec<f32>,
}

impl Transformer {
    /// `w` holds `layers.{i}.…` (the transformers names of both flavours).
    pub fn load(w: &Weights, shape: TransformerShape, flavour: Flavour) -> Result<Self> {
        let s = shape;
        let (q_dim, kv_dim) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let layers = (0..s.layers)
            .map(|i| {
                let l = w.prefixed(format!("layers.{i}"));
                let a = l.prefixed("self_attn");
                Ok(Layer {
                    input_norm: Norm::load(&l.prefixed("input_layernorm"), flavour, s.hidden)?,
                    attn: Attention {
                        q: Linear::load(&a.prefixed("q_proj"), q_dim, s.hidden, s.attention_bias)?,
                        k: Linear::load(&a.prefixed("k_proj"), kv_dim, s.hidden, s.attention_bias)?,
                        v: Linear::load(&a.prefixed("v_proj"), kv_dim, s.hidden, s.attention_bias)?,
                        o: Linear::load(&a.prefixed("o_proj"), s.hidden, q_dim, s.attention_bias)?,
                    },
                    attn_scale: l.get_shaped("self_attn_layer_scale.scale", &[s.hidden])?,
                    post_norm: Norm::load(&l.prefixed("post_attention_layernorm"), flavour, s.hidden)?,
                    mlp: Mlp::load(&l.prefixed("mlp"), flavour, s.hidden, s.intermediate)?,
                    mlp_scale: l.get_shaped("mlp_layer_scale.scale", &[s.hidden])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // inv_freq[i] = 1 / theta^(2i/d) in f32, as transformers' default RoPE init.
        let inv_freq =
            (0..s.head_dim / 2).map(|i| 1.0 / (s.rope_theta as f32).powf((2 * i) as f32 / s.head_dim as f32)).collect();
        Ok(Transformer { shape, layers, inv_freq })
    }

    /// `x` is `(1, t, hidden)`; positions continue from `carry.position`.
    pub fn forward(&self, x: &Tensor, carry: &mut Carry) -> Result<Tensor> {
        let t = x.dim(1);
        let (cos, sin) = self.rope_tables(carry.position, t, x)?;
        let eps = self.shape.eps as f32;
        let mut h = x.clone();
        for layer in &self.layers {
            let a = self.attention(&layer.attn, &layer.input_norm.forward(&h, eps)?, &cos, &sin, carry)?;
            h = h.add(&a.mul(&layer.attn_scale)?)?;
            let m = layer.mlp.forward(&layer.post_norm.forward(&h, eps)?)?;
            h = h.add(&m.mul(&layer.mlp_scale)?)?;
        }
        carry.position += t;
        Ok(h)
    }

    fn attention(&self, attn: &Attention, x: &Tensor, cos: &Tensor, sin: &Tensor, carry: &mut Carry) -> Result<Tensor> {
        let s = &self.shape;
        let t = x.dim(1);
        let heads = |y: Tensor, n: usize| y.reshape(&[1, t, n, s.head_dim])?.transpose(1, 2)?.contiguous();
        let q = heads(attn.q.forward(x)?, s.heads)?.rope(cos, sin, RopeLayout::SplitHalf)?;
        let k = heads(attn.k.forward(x)?, s.kv_heads)?.rope(cos, sin, RopeLayout::SplitHalf)?;
        let v = heads(attn.v.forward(x)?, s.kv_heads)?;
        let k = self.with_past(k, carry.slot())?;
        let v = self.with_past(v, carry.slot())?;
        let opts =
            AttentionOpts { scale: (s.head_dim as f32).powf(-0.5), causal: true, window: s.window, softcap: 0.0 };
        let y = Tensor::attention(&q, &k, &v, None, opts)?;
        attn.o.forward(&y.transpose(1, 2)?.reshape(&[1, t, s.heads * s.head_dim])?)
    }

    /// Past keys (or values) followed by the new ones; keeps what later queries can still see.
    fn with_past(&self, new: Tensor, slot: &mut Option<Tensor>) -> Result<Tensor> {
        let all = match slot.take() {
            Some(past) => Tensor::concat(&[&past, &new], 2)?,
            None => new,
        };
        let len = all.dim(2);
        let keep = if self.shape.window > 0 { len.min(self.shape.window - 1) } else { len };
        *slot = Some(if keep == len { all.clone() } else { all.narrow(2, len - keep, keep)?.contiguous()? });
        Ok(all)
    }

    /// cos/sin of `(t, head_dim / 2)` for positions `start..start + t`, in f32 as the reference.
    fn rope_tables(&self, start: usize, t: usize, like: &Tensor) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(t * half);
        let mut sin = Vec::with_capacity(t * half);
        for p in start..start + t {
            for f in &self.inv_freq {
                let angle = p as f32 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        let table = |v: &[f32]| -> Result<Tensor> {
            let t = Tensor::from_f32(like.backend(), v, &[t, half])?;
            if like.dtype() == DType::F32 {
                Ok(t)
            } else {
                t.to_dtype(like.dtype())
            }
        };
        Ok((table(&cos)?, table(&sin)?))
    }
}
