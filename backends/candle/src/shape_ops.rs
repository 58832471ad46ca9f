//! Shape and indexing ops: reshape, permute, narrow, concat, index-select, gather, and the
//! in-place slice assignment that KV caches rely on.

use candle_core::{Result, Tensor};
use infer_cpu_kernels::Pool;

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

/// Row-major copy of `x`. candle copies a view whose last dim is strided one element at a time
/// through a strided index (a few ns each); such views (a permute that moved the contiguous dim
/// inward, e.g. the codec's sub-pixel interleave `(phases, c, t) -> (c, t, phases)`) are copied
/// here in tiles of the last two dims instead, reading runs along the one of the two with the
/// smaller stride. Other views go to candle, whose copy moves whole contiguous runs.
pub fn contiguous(x: &Tensor) -> Result<Tensor> {
    use candle_core::{CpuStorage, Storage};
    let rank = x.rank();
    if x.is_contiguous() || rank < 2 || x.stride()[rank - 1] == 1 || x.elem_count() < TILE_COPY_MIN {
        return x.contiguous();
    }
    let (storage, layout) = x.storage_and_layout();
    let view = StridedView { dims: x.dims(), strides: layout.stride(), start: layout.start_offset() };
    let out = match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Tensor::from_vec(view.copy(v), x.shape(), x.device())?,
        Storage::Cpu(CpuStorage::BF16(v)) => Tensor::from_vec(view.copy(v), x.shape(), x.device())?,
        Storage::Cpu(CpuStorage::F16(v)) => Tensor::from_vec(view.copy(v), x.shape(), x.device())?,
        _ => {
            drop(storage);
            return x.contiguous();
        }
    };
    Ok(out)
}

/// Views smaller than this are left to candle.
const TILE_COPY_MIN: usize = 4096;
/// Rows and columns of the last two dims per tile.
const TILE_ROWS: usize = 64;

struct StridedView<'a> {
    dims: &'a [usize],
    strides: &'a [usize],
    start: usize,
}

impl StridedView<'_> {
    fn copy<T: Copy + Send + Sync>(&self, src: &[T]) -> Vec<T> {
        let r = self.dims.len();
        let (a_len, b_len) = (self.dims[r - 2], self.dims[r - 1]);
        let (sa, sb) = (self.strides[r - 2], self.strides[r - 1]);
        let outer: usize = self.dims[..r - 2].iter().product();
        let (a_tiles, b_tiles) = (a_len.div_ceil(TILE_ROWS), b_len.div_ceil(TILE_ROWS));
        let n = outer * a_len * b_len;
        let mut out: Vec<T> = Vec::with_capacity(n);
        let dst = infer_cpu_kernels::out_ptr::OutPtr(out.as_mut_ptr());
        // A tile is TILE_ROWS × TILE_ROWS of the last two dims: a run of each of up to TILE_ROWS
        // source rows (often a page apart) and of each destination row.
        let run = |items: std::ops::Range<usize>| {
            for item in items {
                let (o, tile) = (item / (a_tiles * b_tiles), item % (a_tiles * b_tiles));
                // The source offset of outer index o (row-major over the leading dims).
                let (mut rest, mut base) = (o, self.start);
                for d in (0..r - 2).rev() {
                    base += rest % self.dims[d] * self.strides[d];
                    rest /= self.dims[d];
                }
                let (a0, b0) = (tile / b_tiles * TILE_ROWS, tile % b_tiles * TILE_ROWS);
                let (a1, b1) = ((a0 + TILE_ROWS).min(a_len), (b0 + TILE_ROWS).min(b_len));
                let last = base + (a1 - 1) * sa + (b1 - 1) * sb;
                assert!(last < src.len(), "view reaches {last} of {}", src.len());
                let to = dst.at((o * a_len + a0) * b_len + b0);
                if sa <= sb {
                    // Runs along a (stride sa) for each b.
                    for b in b0..b1 {
                        let from = src[base + b * sb + a0 * sa..].as_ptr();
                        for i in 0..a1 - a0 {
                            // SAFETY: source index ≤ `last` (checked above); destination row
                            // a0 + i, column b of outer index o: written by this tile only,
                            // inside the n values reserved.
                            unsafe { *to.add(i * b_len + b - b0) = *from.add(i * sa) };
                        }
                    }
                } else {
                    for i in 0..a1 - a0 {
                        let from = src[base + (a0 + i) * sa + b0 * sb..].as_ptr();
                        for j in 0..b1 - b0 {
                            // SAFETY: as above.
                            unsafe { *to.add(i * b_len + j) = *from.add(j * sb) };
                        }
                    }
                }
            }
        };
        let items = outer * a_tiles * b_tiles;
        crate::pool::CandlePool.execute_chunked_if(n >= 1 << 16, items, run);
        // SAFETY: the items covered every (outer, a, b) of the n values.
        unsafe { out.set_len(n) };
        out
    }
}
