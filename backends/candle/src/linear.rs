//! Matrix products: `Matmul`, `Linear` (dense or quantized weight) and `Embedding`.

use candle_core::{DType as C, Result, Tensor};

use crate::convert;
use crate::mapped::MappedTensor;
use crate::quant;
use crate::tensor::CandleTensor;
use crate::weight_rows::{with_rows, WeightRows};
use crate::{f32_tiles, gemv, half_gemm};

/// `a @ b` with PyTorch `matmul` semantics: batch dims broadcast, 1-D operands are promoted to
/// matrices and the added dim removed afterwards.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.dtype() != b.dtype() {
        candle_core::bail!("dtypes differ: {:?} @ {:?} (convert one first)", a.dtype(), b.dtype());
    }
    // candle 0.11.1's CPU matmul folds the batches of `a` into one gemm when `b`'s batch stride
    // is 0 (a broadcast view), which is only right for a row-major `a`: copy a strided `a` then.
    let b_broadcast = b.rank() > 2 && b.stride()[..b.rank() - 2].iter().zip(b.dims()).any(|(&s, &n)| s == 0 && n > 1);
    let a_copy;
    let a = if b_broadcast && !a.is_contiguous() {
        a_copy = a.contiguous()?;
        &a_copy
    } else {
        a
    };
    match (a.rank(), b.rank()) {
        (0, _) | (_, 0) => candle_core::bail!("matmul of a scalar"),
        (1, 1) => a.unsqueeze(0)?.matmul(&b.unsqueeze(1)?)?.reshape(()),
        (1, _) => {
            let y = a.unsqueeze(0)?.broadcast_matmul(b)?;
            y.squeeze(y.rank() - 2)
        }
        (_, 1) => {
            let y = a.broadcast_matmul(&b.unsqueeze(1)?)?;
            y.squeeze(y.rank() - 1)
        }
        _ => a.broadcast_matmul(b),
    }
}

/// `x @ wᵀ + bias` for `x` of any rank >= 1 and `w` of shape (out, in).
///
/// Dense path: `x` is flattened to (m, in). Up to [`gemv::MAX_ROWS`] rows (decode) go through
/// the streaming kernel of [`gemv`] (f32 / f16 / bf16 weights read once, in place). Up to
/// [`f32_tiles::MAX_ROWS`] rows with f32 weights go to [`f32_tiles`] (register tiles that read
/// the weight in place, where gemm would pack it per call). More rows
/// with bf16 / f16 weights go to [`half_gemm`] (AMX or `vdpbf16ps` tiles for bf16 where the CPU
/// has them, else the weight widened to f32 a cache-sized panel at a time, f32 gemm per panel;
/// candle's bf16 matmul widened the whole weight per call); f32
/// weights to candle's gemm with the transposed *view* of `w` (gemm reads it through its
/// strides). Quantized path: the GGML kernels or candle's k-quant kernels.
pub fn linear(x: &Tensor, w: &CandleTensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let y = match w {
        CandleTensor::Quant(q) => quant::linear(x, q)?,
        CandleTensor::Dense(w) => dense_linear(x, w)?,
        CandleTensor::Mapped(m) => mapped_linear(x, m)?,
    };
    match bias {
        None => Ok(y),
        Some(b) => {
            let b = if b.dtype() != y.dtype() { b.to_dtype(y.dtype())? } else { b.clone() };
            match crate::elementwise::add_row_bias(&y, &b)? {
                Some(sum) => Ok(sum),
                None => y.broadcast_add(&b),
            }
        }
    }
}

fn dense_linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (n, k) = w.dims2()?;
    let (x2, out) = product_input(x, w.dtype(), n, k)?;
    let y = match with_rows(w, |rows| rows_product(&x2, rows, n, k)).transpose()?.flatten() {
        Some(y) => y,
        None => x2.matmul(&w.t()?)?,
    };
    y.reshape(out)
}

/// A weight left in the checkpoint's pages: the row kernels read it in place (a bf16 / f16
/// weight seen as f32 with f32 activations, its rows widened as they are read); a product they
/// do not take (f32 weights beyond the tiles' rows, misaligned bytes) runs on a copy.
fn mapped_linear(x: &Tensor, w: &MappedTensor) -> Result<Tensor> {
    let Some(rows) = w.rows() else { return dense_linear(x, w.dense()?) };
    let &[n, k] = w.dims() else { candle_core::bail!("a linear weight must be 2-D, got {:?}", w.dims()) };
    // The dtype ops see: a widened half-precision weight takes f32 activations.
    let dtype = convert::to_candle_dtype(w.dtype()).unwrap_or(rows.dtype());
    let (x2, out) = product_input(x, dtype, n, k)?;
    match rows_product(&x2, rows, n, k)? {
        Some(y) => y.reshape(out),
        None => dense_linear(x, w.dense()?),
    }
}

/// `x` checked against a weight (n, k) of `dtype` and flattened to (m, k), with the output's
/// shape.
fn product_input(x: &Tensor, dtype: C, n: usize, k: usize) -> Result<(Tensor, Vec<usize>)> {
    if x.dtype() != dtype {
        candle_core::bail!(
            "input is {:?} but the weight is {dtype:?}: convert one of them (weights are usually converted at load)",
            x.dtype()
        );
    }
    if !matches!(x.dtype(), C::F32 | C::F16 | C::BF16) {
        candle_core::bail!("linear needs float tensors, got {:?}", x.dtype());
    }
    let dims = x.dims().to_vec();
    if dims.last() != Some(&k) {
        candle_core::bail!("input {dims:?} does not end with the weight's in-features {k} (weight [{n}, {k}])");
    }
    let m: usize = dims[..dims.len() - 1].iter().product();
    // Rows of a contiguous x are already a (m, k) matrix; a strided x is copied once (it is
    // m * k elements, small next to the m * k * n product).
    let x2 = x.contiguous()?.reshape((m, k))?;
    let mut out = dims;
    *out.last_mut().expect("rank >= 1") = n;
    Ok((x2, out))
}

/// The row kernels' product `x2 @ wᵀ` (decode rows, a few dozen rows of f32 weights, or
/// half-precision weights), if they take it.
fn rows_product(x2: &Tensor, w: WeightRows<'_>, n: usize, k: usize) -> Result<Option<Tensor>> {
    if let Some(y) = gemv::linear_rows(x2, w, n, k, gemv::bf16_kernel())? {
        return Ok(Some(y));
    }
    match w {
        WeightRows::F32(rows) => f32_tiles::linear_rows(x2, rows, n, k),
        _ => half_gemm::linear_rows(x2, w, n, k, half_gemm::best_kernel()),
    }
}

/// Rows of `table` (vocab, dim) selected by `ids` (any shape): shape `ids.shape + [dim]`.
/// A quantized table dequantizes only the selected rows (to f32).
pub fn embedding(ids: &Tensor, table: &CandleTensor) -> Result<Tensor> {
    match table {
        CandleTensor::Quant(q) => quant::embedding(ids, q),
        CandleTensor::Mapped(m) => m.embedding(ids),
        CandleTensor::Dense(t) => {
            let (_, dim) = t.dims2()?;
            let mut out = ids.dims().to_vec();
            out.push(dim);
            let flat = ids.flatten_all()?;
            t.index_select(&flat, 0)?.reshape(out)
        }
    }
}
