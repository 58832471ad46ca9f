//! Shape and indexing ops: reshape, permute, narrow, concat, index-select, gather, and the
//! in-place slice assignment that KV caches rely on.

use candle_core::{Result, Tensor};

fn check_dim(x: &Tensor, dim: usize) -> Result<()> {
    if dim >= x.rank() {
        candle_core::bail!("dim {dim} out of range for shape {:?}", x.dims());
    }
    Ok(())
}

/// Same data, new shape; a strided input is copied to row-major first (candle does that).
pub fn reshape(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if shape.iter().product::<usize>() != x.elem_count() {
        candle_core::bail!("cannot reshape {:?} to {shape:?}", x.dims());
    }
    x.reshape(shape)
}

pub fn permute(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let mut seen = vec![false; x.rank()];
    if dims.len() != x.rank() || dims.iter().any(|&d| d >= x.rank() || std::mem::replace(&mut seen[d], true)) {
        candle_core::bail!("{dims:?} is not a permutation of the {} dims of {:?}", x.rank(), x.dims());
    }
    x.permute(dims)
}

pub fn narrow(x: &Tensor, dim: usize, start: usize, len: usize) -> Result<Tensor> {
    check_dim(x, dim)?;
    x.narrow(dim, start, len)
}

pub fn concat(xs: &[&Tensor], dim: usize) -> Result<Tensor> {
    let first = xs.first().ok_or_else(|| candle_core::Error::Msg("concat of no tensors".into()))?;
    check_dim(first, dim)?;
    let d = first.dtype();
    if let Some(o) = xs.iter().find(|t| t.dtype() != d) {
        candle_core::bail!("concat of {d:?} and {:?} tensors", o.dtype());
    }
    Tensor::cat(xs, dim)
}

pub fn index_select(x: &Tensor, ids: &Tensor, dim: usize) -> Result<Tensor> {
    check_dim(x, dim)?;
    if ids.rank() != 1 {
        candle_core::bail!("index_select ids must be 1-D, got {:?}", ids.dims());
    }
    x.index_select(ids, dim)
}

pub fn gather(x: &Tensor, ids: &Tensor, dim: usize) -> Result<Tensor> {
    check_dim(x, dim)?;
    // candle's CPU gather walks its operands as row-major buffers.
    x.contiguous()?.gather(&ids.contiguous()?, dim)
}

/// Writes `src` into `dst` at `start` along `dim` and returns `dst`.
///
/// In place when `dst` is contiguous (candle's `slice_set`): every tensor sharing `dst`'s storage
/// (clones, contiguous reshapes, narrowed views of it) sees the write, which is what makes a KV
/// cache append O(new tokens). The op contract says the caller treats `dst` as consumed. When
/// `dst` is a strided view the write cannot be done in place and a new tensor is returned.
/// `src` is cast to `dst`'s dtype.
pub fn slice_assign(dst: &Tensor, src: &Tensor, dim: usize, start: usize) -> Result<Tensor> {
    check_dim(dst, dim)?;
    if src.rank() != dst.rank() {
        candle_core::bail!("src {:?} and dst {:?} differ in rank", src.dims(), dst.dims());
    }
    for (i, (&a, &b)) in dst.dims().iter().zip(src.dims()).enumerate() {
        if (i == dim && start + b > a) || (i != dim && a != b) {
            candle_core::bail!(
                "src {:?} does not fit into dst {:?} at {start} along dim {dim}",
                src.dims(),
                dst.dims()
            );
        }
    }
    let src = if src.dtype() != dst.dtype() { src.to_dtype(dst.dtype())? } else { src.clone() };
    if src.elem_count() == 0 {
        return Ok(dst.clone());
    }
    if dst.is_contiguous() {
        // `slice_set` refuses a src sharing dst's storage (e.g. a view of dst itself): copy it.
        let src = if src.is_contiguous() { src } else { src.contiguous()? };
        match dst.slice_set(&src, dim, start) {
            Ok(()) => return Ok(dst.clone()),
            Err(_) => {
                dst.slice_set(&src.force_contiguous()?, dim, start)?;
                return Ok(dst.clone());
            }
        }
    }
    let ranges: Vec<std::ops::Range<usize>> = dst
        .dims()
        .iter()
        .enumerate()
        .map(|(i, &n)| if i == dim { start..start + src.dim(dim).unwrap_or(0) } else { 0..n })
        .collect();
    dst.slice_assign(&ranges, &src)
}
