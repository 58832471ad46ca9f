//! Multi-head self-attention with grouped-query K/V, optional per-head q/k RMSNorm (Qwen3,
//! Gemma 3) and a KV cache.

use infer_core::{AttentionOpts, Error, LayerCache, Result, Tensor, Weights};

use crate::{Linear, RmsNorm, RopeAngles};

pub struct AttentionConfig {
    pub hidden: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// q/k/v projections carry biases (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE, with this eps (Qwen3, Gemma 3).
    pub qk_norm_eps: Option<f64>,
    /// Added to the q/k norm weights at load (Gemma's `(1 + w)` convention; 0 otherwise).
    pub qk_norm_offset: f64,
    /// Score scale, usually 1/sqrt(head_dim).
    pub scale: f32,
    /// Sliding window (0: global attention).
    pub window: usize,
    /// Attention logit soft-capping (0: none).
    pub softcap: f32,
}

impl AttentionConfig {
    /// Head counts a config file may get wrong: zero heads, query heads that do not split into
    /// the K/V groups, an odd head size (RoPE rotates pairs), sizes past `usize`.
    fn check(&self) -> Result<()> {
        let (heads, kv, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let bad = |why: String| Err(Error::invalid(format!("attention with {heads} heads, {kv} key/value heads of size {d}: {why}")));
        if heads == 0 || kv == 0 || d == 0 {
            return bad("every count must be at least 1".into());
        }
        if heads % kv != 0 {
            return bad("the heads must split evenly into the key/value groups".into());
        }
        if d % 2 != 0 {
            return bad("the head size must be even".into());
        }
        if heads.checked_mul(d).is_none() {
            return bad("too large".into());
        }
        Ok(())
    }
}

pub struct SelfAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    cfg: AttentionConfig,
}

impl SelfAttention {
    pub fn load(w: &Weights, cfg: AttentionConfig) -> Result<Self> {
        cfg.check()?;
        let (h, d) = (cfg.hidden, cfg.head_dim);
        let norm = |name: &str| {
            cfg.qk_norm_eps.map(|eps| RmsNorm::load_offset(&w.prefixed(name), d, eps, cfg.qk_norm_offset)).transpose()
        };
        Ok(SelfAttention {
            q: Linear::load(&w.prefixed("q_proj"), cfg.num_heads * d, h, cfg.qkv_bias)?,
            k: Linear::load(&w.prefixed("k_proj"), cfg.num_kv_heads * d, h, cfg.qkv_bias)?,
            v: Linear::load(&w.prefixed("v_proj"), cfg.num_kv_heads * d, h, cfg.qkv_bias)?,
            o: Linear::load(&w.prefixed("o_proj"), h, cfg.num_heads * d, false)?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            cfg,
        })
    }

    /// `x` (b, t, hidden) -> (b, t, hidden), appending this step's K/V to `cache`.
    pub fn forward(
        &self,
        x: &Tensor,
        rope: &RopeAngles,
        cache: &mut LayerCache,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t) = (x.dim(0), x.dim(1));
        let d = self.cfg.head_dim;
        let heads = |proj: &Linear, n: usize| proj.forward(x)?.reshape(&[b, t, n, d])?.transpose(1, 2);
        let mut q = heads(&self.q, self.cfg.num_heads)?;
        let mut k = heads(&self.k, self.cfg.num_kv_heads)?;
        let v = heads(&self.v, self.cfg.num_kv_heads)?;
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(&q)?;
            k = kn.forward(&k)?;
        }
        let q = rope.apply(&q)?;
        let k = rope.apply(&k)?;
        let (k, v) = cache.append(&k, &v)?;
        // A windowed cache returns only its most recent keys: the mask's last columns match them.
        let narrowed;
        let mask = match mask {
            Some(m) if m.dim(-1) > k.dim(2) => {
                narrowed = m.narrow(3, m.dim(-1) - k.dim(2), k.dim(2))?;
                Some(&narrowed)
            }
            other => other,
        };
        let window = if self.cfg.window > 0 { self.cfg.window } else { cache.window() };
        let opts = AttentionOpts { window, softcap: self.cfg.softcap, ..AttentionOpts::causal(self.cfg.scale) };
        let y = Tensor::attention(&q, &k, &v, mask, opts)?;
        let y = y.transpose(1, 2)?.reshape(&[b, t, self.cfg.num_heads * d])?;
        self.o.forward(&y)
    }
}
