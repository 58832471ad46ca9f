//! Fused normalizations (RMSNorm, LayerNorm) and rotary embeddings.

use candle_core::{DType as C, Result, Tensor};
use infer_core::RopeLayout;

/// f16/bf16 inputs are normalized in f32 (as the reference implementations do) and the result
/// is cast back; the weight is applied in f32 too.
fn compute_dtype(d: C) -> Result<C> {
    match d {
        C::F32 => Ok(C::F32),
        C::F16 | C::BF16 => Ok(C::F32),
        other => candle_core::bail!("normalization needs a float tensor, got {other:?}"),
    }
}

fn as_dtype(t: &Tensor, d: C) -> Result<Tensor> {
    if t.dtype() == d {
        Ok(t.clone())
    } else {
        t.to_dtype(d)
    }
}

/// `x / sqrt(mean(x²) + eps) * weight` over the last dim.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let d = x.dtype();
    let cd = compute_dtype(d)?;
    let xc = as_dtype(x, cd)?.contiguous()?;
    let wc = as_dtype(w, cd)?.contiguous()?;
    let y = candle_nn::ops::rms_norm(&xc, &wc, eps)?;
    as_dtype(&y, d)
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim (biased variance).
pub fn layer_norm(x: &Tensor, w: &Tensor, b: Option<&Tensor>, eps: f32) -> Result<Tensor> {
    let d = x.dtype();
    let cd = compute_dtype(d)?;
    let xc = as_dtype(x, cd)?.contiguous()?;
    let wc = as_dtype(w, cd)?.contiguous()?;
    let bc = match b {
        Some(b) => as_dtype(b, cd)?.contiguous()?,
        None => Tensor::zeros(wc.dims(), cd, wc.device())?,
    };
    let y = candle_nn::ops::layer_norm(&xc, &wc, &bc, eps)?;
    as_dtype(&y, d)
}

/// Rotary embedding of x (b, h, t, d) with cos/sin of shape (t', d/2), t' >= t (the first t
/// rows are used). Tables are cast to x's dtype; x is made contiguous if needed.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
    let (_b, _h, t, d) = x.dims4()?;
    if d % 2 != 0 {
        candle_core::bail!("rope needs an even head dim, got {d}");
    }
    let prep = |cs: &Tensor, name: &str| -> Result<Tensor> {
        let (rows, half) = cs.dims2()?;
        if half * 2 != d || rows < t {
            candle_core::bail!("{name} table {:?} does not fit x {:?} (want ({t}, {}))", cs.dims(), x.dims(), d / 2);
        }
        let cs = if rows > t { cs.narrow(0, 0, t)? } else { cs.clone() };
        as_dtype(&cs, x.dtype())?.contiguous()
    };
    let (cos, sin) = (prep(cos, "cos")?, prep(sin, "sin")?);
    let x = x.contiguous()?;
    match layout {
        RopeLayout::SplitHalf => candle_nn::rotary_emb::rope(&x, &cos, &sin),
        RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin),
    }
}
