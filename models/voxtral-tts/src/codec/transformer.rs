//! The codec decoder's transformer layers (mlx-audio `audio_tokenizer.TransformerLayer`):
//!
//! ```text
//! x + attention_scale * attn(rms(x)) -> x + ffn_scale * swiglu(rms(x))
//! ```
//! Attention: q/k RMSNorm over the whole projection (not per head), GQA, ALiBi
//! (`score[h, i, j] += slope_h * (j - i)`), causal, each query seeing itself and the `window`
//! keys before it; no RoPE. Norm eps is the codec's `norm_eps` (0.01), the q/k norms' `qk_norm_eps`.
//!
//! The window is at most 16 steps, so attention runs over query blocks against only the keys
//! their window reaches: memory stays linear in the signal length.

use infer_core::{AttentionOpts, Backend, DType, Result, Tensor, Weights};
use infer_layers::{Linear, RmsNorm, SwiGlu};

use crate::config::CodecArgs;

/// Queries per attention block.
const QUERY_BLOCK: usize = 256;

struct Attention {
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

struct Layer {
    attention_norm: RmsNorm,
    attention: Attention,
    attention_scale: Option<Tensor>,
    ffn_norm: RmsNorm,
    feed_forward: SwiGlu,
    ffn_scale: Option<Tensor>,
}

/// One decoder stage's transformer layers, all with the stage's window.
pub struct TransformerBlock {
    layers: Vec<Layer>,
    window: usize,
    /// ALiBi slope per head.
    slopes: Vec<f32>,
}

/// ALiBi slopes (Press et al.; mlx-audio `_get_alibi_slopes`): a geometric sequence from
/// `2^(-8/n)`, interleaving the next power of two's slopes when `n` is not one.
pub fn alibi_slopes(n_heads: usize) -> Vec<f32> {
    fn power_of_2(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0))));
        (0..n).map(|i| start * start.powi(i as i32)).collect()
    }
    let slopes = if (n_heads as f64).log2().fract() == 0.0 {
        power_of_2(n_heads)
    } else {
        let closest = 1usize << (n_heads as f64).log2().floor() as u32;
        let mut s = power_of_2(closest);
        s.extend(power_of_2(2 * closest).into_iter().step_by(2).take(n_heads - closest));
        s
    };
    slopes.into_iter().map(|s| s as f32).collect()
}

impl TransformerBlock {
    /// `w` is rooted at `audio_tokenizer.decoder_blocks.{2i+1}`.
    pub fn load(w: &Weights, c: &CodecArgs, n_layers: usize, window: usize) -> Result<Self> {
        let (dim, eps) = (c.dim, c.norm_eps);
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let layers = (0..n_layers)
            .map(|i| {
                let l = w.prefixed(format!("layers.{i}"));
                let a = l.prefixed("attention");
                let scale = |name: &str| c.layer_scale.then(|| l.get_shaped(name, &[dim])).transpose();
                Ok(Layer {
                    attention_norm: RmsNorm::load(&l.prefixed("attention_norm"), dim, eps)?,
                    attention: Attention {
                        wq: Linear::load(&a.prefixed("wq"), q_dim, dim, false)?,
                        wk: Linear::load(&a.prefixed("wk"), kv_dim, dim, false)?,
                        wv: Linear::load(&a.prefixed("wv"), kv_dim, dim, false)?,
                        wo: Linear::load(&a.prefixed("wo"), dim, q_dim, false)?,
                        q_norm: c
                            .qk_norm
                            .then(|| RmsNorm::load(&a.prefixed("q_norm"), q_dim, c.qk_norm_eps))
                            .transpose()?,
                        k_norm: c
                            .qk_norm
                            .then(|| RmsNorm::load(&a.prefixed("k_norm"), kv_dim, c.qk_norm_eps))
                            .transpose()?,
                        n_heads: c.n_heads,
                        n_kv_heads: c.n_kv_heads,
                        head_dim: c.head_dim,
                    },
                    attention_scale: scale("attention_scale")?,
                    ffn_norm: RmsNorm::load(&l.prefixed("ffn_norm"), dim, eps)?,
                    feed_forward: SwiGlu::load(&l.prefixed("feed_forward"), dim, c.hidden_dim, false)?,
                    ffn_scale: scale("ffn_scale")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TransformerBlock { layers, window, slopes: alibi_slopes(c.n_heads) })
    }

    /// `x` (1, t, dim) -> (1, t, dim).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        let mut masks = MaskCache::default();
        for l in &self.layers {
            let mut h = l.attention.forward(&l.attention_norm.forward(&x)?, self, &mut masks)?;
            if let Some(s) = &l.attention_scale {
                h = h.mul(s)?;
            }
            x = x.add(&h)?;
            let mut h = l.feed_forward.forward(&l.ffn_norm.forward(&x)?)?;
            if let Some(s) = &l.ffn_scale {
                h = h.mul(s)?;
            }
            x = x.add(&h)?;
        }
        Ok(x)
    }

    /// The ALiBi bias of queries `q0..q0+nq` against keys `k0..k0+nk`: (1, heads, nq, nk). The
    /// causal and window limits are the attention op's (`causal`, `window`).
    fn alibi(&self, backend: &Backend, dtype: DType, q0: usize, nq: usize, k0: usize, nk: usize) -> Result<Tensor> {
        let mut bias = Vec::with_capacity(self.slopes.len() * nq * nk);
        for &slope in &self.slopes {
            for i in q0..q0 + nq {
                for j in k0..k0 + nk {
                    bias.push(slope * (j as f32 - i as f32));
                }
            }
        }
        Tensor::from_f32(backend, &bias, &[1, self.slopes.len(), nq, nk])?.to_dtype(dtype)
    }
}

/// ALiBi masks by (query count, key count): every full block after the first has the same one.
#[derive(Default)]
struct MaskCache(Vec<((usize, usize), Tensor)>);

impl Attention {
    fn forward(&self, x: &Tensor, block: &TransformerBlock, masks: &mut MaskCache) -> Result<Tensor> {
        let (t, d) = (x.dim(1), self.head_dim);
        let norm = |n: &Option<RmsNorm>, y: Tensor| match n {
            Some(n) => n.forward(&y),
            None => Ok(y),
        };
        let heads = |y: Tensor, n: usize| y.reshape(&[1, t, n, d])?.transpose(1, 2)?.contiguous();
        let q = heads(norm(&self.q_norm, self.wq.forward(x)?)?, self.n_heads)?;
        let k = heads(norm(&self.k_norm, self.wk.forward(x)?)?, self.n_kv_heads)?;
        let v = heads(self.wv.forward(x)?, self.n_kv_heads)?;
        let opts =
            AttentionOpts { scale: 1.0 / (d as f32).sqrt(), causal: true, window: block.window + 1, softcap: 0.0 };
        let mut outs = Vec::with_capacity(t.div_ceil(QUERY_BLOCK));
        for q0 in (0..t).step_by(QUERY_BLOCK) {
            let nq = QUERY_BLOCK.min(t - q0);
            let k0 = q0.saturating_sub(block.window);
            let nk = q0 + nq - k0;
            // The bias depends on j - i only, and a block's shape fixes its query/key offset.
            let mask = match masks.0.iter().find(|(shape, _)| *shape == (nq, nk)) {
                Some((_, m)) => m.clone(),
                None => {
                    let m = block.alibi(x.backend(), x.dtype(), q0, nq, k0, nk)?;
                    masks.0.push(((nq, nk), m.clone()));
                    m
                }
            };
            let y = Tensor::attention(
                &q.narrow(2, q0, nq)?,
                &k.narrow(2, k0, nk)?,
                &v.narrow(2, k0, nk)?,
                Some(&mask),
                opts,
            )?;
            outs.push(y);
        }
        let y = Tensor::concat(&outs.iter().collect::<Vec<_>>(), 2)?;
        self.wo.forward(&y.transpose(1, 2)?.reshape(&[1, t, self.n_heads * d])?)
    }
}

#[cfg(test)]
mod tests {
    use super::alibi_slopes;

    #[test]
    fn alibi_slopes_match_the_reference_formula() {
        // n = 8: 2^-1, 2^-2, ..., 2^-8.
        let s = alibi_slopes(8);
        for (i, v) in s.iter().enumerate() {
            assert!((v - 0.5f32.powi(i as i32 + 1)).abs() < 1e-7, "{s:?}");
        }
        // n = 6: the 4 slopes of n = 4, then every other slope of n = 8.
        let s = alibi_slopes(6);
        assert_eq!(s.len(), 6);
        assert!((s[0] - 0.25).abs() < 1e-7 && (s[4] - 0.5).abs() < 1e-7 && (s[5] - 0.125).abs() < 1e-7, "{s:?}");
    }
}
