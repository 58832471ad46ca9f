//! Fused normalizations (RMSNorm, LayerNorm) and rotary embeddings. The RMSNorm and rotary
//! row kernels are infer-cpu-kernels' `rms_norm` and `rope`, run on candle's pool; LayerNorm is
//! candle's.

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};
use infer_core::RopeLayout;

use crate::pool::CandlePool;
use infer_cpu_kernels::rms_norm::rms_norm_rows;
use infer_cpu_kernels::rope;

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
    crate::half_slices::to_dtype(t, d)
}

/// `x / sqrt(mean(x²) + eps) * weight` over the last dim.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    if let Some(y) = rms_rows(x, w, eps)? {
        return Ok(y);
    }
    let d = x.dtype();
    let cd = compute_dtype(d)?;
    let xc = as_dtype(x, cd)?.contiguous()?;
    let wc = as_dtype(w, cd)?.contiguous()?;
    let y = candle_nn::ops::rms_norm(&xc, &wc, eps)?;
    as_dtype(&y, d)
}

/// RMSNorm of a CPU x whose rows (its last dim) are contiguous, in any order (Qwen3's q/k norms
/// run on a transposed view), by a contiguous weight of x's dtype, computed as [`rms_norm`]'s
/// general path computes it (widen to f32, candle's f32 kernel: a sequential sum of squares,
/// `x / rms * weight`; round once), so the same bits, in one pass instead of three (the casts
/// and the copy to contiguous were 7% of a bf16 prefill's main thread). Rows are split across
/// candle's pool; the result is contiguous. `None` for other dtypes, layouts or devices.
fn rms_rows(x: &Tensor, w: &Tensor, eps: f32) -> Result<Option<Tensor>> {
    let n = x.dims().last().copied().unwrap_or(0);
    if n == 0 || w.dims() != [n] || !x.device().is_cpu() {
        return Ok(None);
    }
    let ((sx, lx), (sw, lw)) = (x.storage_and_layout(), w.storage_and_layout());
    let Some((w0, w1)) = lw.contiguous_offsets() else {
        return Ok(None);
    };
    let (dims, strides) = (lx.dims(), lx.stride());
    if n > 1 && strides[dims.len() - 1] != 1 {
        return Ok(None);
    }
    // Where row r (in x's logical order) starts in the storage.
    let outer = (&dims[..dims.len() - 1], &strides[..dims.len() - 1]);
    let start = lx.start_offset();
    let row_at = |mut r: usize| {
        let mut at = start;
        for (&d, &st) in outer.0.iter().zip(outer.1).rev() {
            at += (r % d) * st;
            r /= d;
        }
        at
    };
    let (shape, dev) = (x.shape(), x.device());
    let rows = x.elem_count() / n;
    let y = match (&*sx, &*sw) {
        (Storage::Cpu(CpuStorage::F32(v)), Storage::Cpu(CpuStorage::F32(a))) => {
            Tensor::from_vec(rms_norm_rows(v, rows, row_at, &a[w0..w1], eps, &CandlePool), shape, dev)?
        }
        (Storage::Cpu(CpuStorage::BF16(v)), Storage::Cpu(CpuStorage::BF16(a))) => {
            Tensor::from_vec(rms_norm_rows(v, rows, row_at, &a[w0..w1], eps, &CandlePool), shape, dev)?
        }
        (Storage::Cpu(CpuStorage::F16(v)), Storage::Cpu(CpuStorage::F16(a))) => {
            Tensor::from_vec(rms_norm_rows(v, rows, row_at, &a[w0..w1], eps, &CandlePool), shape, dev)?
        }
        _ => return Ok(None),
    };
    Ok(Some(y))
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
    if let Some(y) = rope_rows(&x, &cos, &sin, layout)? {
        return Ok(y);
    }
    match layout {
        RopeLayout::SplitHalf => candle_nn::rotary_emb::rope(&x, &cos, &sin),
        RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin),
    }
}

/// Rotary embedding of a contiguous CPU x (b, h, t, d) with contiguous (t, d/2) tables of its
/// dtype: the same operations as candle's kernel, in the same dtype (each product, and the sum
/// of two, rounded to x's dtype: what PyTorch's eager `q * cos + rotate_half(q) * sin` does in
/// bf16), so the same bits. candle runs them one value at a time through half's conversions
/// (12% of a bf16 prefill); infer-cpu-kernels' `rope` widens a row once and its roundings
/// vectorize. Rows are split across candle's pool. `None` where x is not an f32/bf16/f16 CPU tensor of this form.
fn rope_rows(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Option<Tensor>> {
    let (_, _, t, d) = x.dims4()?;
    if d > rope::MAX_DIM || !x.device().is_cpu() {
        return Ok(None);
    }
    let (sx, lx) = x.storage_and_layout();
    let (sc, lc) = cos.storage_and_layout();
    let (ss, ls) = sin.storage_and_layout();
    let (Some(ox), Some(oc), Some(os)) = (lx.contiguous_offsets(), lc.contiguous_offsets(), ls.contiguous_offsets())
    else {
        return Ok(None);
    };
    let (shape, dev) = (x.shape(), x.device());
    let layout = match layout {
        RopeLayout::SplitHalf => rope::RopeLayout::SplitHalf,
        RopeLayout::Interleaved => rope::RopeLayout::Interleaved,
    };
    let y = match (&*sx, &*sc, &*ss) {
        (Storage::Cpu(CpuStorage::F32(v)), Storage::Cpu(CpuStorage::F32(c)), Storage::Cpu(CpuStorage::F32(s))) => {
            Tensor::from_vec(
                rope::rope_rows(&v[ox.0..ox.1], &c[oc.0..oc.1], &s[os.0..os.1], t, d, layout, &CandlePool),
                shape,
                dev,
            )?
        }
        (Storage::Cpu(CpuStorage::BF16(v)), Storage::Cpu(CpuStorage::BF16(c)), Storage::Cpu(CpuStorage::BF16(s))) => {
            Tensor::from_vec(
                rope::rope_rows(&v[ox.0..ox.1], &c[oc.0..oc.1], &s[os.0..os.1], t, d, layout, &CandlePool),
                shape,
                dev,
            )?
        }
        (Storage::Cpu(CpuStorage::F16(v)), Storage::Cpu(CpuStorage::F16(c)), Storage::Cpu(CpuStorage::F16(s))) => {
            Tensor::from_vec(
                rope::rope_rows(&v[ox.0..ox.1], &c[oc.0..oc.1], &s[os.0..os.1], t, d, layout, &CandlePool),
                shape,
                dev,
            )?
        }
        _ => return Ok(None),
    };
    Ok(Some(y))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::half_slices::same_bits;

    /// The same bits as the general path (widen, candle's f32 kernel, round) for every float
    /// dtype, on one thread and split across the pool.
    #[test]
    fn rms_rows_match_the_general_path() {
        let dev = &candle_core::Device::Cpu;
        for (rows, n) in [(3, 8), (128, 1024), (40, 128), (37, 100), (18, 7)] {
            let x: Vec<f32> = (0..rows * n).map(|i| ((i * 7919 % 4099) as f32 - 2049.0) * 0.0031).collect();
            let w: Vec<f32> = (0..n).map(|i| 1.0 + ((i * 31 % 17) as f32 - 8.0) * 0.05).collect();
            let (x, w) = (Tensor::from_vec(x, (rows, n), dev).unwrap(), Tensor::from_vec(w, n, dev).unwrap());
            for dtype in [C::F32, C::BF16, C::F16] {
                let (x, w) = (x.to_dtype(dtype).unwrap(), w.to_dtype(dtype).unwrap());
                // Contiguous, and a transposed view of (2, rows / 2, n) as q/k norms see it.
                let xt =
                    x.narrow(0, 0, rows / 2 * 2).unwrap().reshape((rows / 2, 2, n)).unwrap().transpose(0, 1).unwrap();
                for x in [x.clone(), xt] {
                    let got = rms_rows(&x, &w, 1e-6).unwrap().expect("taken");
                    let (xc, wc) = (x.to_dtype(C::F32).unwrap().contiguous().unwrap(), w.to_dtype(C::F32).unwrap());
                    let want = candle_nn::ops::rms_norm(&xc, &wc, 1e-6).unwrap().to_dtype(dtype).unwrap();
                    assert_eq!(got.dims(), x.dims());
                    assert!(same_bits(&got, &want), "{dtype:?} {:?}", x.dims());
                }
            }
        }
    }

    /// The same bits as candle's kernel for every float dtype and both layouts, on one thread
    /// and split across the pool.
    #[test]
    fn rope_rows_match_candles_kernel() {
        let dev = &candle_core::Device::Cpu;
        for (b, h, t, d) in [(1, 2, 3, 8), (2, 16, 40, 128)] {
            let n = b * h * t * d;
            let x: Vec<f32> = (0..n).map(|i| ((i * 7919 % 4099) as f32 - 2049.0) * 0.0031).collect();
            let angles: Vec<f32> =
                (0..t * d / 2).map(|i| (i % (d / 2)) as f32 * 0.37 + (i / (d / 2)) as f32 * 0.11).collect();
            let x = Tensor::from_vec(x, (b, h, t, d), dev).unwrap();
            let a = Tensor::from_vec(angles, (t, d / 2), dev).unwrap();
            let (cos, sin) = (a.cos().unwrap(), a.sin().unwrap());
            for dtype in [C::F32, C::BF16, C::F16] {
                let (x, cos, sin) =
                    (x.to_dtype(dtype).unwrap(), cos.to_dtype(dtype).unwrap(), sin.to_dtype(dtype).unwrap());
                for layout in [RopeLayout::SplitHalf, RopeLayout::Interleaved] {
                    let got = rope_rows(&x, &cos, &sin, layout).unwrap().expect("taken");
                    let want = match layout {
                        RopeLayout::SplitHalf => candle_nn::rotary_emb::rope(&x, &cos, &sin).unwrap(),
                        RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin).unwrap(),
                    };
                    assert!(same_bits(&got, &want), "{dtype:?} {layout:?} {:?}", (b, h, t, d));
                }
            }
        }
    }
}
