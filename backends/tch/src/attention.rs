//! Scaled dot-product attention: grouped-query, causal with a KV offset, sliding window,
//! additive mask, logit soft-capping.
//!
//! Without soft-capping this is libtorch's `scaled_dot_product_attention` (fused CPU/CUDA
//! kernels, `enable_gqa` so K/V are not repeated per query head). Its `is_causal` aligns the
//! causal triangle top-left (query i sees keys 0..=i), which is wrong once a KV cache holds
//! earlier positions, so causal/window visibility is passed as an additive mask built from the
//! absolute positions (query i sits at `tk - tq + i`), and skipped where every key is visible
//! (a causal decode step). Soft-capping must act on the raw scores, which SDPA does not expose:
//! that path computes scores explicitly.
//!
//! On the CPU q/k/v are computed in f32 (as the candle backend does, and as its PEERS-measured
//! bf16 CPU kernels would be slow); on CUDA half types stay in their dtype (the fused kernels
//! accumulate in f32).

use tch::{Device, Kind, Tensor};

use crate::error::{bail, OpResult};
use crate::ops::cast;
use crate::tensor::TchTensor;

#[derive(Debug, Clone, Copy)]
pub struct AttnParams {
    pub scale: f32,
    pub causal: bool,
    pub window: usize,
    pub softcap: f32,
}

/// q (b,hq,tq,d), k (b,hkv,tk,d), v (b,hkv,tk,dv), mask broadcastable to (b,hq,tq,tk)
/// -> (b,hq,tq,dv) in q's dtype.
pub fn attention(
    q: &TchTensor,
    k: &TchTensor,
    v: &TchTensor,
    mask: Option<&TchTensor>,
    p: AttnParams,
) -> OpResult<TchTensor> {
    let ([b, hq, tq, d], [bk, hkv, tk, dk], [bv, hv, tv, dv]) = match (q.dims(), k.dims(), v.dims()) {
        (&[a, b_, c, d], &[e, f, g, h], &[i, j, l, m]) => ([a, b_, c, d], [e, f, g, h], [i, j, l, m]),
        _ => bail!("q, k, v must be rank 4, got {:?}, {:?}, {:?}", q.dims(), k.dims(), v.dims()),
    };
    if bk != b || bv != b || hv != hkv || tv != tk || dk != d {
        bail!("q {:?}, k {:?}, v {:?} do not fit together", q.dims(), k.dims(), v.dims());
    }
    if hkv == 0 || hq % hkv != 0 {
        bail!("{hq} query heads are not a multiple of {hkv} kv heads");
    }
    if p.causal && tq > tk {
        bail!("causal attention with more queries ({tq}) than keys ({tk})");
    }
    if k.dtype != v.dtype || !q.is_float() || !k.is_float() {
        bail!("q, k, v must be float with k and v alike: {}, {}, {}", q.dtype, k.dtype, v.dtype);
    }
    let out_kind = q.t.f_kind()?;
    let device = q.t.device();
    if tq == 0 {
        return TchTensor::new(Tensor::f_zeros([b as i64, hq as i64, 0, dv as i64], (out_kind, device))?, false);
    }
    // A cache in another dtype than q's (f16 keys and values): q is taken at the cache's
    // precision; on CUDA the whole attention then runs in that dtype.
    let cache_kind = k.t.f_kind()?;
    let ck = if device == Device::Cpu { Kind::Float } else { cache_kind };
    let q_at_cache = if cache_kind != out_kind { cast(&q.t, cache_kind)? } else { q.t.shallow_clone() };
    let (qc, kc, vc) = (cast(&q_at_cache, ck)?, cast(&k.t, ck)?, cast(&v.t, ck)?);

    let user_mask = match mask {
        None => None,
        Some(m) => {
            if !m.is_float() {
                bail!("the attention mask is additive and must be float, got {}", m.dtype);
            }
            if m.rank() > 4 {
                bail!("mask {:?} has rank > 4", m.dims());
            }
            let mut dims = vec![1usize; 4 - m.rank()];
            dims.extend_from_slice(m.dims());
            for (got, full) in dims.iter().zip([b, hq, tq, tk]) {
                if *got != 1 && *got != full {
                    bail!("mask {:?} does not broadcast to {:?}", m.dims(), [b, hq, tq, tk]);
                }
            }
            let dims: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
            Some(cast(&m.t, ck)?.f_reshape(dims)?)
        }
    };
    let vis = visibility_mask(tq, tk, p, ck, device)?;
    let has_user_mask = user_mask.is_some();
    let mask = match (user_mask, vis) {
        (None, None) => None,
        (Some(m), None) | (None, Some(m)) => Some(m),
        (Some(m), Some(v)) => Some(m.f_add(&v)?),
    };
    // Rows with no visible key: NaN, as PyTorch's eager attention and the candle backend give
    // (the fused kernels return 0). Only an explicit mask can hide a whole row: causal/window
    // visibility alone always leaves a query its own position.
    let dead_rows = match (&mask, has_user_mask) {
        (Some(m), true) => Some(m.f_amax([-1i64].as_slice(), true)?.f_eq(f64::NEG_INFINITY)?),
        _ => None,
    };
    let out = match (p.softcap > 0.0, mask) {
        (true, mask) => explicit(&qc, &kc, &vc, mask, p, hq / hkv)?,
        (false, mask) => {
            Tensor::f_scaled_dot_product_attention(&qc, &kc, &vc, mask.as_ref(), 0.0, false, p.scale as f64, hq != hkv)?
        }
    };
    let out = match dead_rows {
        Some(dead) => out.f_masked_fill(&dead, f64::NAN)?,
        None => out,
    };
    TchTensor::new(cast(&out, out_kind)?, false)
}

/// The additive (tq, tk) mask of causal / window visibility: 0 where query i (absolute position
/// `tk - tq + i`) sees key j, -inf elsewhere; `None` when every query sees every key.
fn visibility_mask(tq: usize, tk: usize, p: AttnParams, kind: Kind, device: Device) -> OpResult<Option<Tensor>> {
    let first = tk as i64 - tq as i64;
    let last = first + tq as i64 - 1;
    // Query 0 (the one that sees the fewest keys when causal) sees all keys iff it is the last
    // position; the window hides keys <= pos - window, i.e. nothing iff last - window < 0 for the
    // query that sees the most (the last one).
    let causal_hides = p.causal && first < tk as i64 - 1;
    let window_hides = p.window > 0 && last - p.window as i64 >= 0;
    if !causal_hides && !window_hides {
        return Ok(None);
    }
    let qpos = Tensor::f_arange(tq as i64, (Kind::Int64, device))?.f_add_scalar(first)?.f_unsqueeze(1)?;
    let kpos = Tensor::f_arange(tk as i64, (Kind::Int64, device))?.f_unsqueeze(0)?;
    let mut hidden = Tensor::f_zeros([tq as i64, tk as i64], (Kind::Bool, device))?;
    if p.causal {
        hidden = hidden.f_logical_or(&kpos.f_gt_tensor(&qpos)?)?;
    }
    if p.window > 0 {
        // visible iff j > pos - window
        hidden = hidden.f_logical_or(&kpos.f_le_tensor(&qpos.f_sub_scalar(p.window as i64)?)?)?;
    }
    let m = Tensor::f_zeros([tq as i64, tk as i64], (kind, device))?.f_masked_fill(&hidden, f64::NEG_INFINITY)?;
    Ok(Some(m))
}

/// Scores computed explicitly (soft-capping): softmax(softcap(q·kᵀ·scale) + mask) · v, with the
/// softmax in f32. K/V heads are shared by `rep` query heads through a (b, hkv, rep·tq, d) view
/// of q, as in the candle backend.
fn explicit(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<Tensor>, p: AttnParams, rep: usize) -> OpResult<Tensor> {
    let (b, hq, tq, d) = q.size4()?;
    let (_, hkv, tk, _) = k.size4()?;
    let dv = v.size4()?.3;
    let rep = rep as i64;
    let qs = q.f_mul_scalar(p.scale as f64)?.f_reshape([b, hkv, rep * tq, d])?;
    let scores = qs.f_matmul(&k.f_transpose(-2, -1)?)?.f_reshape([b, hkv, rep, tq, tk])?;
    let cap = p.softcap as f64;
    let mut scores = scores.f_div_scalar(cap)?.f_tanh()?.f_mul_scalar(cap)?;
    if let Some(m) = mask {
        // (mb, mh, tq|1, tk|1), or (tq, tk) for visibility alone -> (mb, hkv|1, rep|1, ., .)
        let m = if m.dim() == 2 { m.f_reshape([1, 1, tq, tk])? } else { m };
        let (mb, mh, mq, mk) = m.size4()?;
        let m5 = if mh == 1 {
            m.f_reshape([mb, 1, 1, mq, mk])?
        } else {
            m.f_contiguous()?.f_reshape([mb, hkv, rep, mq, mk])?
        };
        scores = scores.f_add(&m5)?;
    }
    let probs = scores.f_softmax(-1, Kind::Float)?.f_to_kind(v.f_kind()?)?;
    let out = probs.f_reshape([b, hkv, rep * tq, tk])?.f_matmul(v)?;
    Ok(out.f_reshape([b, hq, tq, dv])?)
}
