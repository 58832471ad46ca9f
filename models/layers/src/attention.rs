//! Multi-head self-attention with grouped-query K/V and a KV cache, configured for every decoder
//! in the tree: optional biases per projection, q/k norm (RMSNorm or LayerNorm, per head as
//! Qwen3 and Gemma 3 or over the whole projection as OLMo 2), rotary over the whole head or its
//! leading dims, sliding window, logit soft-capping, any score scale. Rows of several sequences
//! packed along the token axis attend each to its own cache (continuous batching).

use infer_sdk::{AttentionOpts, Error, LayerCache, Result, Tensor, Weights};

use crate::{Linear, Norm, NormKind, RopeAngles, StackedLinear};

/// What a q/k norm normalizes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QkNormScope {
    /// Each head's `head_dim` values (Qwen3, Gemma 3): weights of `head_dim`.
    #[default]
    PerHead,
    /// The whole q (k) projection before it splits into heads (OLMo 2): weights of
    /// `heads * head_dim` (`kv_heads * head_dim`).
    Projection,
}

/// The norm of q and k before RoPE (weights `q_norm`, `k_norm`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QkNorm {
    pub kind: NormKind,
    pub scope: QkNormScope,
    pub eps: f64,
}

impl QkNorm {
    /// Per-head RMSNorm (Qwen3).
    pub fn per_head_rms(eps: f64) -> Self {
        QkNorm { kind: NormKind::RMS, scope: QkNormScope::PerHead, eps }
    }

    pub fn kind(mut self, kind: NormKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn scope(mut self, scope: QkNormScope) -> Self {
        self.scope = scope;
        self
    }
}

/// Which projections carry a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProjectionBias {
    pub q: bool,
    pub k: bool,
    pub v: bool,
    pub o: bool,
}

impl ProjectionBias {
    /// q, k and v (Qwen2), not o.
    pub const QKV: ProjectionBias = ProjectionBias { q: true, k: true, v: true, o: false };
    /// Every projection.
    pub const ALL: ProjectionBias = ProjectionBias { q: true, k: true, v: true, o: true };
}

/// An attention layer's shape and quirks. [`AttentionConfig::new`] gives the Llama defaults (no
/// bias, no q/k norm, rotary over the whole head, scale `1/sqrt(head_dim)`, global, no softcap);
/// the builder methods change one thing each.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionConfig {
    pub hidden: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub bias: ProjectionBias,
    pub qk_norm: Option<QkNorm>,
    /// Dims of each head RoPE rotates, from the first (partial rotary); `None`: all. The
    /// [`RopeAngles`] passed in must be built for this many (`Rotary::new(rotary_dim, ..)`).
    pub rotary_dim: Option<usize>,
    /// Score scale, usually 1/sqrt(head_dim).
    pub scale: f32,
    /// Sliding window (0: global attention, or the cache's own window).
    pub window: usize,
    /// Attention logit soft-capping (0: none).
    pub softcap: f32,
}

impl AttentionConfig {
    pub fn new(hidden: usize, num_heads: usize, num_kv_heads: usize, head_dim: usize) -> Self {
        AttentionConfig {
            hidden,
            num_heads,
            num_kv_heads,
            head_dim,
            bias: ProjectionBias::default(),
            qk_norm: None,
            rotary_dim: None,
            scale: 1.0 / (head_dim as f32).sqrt(),
            window: 0,
            softcap: 0.0,
        }
    }

    pub fn bias(mut self, bias: ProjectionBias) -> Self {
        self.bias = bias;
        self
    }

    /// Biases on q, k and v when `on` (Qwen2's `attention_bias`).
    pub fn qkv_bias(self, on: bool) -> Self {
        self.bias(if on { ProjectionBias::QKV } else { ProjectionBias::default() })
    }

    pub fn qk_norm(mut self, norm: Option<QkNorm>) -> Self {
        self.qk_norm = norm;
        self
    }

    pub fn rotary_dim(mut self, dim: usize) -> Self {
        self.rotary_dim = Some(dim);
        self
    }

    pub fn scale(mut self, scale: f32) -> Self {
        self.scale = scale;
        self
    }

    pub fn window(mut self, window: usize) -> Self {
        self.window = window;
        self
    }

    pub fn softcap(mut self, softcap: f32) -> Self {
        self.softcap = softcap;
        self
    }

    /// Head counts a config file may get wrong: zero heads, query heads that do not split into
    /// the K/V groups, an odd rotated size (RoPE rotates pairs), sizes past `usize`.
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
        let rotated = self.rotary_dim.unwrap_or(d);
        if !rotated.is_multiple_of(2) || rotated > d {
            return bad(format!("the rotated size {rotated} must be even and at most the head size"));
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
    q_norm: Option<Norm>,
    k_norm: Option<Norm>,
    cfg: AttentionConfig,
}

impl SelfAttention {
    /// `w` holds `q_proj`, `k_proj`, `v_proj`, `o_proj` and, with a q/k norm, `q_norm`, `k_norm`.
    pub fn load(w: &Weights, cfg: AttentionConfig) -> Result<Self> {
        cfg.check()?;
        let (h, d, b) = (cfg.hidden, cfg.head_dim, cfg.bias);
        let (q_dim, kv_dim) = (cfg.num_heads * d, cfg.num_kv_heads * d);
        let norm = |name: &str, proj_dim: usize| {
            cfg.qk_norm
                .map(|n| {
                    let dim = if n.scope == QkNormScope::Projection { proj_dim } else { d };
                    Norm::load(&w.prefixed(name), n.kind, dim, n.eps)
                })
                .transpose()
        };
        Ok(SelfAttention {
            qkv: StackedLinear::load_biased(
                &[
                    (w.prefixed("q_proj"), q_dim, b.q),
                    (w.prefixed("k_proj"), kv_dim, b.k),
                    (w.prefixed("v_proj"), kv_dim, b.v),
                ],
                h,
            )?,
            o: Linear::load(&w.prefixed("o_proj"), h, q_dim, b.o)?,
            q_norm: norm("q_norm", q_dim)?,
            k_norm: norm("k_norm", kv_dim)?,
            cfg,
        })
    }

    pub fn config(&self) -> &AttentionConfig {
        &self.cfg
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
        let [mut q, mut k, v]: [Tensor; 3] =
            self.qkv.forward(x)?.try_into().map_err(|_| Error::backend("q/k/v projection: expected three outputs"))?;
        let norms = self.q_norm.as_ref().zip(self.k_norm.as_ref());
        let per_head = self.cfg.qk_norm.is_some_and(|n| n.scope == QkNormScope::PerHead);
        if let Some((qn, kn)) = norms.filter(|_| !per_head) {
            q = qn.forward(&q.contiguous()?)?;
            k = kn.forward(&k.contiguous()?)?;
        }
        let mut q = heads(&q, self.cfg.num_heads)?;
        let mut k = heads(&k, self.cfg.num_kv_heads)?;
        let v = heads(&v, self.cfg.num_kv_heads)?;
        if let Some((qn, kn)) = norms.filter(|_| per_head) {
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
