//! The transformer block every decoder in the tree is made of: attention and a gated MLP, each a
//! residual branch, with the norms where the architecture puts them.
//!
//! ```text
//! Pre       x + attn(norm(x))          -> x + mlp(norm(x))              Llama, Qwen, Mistral
//! Post      x + norm(attn(x))          -> x + norm(mlp(x))              OLMo 2
//! Sandwich  x + norm(attn(norm(x)))    -> x + norm(mlp(norm(x)))        Gemma 2 / 3
//! ```

use infer_sdk::{Result, Tensor, Weights};

use crate::{AttentionConfig, GatedMlp, KvTarget, MlpConfig, Norm, NormKind, RopeAngles, SelfAttention};

/// One transformer block of a [`crate::CausalDecoder`].
pub trait DecoderLayer: Send + Sync {
    fn forward(&self, x: &Tensor, rope: &RopeAngles, kv: &mut KvTarget<'_>) -> Result<Tensor>;
}

/// Where a block's norms sit (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NormPlacement {
    /// Before each sublayer.
    #[default]
    Pre,
    /// On each sublayer's output, before the residual add.
    Post,
    /// Both.
    Sandwich,
}

/// A block's weight names, relative to the block. Only the norms its [`NormPlacement`] uses are
/// read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockNames {
    pub attn: &'static str,
    pub mlp: &'static str,
    pub attn_pre_norm: &'static str,
    pub attn_post_norm: &'static str,
    pub mlp_pre_norm: &'static str,
    pub mlp_post_norm: &'static str,
}

impl BlockNames {
    /// transformers' Llama-family names (pre-norm: `input_layernorm`, `post_attention_layernorm`).
    pub const LLAMA: BlockNames = BlockNames {
        attn: "self_attn",
        mlp: "mlp",
        attn_pre_norm: "input_layernorm",
        attn_post_norm: "",
        mlp_pre_norm: "post_attention_layernorm",
        mlp_post_norm: "",
    };
    /// transformers' Gemma 2 / 3 names (sandwich), also OLMo 2's (post-norm: the two `post_*`).
    pub const GEMMA: BlockNames = BlockNames {
        attn: "self_attn",
        mlp: "mlp",
        attn_pre_norm: "input_layernorm",
        attn_post_norm: "post_attention_layernorm",
        mlp_pre_norm: "pre_feedforward_layernorm",
        mlp_post_norm: "post_feedforward_layernorm",
    };
    /// Mistral's native names as the speech checkpoints map them (`attention_norm`, `ffn_norm`).
    pub const MISTRAL: BlockNames = BlockNames {
        attn: "self_attn",
        mlp: "mlp",
        attn_pre_norm: "attention_norm",
        attn_post_norm: "",
        mlp_pre_norm: "ffn_norm",
        mlp_post_norm: "",
    };
    /// Whisper-style encoder names (`self_attn_layer_norm`, `final_layer_norm`).
    pub const WHISPER: BlockNames = BlockNames {
        attn: "self_attn",
        mlp: "mlp",
        attn_pre_norm: "self_attn_layer_norm",
        attn_post_norm: "",
        mlp_pre_norm: "final_layer_norm",
        mlp_post_norm: "",
    };
}

/// Everything a [`DecoderBlock`] is built from. [`BlockConfig::new`]: pre-norm RMSNorm with the
/// Llama names.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockConfig {
    pub attention: AttentionConfig,
    pub mlp: MlpConfig,
    /// The block's norms (q/k norms are the attention's).
    pub norm: NormKind,
    pub norm_eps: f64,
    pub placement: NormPlacement,
    pub names: BlockNames,
}

impl BlockConfig {
    pub fn new(attention: AttentionConfig, mlp: MlpConfig, norm_eps: f64) -> Self {
        BlockConfig {
            attention,
            mlp,
            norm: NormKind::RMS,
            norm_eps,
            placement: NormPlacement::Pre,
            names: BlockNames::LLAMA,
        }
    }

    pub fn attention(mut self, f: impl FnOnce(AttentionConfig) -> AttentionConfig) -> Self {
        self.attention = f(self.attention);
        self
    }

    pub fn mlp(mut self, f: impl FnOnce(MlpConfig) -> MlpConfig) -> Self {
        self.mlp = f(self.mlp);
        self
    }

    pub fn norm(mut self, kind: NormKind) -> Self {
        self.norm = kind;
        self
    }

    pub fn placement(mut self, placement: NormPlacement) -> Self {
        self.placement = placement;
        self
    }

    pub fn names(mut self, names: BlockNames) -> Self {
        self.names = names;
        self
    }
}

/// Attention and MLP residual branches with their norms ([`BlockConfig`]).
pub struct DecoderBlock {
    attn_pre_norm: Option<Norm>,
    attn: SelfAttention,
    attn_post_norm: Option<Norm>,
    mlp_pre_norm: Option<Norm>,
    mlp: GatedMlp,
    mlp_post_norm: Option<Norm>,
}

impl DecoderBlock {
    /// `w` is rooted at the block (`model.layers.{i}`).
    pub fn load(w: &Weights, c: &BlockConfig) -> Result<Self> {
        let (pre, post) = match c.placement {
            NormPlacement::Pre => (true, false),
            NormPlacement::Post => (false, true),
            NormPlacement::Sandwich => (true, true),
        };
        let hidden = c.attention.hidden;
        let norm =
            |on: bool, name: &str| on.then(|| Norm::load(&w.prefixed(name), c.norm, hidden, c.norm_eps)).transpose();
        let n = &c.names;
        Ok(DecoderBlock {
            attn_pre_norm: norm(pre, n.attn_pre_norm)?,
            attn: SelfAttention::load(&w.prefixed(n.attn), c.attention.clone())?,
            attn_post_norm: norm(post, n.attn_post_norm)?,
            mlp_pre_norm: norm(pre, n.mlp_pre_norm)?,
            mlp: GatedMlp::load_config(&w.prefixed(n.mlp), &c.mlp)?,
            mlp_post_norm: norm(post, n.mlp_post_norm)?,
        })
    }

    /// Blocks `layers.0 .. layers.{n-1}` under `w`, block `i` configured by `config(i)`.
    pub fn load_stack(w: &Weights, n: usize, config: impl Fn(usize) -> BlockConfig) -> Result<Vec<Self>> {
        (0..n).map(|i| Self::load(&w.prefixed(format!("layers.{i}")), &config(i))).collect()
    }

    pub fn attention(&self) -> &SelfAttention {
        &self.attn
    }

    /// `x` (b, t, hidden) -> (b, t, hidden), appending this step's K/V to `kv`'s cache(s).
    pub fn forward(&self, x: &Tensor, rope: &RopeAngles, kv: &mut KvTarget<'_>) -> Result<Tensor> {
        self.forward_scaled(x, rope, kv, None)
    }

    /// As [`DecoderBlock::forward`], the MLP's normed input multiplied by `mlp_input_scale`
    /// (Voxtral Realtime's time-conditioned `1 + ada(t)`).
    pub fn forward_scaled(
        &self,
        x: &Tensor,
        rope: &RopeAngles,
        kv: &mut KvTarget<'_>,
        mlp_input_scale: Option<&Tensor>,
    ) -> Result<Tensor> {
        let h = self.attn.forward_kv(&norm(&self.attn_pre_norm, x)?, rope, kv)?;
        let x = x.add(&norm(&self.attn_post_norm, &h)?)?;
        let mut h = norm(&self.mlp_pre_norm, &x)?;
        if let Some(s) = mlp_input_scale {
            h = h.mul(s)?;
        }
        let h = self.mlp.forward(&h)?;
        x.add(&norm(&self.mlp_post_norm, &h)?)
    }
}

impl DecoderLayer for DecoderBlock {
    fn forward(&self, x: &Tensor, rope: &RopeAngles, kv: &mut KvTarget<'_>) -> Result<Tensor> {
        self.forward_scaled(x, rope, kv, None)
    }
}

/// `x` through `n`, or `x` itself (a handle copy) when the block has no norm there.
fn norm(n: &Option<Norm>, x: &Tensor) -> Result<Tensor> {
    match n {
        Some(n) => n.forward(x),
        None => Ok(x.clone()),
    }
}
