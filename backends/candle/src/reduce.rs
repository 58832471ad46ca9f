//! Reductions, softmax / log-softmax, cumulative sums and arg-sort.

use candle_core::{DType as C, Result, Tensor, D};
use half::{bf16, f16};
use infer_core::ReduceOp;

use crate::elementwise::is_float;

fn check_dim(x: &Tensor, dim: usize) -> Result<()> {
    if dim >= x.rank() {
        candle_core::bail!("dim {dim} out of range for shape {:?}", x.dims());
    }
    Ok(())
}

/// Reduction along `dim`. As in PyTorch: sums of integers are i64, f16/bf16 sums and means
/// accumulate in f32 (the result keeps the input dtype), means of integers are an error,
/// arg-max/min return the first index of the extreme value as u32.
pub fn reduce(x: &Tensor, op: ReduceOp, dim: usize, keepdim: bool) -> Result<Tensor> {
    check_dim(x, dim)?;
    let d = x.dtype();
    let y = match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            if op == ReduceOp::Mean && !is_float(d) {
                candle_core::bail!("mean of an integer tensor ({d:?}); convert to a float dtype first");
            }
            let (acc, out) = match d {
                C::F16 | C::BF16 => (C::F32, d),
                C::F32 => (C::F32, C::F32),
                _ => (C::I64, C::I64),
            };
            let xa = if d == acc { x.clone() } else { x.to_dtype(acc)? };
            let s = if op == ReduceOp::Sum { xa.sum_keepdim(dim)? } else { xa.mean_keepdim(dim)? };
            if s.dtype() == out {
                s
            } else {
                s.to_dtype(out)?
            }
        }
        ReduceOp::Max => x.max_keepdim(dim)?,
        ReduceOp::Min => x.min_keepdim(dim)?,
        ReduceOp::ArgMax => x.argmax_keepdim(dim)?,
        ReduceOp::ArgMin => x.argmin_keepdim(dim)?,
    };
    if keepdim {
        Ok(y)
    } else {
        y.squeeze(dim)
    }
}

fn to_f32(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == C::F32 {
        Ok(x.clone())
    } else if is_float(x.dtype()) {
        x.to_dtype(C::F32)
    } else {
        candle_core::bail!("needs a float tensor, got {:?}", x.dtype())
    }
}

fn back(y: Tensor, d: C) -> Result<Tensor> {
    if y.dtype() == d {
        Ok(y)
    } else {
        y.to_dtype(d)
    }
}

/// Softmax over the last dim, computed in f32; the result has the input dtype.
pub fn softmax(x: &Tensor) -> Result<Tensor> {
    let y = candle_nn::ops::softmax_last_dim(&to_f32(x)?.contiguous()?)?;
    back(y, x.dtype())
}

/// Log-softmax over the last dim, computed in f32; the result has the input dtype.
pub fn log_softmax(x: &Tensor) -> Result<Tensor> {
    let y = candle_nn::ops::log_softmax(&to_f32(x)?, D::Minus1)?;
    back(y, x.dtype())
}

/// In-place inclusive scan over the middle axis of a row-major (outer, n, inner) buffer.
fn scan<T: Copy + std::ops::AddAssign>(v: &mut [T], n: usize, inner: usize) {
    if n == 0 || inner == 0 {
        return;
    }
    for block in v.chunks_mut(n * inner) {
        for i in 1..n {
            let (prev, cur) = block.split_at_mut(i * inner);
            let prev = &prev[(i - 1) * inner..];
            for (c, p) in cur[..inner].iter_mut().zip(prev) {
                *c += *p;
            }
        }
    }
}

/// Inclusive cumulative sum along `dim`, in O(n) (candle's own `cumsum` is a matmul with a
/// triangular matrix: O(n²) time and memory, unusable over a vocabulary). Floats accumulate in
/// f32 and keep their dtype; integers accumulate and return as i64 (PyTorch's promotion).
pub fn cumsum(x: &Tensor, dim: usize) -> Result<Tensor> {
    check_dim(x, dim)?;
    let dims = x.dims().to_vec();
    let n = dims[dim];
    let inner: usize = dims[dim + 1..].iter().product();
    let d = x.dtype();
    let flat = x.flatten_all()?; // row-major copy if strided
    let out = match d {
        C::F32 | C::F16 | C::BF16 => {
            let mut v = flat.to_dtype(C::F32)?.to_vec1::<f32>()?;
            scan(&mut v, n, inner);
            match d {
                C::F32 => Tensor::from_vec(v, dims, &candle_core::Device::Cpu)?,
                C::F16 => Tensor::from_vec(v.into_iter().map(f16::from_f32).collect::<Vec<_>>(), dims, x.device())?,
                _ => Tensor::from_vec(v.into_iter().map(bf16::from_f32).collect::<Vec<_>>(), dims, x.device())?,
            }
        }
        _ => {
            let mut v = flat.to_dtype(C::I64)?.to_vec1::<i64>()?;
            scan(&mut v, n, inner);
            Tensor::from_vec(v, dims, x.device())?
        }
    };
    Ok(out)
}

/// u32 indices sorting each row of the last dim (stable: ties keep their order).
pub fn argsort(x: &Tensor, descending: bool) -> Result<Tensor> {
    if x.rank() == 0 {
        candle_core::bail!("argsort of a scalar");
    }
    x.contiguous()?.arg_sort_last_dim(!descending)
}
