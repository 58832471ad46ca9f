//! The Snake activation of audio codecs, `x + inv_beta · sin²(alpha · x)` per channel, in one
//! pass over x (infer-cpu-kernels' `snake`, a row piece per work item on candle's pool), where
//! the composition (mul, sin, sqr, mul, add) makes five full-size tensors. Each value takes the
//! same f32 operations in the same order as that composition, so the two agree bit for bit;
//! other dtypes run the composition itself.

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};
use infer_core::UnaryOp;

use crate::elementwise;
use crate::pool::CandlePool;
use infer_cpu_kernels::out_ptr::OutPtr;
use infer_cpu_kernels::snake::snake_values;
use infer_cpu_kernels::Pool;

/// Values per work item on the pool, and the size below which one thread does it all.
const CHUNK: usize = 1 << 14;

/// `x` (b, c, t) with `alpha` and `inv_beta` of c values each.
pub fn snake(x: &Tensor, alpha: &Tensor, inv_beta: &Tensor) -> Result<Tensor> {
    let (b, c, t) = x.dims3()?;
    if alpha.elem_count() != c || inv_beta.elem_count() != c {
        candle_core::bail!(
            "alpha {:?} and inv_beta {:?} must hold one value per channel ({c})",
            alpha.dims(),
            inv_beta.dims()
        );
    }
    if x.dtype() != C::F32 || !x.device().is_cpu() {
        let per_channel = |v: &Tensor| v.to_dtype(x.dtype())?.reshape((1, c, 1));
        let sin = elementwise::unary(&x.broadcast_mul(&per_channel(alpha)?)?, UnaryOp::Sin)?;
        return x.add(&sin.sqr()?.broadcast_mul(&per_channel(inv_beta)?)?);
    }
    let factors = |v: &Tensor| v.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>();
    let (alpha, inv_beta) = (factors(alpha)?, factors(inv_beta)?);
    // Rows read where they lie when each is contiguous (a causal conv's output narrowed to its
    // kept columns is such a view): no copy of the input first.
    let x = if x.stride()[2] == 1 { x.clone() } else { x.contiguous()? };
    let (storage, layout) = x.storage_and_layout();
    let Storage::Cpu(CpuStorage::F32(xs)) = &*storage else {
        candle_core::bail!("snake: expected an f32 CPU tensor");
    };
    let (start, s0, s1) = (layout.start_offset(), layout.stride()[0], layout.stride()[1]);
    let row_at = |row: usize| start + (row / c) * s0 + (row % c) * s1;
    let n = b * c * t;
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let dst = OutPtr(out.as_mut_ptr());
    // Work items: `CHUNK`-value pieces of each (batch, channel) row.
    let per_row = t.div_ceil(CHUNK).max(1);
    let run = |items: std::ops::Range<usize>| {
        for item in items {
            let (row, piece) = (item / per_row, item % per_row);
            let (lo, hi) = (piece * CHUNK, ((piece + 1) * CHUNK).min(t));
            let ch = row % c;
            // SAFETY: the items' ranges are disjoint and inside the buffer's capacity; every
            // value is written before `set_len` below.
            let o = unsafe { std::slice::from_raw_parts_mut(dst.at(row * t + lo), hi - lo) };
            let from = row_at(row);
            snake_values(&xs[from + lo..from + hi], alpha[ch], inv_beta[ch], o);
        }
    };
    let items = b * c * per_row;
    CandlePool.execute_chunked_if(n >= CHUNK, items, run);
    // SAFETY: the items covered every value of the (b, c, t) output.
    unsafe { out.set_len(n) };
    Tensor::from_vec(out, (b, c, t), x.device())
}
