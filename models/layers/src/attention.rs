//! Multi-head self-attention with grouped-query K/V, optional per-head q/k RMSNorm (Qwen3,
//! Gemma 3) and a KV cache; or several sequences packed along the token axis, each attending to
//! its own cache (continuous batching).

use infer_core::{AttentionOpts, Error, LayerCache, Result, Tensor, Weights};

use crate::{Linear, RmsNorm, RopeAngles, StackedLinear};

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
        let bad = |why: String| {
            Err(Error::invalid(format!("attention with {heads} heads, {kv} key/value heads of size {d}: {why}")))
        };
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

/// Where one layer's keys and values go in a forward.
pub enum KvTarget<'a> {
    /// One batch of equally long rows and its cache, with an optional additive mask.
    One { cache: &'a mut LayerCache, mask: Option<&'a Tensor> },
    /// Independent sequences packed back to back along the token axis (batch 1): `lens[i]`
    /// tokens for `caches[i]`.
    Packed { lens: &'a [usize], caches: Vec<&'a mut LayerCache> },
}

pub struct SelfAttention {
    /// q, k and v (one product when quantized at load).
    qkv: StackedLinear,
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
            qkv: StackedLinear::load(
                &[
                    (w.prefixed("q_proj"), cfg.num_heads * d),
                    (w.prefixed("k_proj"), cfg.num_kv_heads * d),
                    (w.prefixed("v_proj"), cfg.num_kv_heads * d),
                ],
                h,
                cfg.qkv_bias,
            )?,
            o: Linear::load(&w.prefixed("o_proj"), h, cfg.num_heads * d, false)?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            cfg,
        })
    }

    /// `x` (b, t, hidden) -> (b, t, hidden), appending this step's K/V to `kv`'s cache(s).
    pub fn forward_kv(&self, x: &Tensor, rope: &RopeAngles, kv: &mut KvTarget<'_>) -> Result<Tensor> {
        match kv {
            KvTarget::One { cache, mask } => self.forward(x, rope, cache, *mask),
            KvTarget::Packed { lens, caches } => self.forward_packed(x, rope, lens, caches),
        }
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
        let (q, k, v) = self.qkv(x, rope)?;
        let y = self.attend(&q, &k, &v, cache, mask)?;
        let y = y.transpose(1, 2)?.reshape(&[b, t, self.cfg.num_heads * self.cfg.head_dim])?;
        self.o.forward(&y)
    }

    /// Several sequences packed in `x` (1, total, hidden): the projections run once over all
    /// rows (each weight is read once per step for every sequence), attention runs per sequence
    /// against its own cache. `rope` holds each row's own position.
    pub fn forward_packed(
        &self,
        x: &Tensor,
        rope: &RopeAngles,
        lens: &[usize],
        caches: &mut [&mut LayerCache],
    ) -> Result<Tensor> {
        let total = x.dim(1);
        let (q, k, v) = self.qkv(x, rope)?;
        let mut start = 0;
        let mut ys = Vec::with_capacity(lens.len());
        for (&len, cache) in lens.iter().zip(caches.iter_mut()) {
            let rows = |t: &Tensor| t.narrow(2, start, len);
            ys.push(self.attend(&rows(&q)?, &rows(&k)?, &rows(&v)?, cache, None)?);
            start += len;
        }
        let ys: Vec<&Tensor> = ys.iter().collect();
        let y = Tensor::concat(&ys, 2)?;
        let y = y.transpose(1, 2)?.reshape(&[1, total, self.cfg.num_heads * self.cfg.head_dim])?;
        self.o.forward(&y)
    }

    /// Queries, keys and values of `x` (b, t, hidden) as (b, heads, t, head_dim), normed and
    /// rotated.
    fn qkv(&self, x: &Tensor, rope: &RopeAngles) -> Result<(Tensor, Tensor, Tensor)> {
        let (b, t) = (x.dim(0), x.dim(1));
        let d = self.cfg.head_dim;
        let heads = |y: &Tensor, n: usize| y.reshape(&[b, t, n, d])?.transpose(1, 2);
        let [q, k, v]: [Tensor; 3] =
            self.qkv.forward(x)?.try_into().map_err(|_| Error::backend("q/k/v projection: expected three outputs"))?;
        let mut q = heads(&q, self.cfg.num_heads)?;
        let mut k = heads(&k, self.cfg.num_kv_heads)?;
        let v = heads(&v, self.cfg.num_kv_heads)?;
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(&q)?;
            k = kn.forward(&k)?;
        }
        Ok((rope.apply(&q)?, rope.apply(&k)?, v))
    }

    /// Attention of `q` over `cache` after appending `k`, `v` to it: (b, heads, t, head_dim).
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        cache: &mut LayerCache,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (k, v) = cache.append(k, v)?;
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
        Tensor::attention(q, &k, &v, mask, opts)
    }
}
