//! Scaled dot-product attention: grouped-query, causal with a KV offset, sliding window,
//! additive mask, logit soft-capping.
//!
//! Without soft-capping this is MLX's `fast::scaled_dot_product_attention` (fused kernels on
//! Metal, a composite of matmuls and a precise softmax on the CPU), which takes grouped K/V
//! heads as they are. Causal and window visibility are passed as one additive mask built from
//! absolute positions (query i sits at `tk - tq + i`), skipped where every key is visible (a
//! causal decode step). Soft-capping acts on the raw scores, which the fused kernel does not
//! expose: that path computes scores explicitly.
//!
//! On the CPU q/k/v are computed in f32 (as the candle and tch backends do); on the GPU half
//! types stay in their dtype (the kernels accumulate in f32).

use mlx_rs::{fast, ops, Array, Dtype};

use crate::error::{bail, OpResult};
use crate::ops::cast;
use crate::tensor::MlxTensor;

#[derive(Debug, Clone, Copy)]
pub struct AttnParams {
    pub scale: f32,
    pub causal: bool,
    pub window: usize,
    pub softcap: f32,
    /// Compute in f32 whatever the inputs' dtype (the CPU).
    pub f32_compute: bool,
}

/// q (b,hq,tq,d), k (b,hkv,tk,d), v (b,hkv,tk,dv), mask broadcastable to (b,hq,tq,tk)
/// -> (b,hq,tq,dv) in q's dtype.
pub fn attention(
    q: &MlxTensor,
    k: &MlxTensor,
    v: &MlxTensor,
    mask: Option<&MlxTensor>,
    p: AttnParams,
) -> OpResult<MlxTensor> {
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
    let out_dtype = q.a.dtype();
    if tq == 0 {
        let z = ops::zeros_dtype(&[b as i32, hq as i32, 0, dv as i32], out_dtype)?;
        return MlxTensor::new(z);
    }
    // A cache in another dtype than q's (f16 keys and values): q is taken at the cache's
    // precision first.
    let cache = k.a.dtype();
    let ck = if p.f32_compute { Dtype::Float32 } else { cache };
    let qc = cast(&cast(&q.a, cache)?, ck)?;
    let (kc, vc) = (cast(&k.a, ck)?, cast(&v.a, ck)?);

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
            let dims: Vec<i32> = dims.iter().map(|&x| x as i32).collect();
            Some(cast(&m.a, ck)?.reshape(&dims)?)
        }
    };
    let vis = visibility_mask(tq, tk, p, ck)?;
    let has_user_mask = user_mask.is_some();
    let mask = match (user_mask, vis) {
        (None, None) => None,
        (Some(m), None) | (None, Some(m)) => Some(m),
        (Some(m), Some(v)) => Some(m.add(&v)?),
    };
    // Rows with no visible key: NaN, as PyTorch's eager attention and the candle backend give
    // (fused kernels may return 0). Only an explicit mask can hide a whole row.
    let dead_rows = match (&mask, has_user_mask) {
        (Some(m), true) => Some(m.max_axis(-1, true)?.eq(Array::from_f32(f32::NEG_INFINITY))?),
        _ => None,
    };
    let out = if p.softcap > 0.0 {
        explicit(&qc, &kc, &vc, mask.as_ref(), p, [b, hq, tq, hkv, tk, dv])?
    } else {
        match &mask {
            Some(m) => fast::scaled_dot_product_attention(&qc, &kc, &vc, p.scale, m, None)?,
            None => fast::scaled_dot_product_attention(&qc, &kc, &vc, p.scale, None, None)?,
        }
    };
    let out = match dead_rows {
        Some(dead) => ops::select(&dead, Array::from_f32(f32::NAN).as_dtype(out.dtype())?, &out)?,
        None => out,
    };
    MlxTensor::new(cast(&out, out_dtype)?)
}

/// The additive (tq, tk) mask of causal / window visibility: 0 where query i (absolute position
/// `tk - tq + i`) sees key j, -inf elsewhere; `None` when every query sees every key.
fn visibility_mask(tq: usize, tk: usize, p: AttnParams, dtype: Dtype) -> OpResult<Option<Array>> {
    let first = tk as i64 - tq as i64;
    let last = first + tq as i64 - 1;
    let causal_hides = p.causal && first < tk as i64 - 1;
    let window_hides = p.window > 0 && last - p.window as i64 >= 0;
    if !causal_hides && !window_hides {
        return Ok(None);
    }
    let qpos: Vec<i32> = (0..tq as i32).map(|i| i + first as i32).collect();
    let kpos: Vec<i32> = (0..tk as i32).collect();
    let qpos = Array::from_slice(&qpos, &[tq as i32, 1]);
    let kpos = Array::from_slice(&kpos, &[1, tk as i32]);
    let mut hidden = ops::zeros_dtype(&[tq as i32, tk as i32], Dtype::Bool)?;
    if p.causal {
        hidden = hidden.logical_or(kpos.gt(&qpos)?)?;
    }
    if p.window > 0 {
        // visible iff j > pos - window
        hidden = hidden.logical_or(kpos.le(qpos.subtract(Array::from_int(p.window as i32))?)?)?;
    }
    let neg_inf = Array::from_f32(f32::NEG_INFINITY).as_dtype(dtype)?;
    let zero = Array::from_f32(0.0).as_dtype(dtype)?;
    Ok(Some(ops::select(&hidden, &neg_inf, &zero)?))
}

/// Scores computed explicitly (soft-capping): softmax(softcap(q·kᵀ·scale) + mask) · v, with the
/// softmax in f32. K/V heads are shared by `rep` query heads through a (b, hkv, rep·tq, d) view
/// of q, as in the candle backend.
fn explicit(q: &Array, k: &Array, v: &Array, mask: Option<&Array>, p: AttnParams, dims: [usize; 6]) -> OpResult<Array> {
    let [b, hq, tq, hkv, tk, dv] = dims.map(|x| x as i32);
    let rep = hq / hkv;
    let d = q.shape()[3];
    let qs = q.multiply(Array::from_f32(p.scale).as_dtype(q.dtype())?)?.reshape(&[b, hkv, rep * tq, d])?;
    let scores = qs.matmul(k.transpose_axes(&[0, 1, 3, 2])?)?.reshape(&[b, hkv, rep, tq, tk])?;
    let cap = Array::from_f32(p.softcap).as_dtype(scores.dtype())?;
    let mut scores = ops::tanh(scores.divide(&cap)?)?.multiply(&cap)?;
    if let Some(m) = mask {
        // (mb, mh, tq|1, tk|1), or (tq, tk) for visibility alone -> (mb, hkv|1, rep|1, ., .)
        let m = if m.ndim() == 2 { m.reshape(&[1, 1, tq, tk])? } else { m.clone() };
        let s = m.shape().to_vec();
        let (mb, mh, mq, mk) = (s[0], s[1], s[2], s[3]);
        let m5 = if mh == 1 { m.reshape(&[mb, 1, 1, mq, mk])? } else { m.reshape(&[mb, hkv, rep, mq, mk])? };
        scores = scores.add(&m5)?;
    }
    let probs = ops::softmax_axis(&cast(&scores, Dtype::Float32)?, -1, true)?.as_dtype(v.dtype())?;
    let out = probs.reshape(&[b, hkv, rep * tq, tk])?.matmul(v)?;
    Ok(out.reshape(&[b, hq, tq, dv])?)
}
