//! Element-wise ops: unary functions, broadcasting binary ops and comparisons, `where`,
//! affine / powf / clamp, dtype casts. Mixed dtypes are promoted like PyTorch does.
//!
//! The GELU (tanh), SiLU and sin activations, which run on every MLP activation, are
//! infer-cpu-kernels' `activation` slice kernels rather than candle's (whose f32 versions call
//! libm's `tanhf` / `expf` one value at a time); half tensors are widened for them in blocks.

use candle_core::{CpuStorage, DType as C, Result, Shape, Storage, Tensor};
use infer_core::{BinaryOp, CmpOp, UnaryOp};

use crate::half_slices::HalfElem;
use crate::pool::CandlePool;

use infer_cpu_kernels::activation::{act_half, act_slice, Act};
use infer_cpu_kernels::half_slices::combine_half;
use infer_cpu_kernels::out_ptr::OutPtr;
use infer_cpu_kernels::Pool;

pub fn is_float(d: C) -> bool {
    matches!(d, C::F32 | C::F16 | C::BF16 | C::F64)
}

/// PyTorch-style promotion of two dtypes: floats win over ints, f16 with bf16 gives f32, and
/// two different integer types give i64.
pub fn promote(a: C, b: C) -> C {
    if a == b {
        return a;
    }
    match (is_float(a), is_float(b)) {
        (true, true) => C::F32,
        (true, false) => a,
        (false, true) => b,
        (false, false) => C::I64,
    }
}

fn cast(t: &Tensor, d: C) -> Result<Tensor> {
    crate::half_slices::to_dtype(t, d)
}

/// The broadcast shape of several shapes (NumPy / PyTorch rules).
pub fn broadcast_shape(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                candle_core::bail!("shapes {shapes:?} do not broadcast");
            }
        }
    }
    Ok(out)
}

fn broadcast_to(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if t.dims() == shape {
        Ok(t.clone())
    } else {
        t.broadcast_as(shape)
    }
}

pub fn unary(x: &Tensor, op: UnaryOp) -> Result<Tensor> {
    match op {
        UnaryOp::Neg => x.neg(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.log(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Recip => x.recip(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sqr => x.sqr(),
        UnaryOp::Sin => match map_act(x, Act::Sin)? {
            Some(y) => Ok(y),
            None => x.sin(),
        },
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => candle_nn::ops::sigmoid(x),
        UnaryOp::Relu => x.relu(),
        UnaryOp::Silu => match map_act(x, Act::Silu)? {
            Some(y) => Ok(y),
            None => x.silu(),
        },
        UnaryOp::GeluTanh => match map_act(x, Act::GeluTanh)? {
            Some(y) => Ok(y),
            None => x.gelu(),
        },
        UnaryOp::GeluErf => x.gelu_erf(),
    }
}

pub fn binary(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor> {
    let mut d = promote(a.dtype(), b.dtype());
    // True division, as PyTorch's `/`: integers divide as floats.
    if op == BinaryOp::Div && !is_float(d) {
        d = C::F32;
    }
    let (a, b) = (cast(a, d)?, cast(b, d)?);
    if let Some(y) = half_binary(&a, &b, op)? {
        return Ok(y);
    }
    let same = a.dims() == b.dims();
    match (op, same) {
        (BinaryOp::Add, true) => a.add(&b),
        (BinaryOp::Sub, true) => a.sub(&b),
        (BinaryOp::Mul, true) => a.mul(&b),
        (BinaryOp::Div, true) => a.div(&b),
        (BinaryOp::Maximum, true) => a.maximum(&b),
        (BinaryOp::Minimum, true) => a.minimum(&b),
        (BinaryOp::Add, false) => a.broadcast_add(&b),
        (BinaryOp::Sub, false) => a.broadcast_sub(&b),
        (BinaryOp::Mul, false) => a.broadcast_mul(&b),
        (BinaryOp::Div, false) => a.broadcast_div(&b),
        (BinaryOp::Maximum, false) => a.broadcast_maximum(&b),
        (BinaryOp::Minimum, false) => a.broadcast_minimum(&b),
    }
}

pub fn compare(a: &Tensor, b: &Tensor, op: CmpOp) -> Result<Tensor> {
    let d = promote(a.dtype(), b.dtype());
    let (a, b) = (cast(a, d)?, cast(b, d)?);
    match op {
        CmpOp::Eq => a.broadcast_eq(&b),
        CmpOp::Ne => a.broadcast_ne(&b),
        CmpOp::Lt => a.broadcast_lt(&b),
        CmpOp::Le => a.broadcast_le(&b),
        CmpOp::Gt => a.broadcast_gt(&b),
        CmpOp::Ge => a.broadcast_ge(&b),
    }
}

/// `cond ? on_true : on_false`, broadcasting all three; a float condition means `cond != 0`.
pub fn where_cond(cond: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
    let cond = if is_float(cond.dtype()) { cond.ne(0f64)? } else { cond.clone() };
    let d = promote(on_true.dtype(), on_false.dtype());
    let (t, f) = (cast(on_true, d)?, cast(on_false, d)?);
    let shape = broadcast_shape(&[cond.dims(), t.dims(), f.dims()])?;
    broadcast_to(&cond, &shape)?.where_cond(&broadcast_to(&t, &shape)?, &broadcast_to(&f, &shape)?)
}

pub fn affine(x: &Tensor, mul: f64, add: f64) -> Result<Tensor> {
    x.affine(mul, add)
}

pub fn powf(x: &Tensor, e: f64) -> Result<Tensor> {
    if !is_float(x.dtype()) {
        candle_core::bail!("powf needs a float tensor, got {:?}", x.dtype());
    }
    x.powf(e)
}

/// Clamps to [min, max]; an infinite or NaN bound is no bound.
pub fn clamp(x: &Tensor, min: f64, max: f64) -> Result<Tensor> {
    let mut y = x.clone();
    if min.is_finite() {
        y = y.maximum(min)?;
    }
    if max.is_finite() {
        y = y.minimum(max)?;
    }
    Ok(y)
}

pub fn to_dtype(x: &Tensor, d: C) -> Result<Tensor> {
    cast(x, d)
}

/// `x` broadcast to `shape` (a view; PyTorch `expand`).
pub fn broadcast(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    x.broadcast_as(Shape::from_dims(shape))
}

/// Below this many values an activation runs on the calling thread.
const ACT_PARALLEL_MIN: usize = 1 << 15;
/// Values per work item when split across the pool.
const ACT_CHUNK: usize = 1 << 12;

/// `act` of an f32, bf16 or f16 CPU tensor into a new contiguous tensor of the same dtype;
/// `None` for other dtypes. Half values are widened, computed in f32 and rounded once, as
/// PyTorch's CPU kernels do (candle's own half activations round after every step and call
/// libm one value at a time).
fn map_act(x: &Tensor, act: Act) -> Result<Option<Tensor>> {
    if !matches!(x.dtype(), C::F32 | C::BF16 | C::F16) || !x.device().is_cpu() {
        return Ok(None);
    }
    let x = x.contiguous()?;
    let (storage, layout) = x.storage_and_layout();
    let Some((a, z)) = layout.contiguous_offsets() else {
        return Ok(None);
    };
    let (shape, device) = (x.shape(), x.device());
    let y = match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => Tensor::from_vec(map_par(act, &v[a..z], act_slice), shape, device)?,
        Storage::Cpu(CpuStorage::BF16(v)) => Tensor::from_vec(map_par(act, &v[a..z], act_half), shape, device)?,
        Storage::Cpu(CpuStorage::F16(v)) => Tensor::from_vec(map_par(act, &v[a..z], act_half), shape, device)?,
        _ => return Ok(None),
    };
    Ok(Some(y))
}

/// `act_chunk` over `src` into a new buffer, split across candle's pool when large.
fn map_par<T: Copy + Default + Send + Sync>(act: Act, src: &[T], act_chunk: fn(Act, &[T], &mut [T])) -> Vec<T> {
    fill_par(src.len(), |r, out| act_chunk(act, &src[r], out))
}

/// A new buffer of `len` values, `fill(range, out)` writing the values of `range` into `out`:
/// one call when small, else chunks of [`ACT_CHUNK`] split across candle's pool.
fn fill_par<T: Copy + Default + Send + Sync>(
    len: usize,
    fill: impl Fn(std::ops::Range<usize>, &mut [T]) + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); len];
    if len < ACT_PARALLEL_MIN {
        fill(0..len, &mut out);
    } else {
        let dst = OutPtr(out.as_mut_ptr());
        CandlePool.execute_chunked(len.div_ceil(ACT_CHUNK), |r| {
            let dst = &dst;
            let (lo, hi) = (r.start * ACT_CHUNK, (r.end * ACT_CHUNK).min(len));
            // SAFETY: each chunk index goes to one worker; the ranges are disjoint and in bounds.
            let d = unsafe { std::slice::from_raw_parts_mut(dst.at(lo), hi - lo) };
            fill(lo..hi, d);
        });
    }
    out
}

/// `a + b`, `a - b` or `a * b` of two contiguous bf16 or f16 CPU tensors of one shape: each pair
/// widened, combined in f32 and rounded once (PyTorch's CPU kernels do the same; candle's
/// AVX-512 BF16 path also flushes subnormal results to zero), in blocks on the stack, split
/// across the pool when large. candle's own half add converted 8 values per call through
/// functions it could not inline, at a tenth of the memory's speed (a bf16 prefill spent
/// 14% of its time in the residual adds). `None` for other dtypes, ops or layouts.
fn half_binary(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Option<Tensor>> {
    if !matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul) {
        return Ok(None);
    }
    // One monomorphized loop per op: through a function pointer the per-value call was not
    // inlined and the loop not vectorized (3% of a 1-thread bf16 prefill).
    fn zip_op<E: HalfElem>(a: &[E], b: &[E], op: BinaryOp) -> Vec<E> {
        match op {
            BinaryOp::Sub => zip_half(a, b, |x, y| x - y),
            BinaryOp::Mul => zip_half(a, b, |x, y| x * y),
            _ => zip_half(a, b, |x, y| x + y),
        }
    }
    if !a.device().is_cpu() || a.dims() != b.dims() {
        return Ok(None);
    }
    let ((sa, la), (sb, lb)) = (a.storage_and_layout(), b.storage_and_layout());
    let (Some((a0, a1)), Some((b0, b1))) = (la.contiguous_offsets(), lb.contiguous_offsets()) else {
        return Ok(None);
    };
    let y = match (&*sa, &*sb) {
        (Storage::Cpu(CpuStorage::BF16(x)), Storage::Cpu(CpuStorage::BF16(y))) => {
            Tensor::from_vec(zip_op(&x[a0..a1], &y[b0..b1], op), a.shape(), a.device())?
        }
        (Storage::Cpu(CpuStorage::F16(x)), Storage::Cpu(CpuStorage::F16(y))) => {
            Tensor::from_vec(zip_op(&x[a0..a1], &y[b0..b1], op), a.shape(), a.device())?
        }
        _ => return Ok(None),
    };
    Ok(Some(y))
}

/// `combine` of `a` and `b` (equal lengths) into a new buffer, split across the pool when large.
fn zip_half<E: HalfElem>(a: &[E], b: &[E], combine: impl Fn(f32, f32) -> f32 + Copy + Sync) -> Vec<E> {
    fill_par(a.len(), |r, out| combine_half(&a[r.clone()], &b[r], out, combine))
}

/// `y + b` for a contiguous bf16 / f16 CPU `y` (…, n) and a contiguous `b` of n values of its
/// dtype (a linear layer's bias): widened, added in f32 and rounded once per value, as candle's
/// broadcast add computes it, in parallel blocks. candle's half broadcast add converted one
/// value at a time: Voxtral Realtime's encoder spent 30% of its time adding biases. `None` for
/// anything else.
pub fn add_row_bias(y: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    let n = y.dims().last().copied().unwrap_or(0);
    if n == 0 || b.elem_count() != n || b.dims().iter().rev().skip(1).any(|&d| d != 1) || !y.device().is_cpu() {
        return Ok(None);
    }
    let ((sy, ly), (sb, lb)) = (y.storage_and_layout(), b.storage_and_layout());
    let (Some((y0, y1)), Some((b0, b1))) = (ly.contiguous_offsets(), lb.contiguous_offsets()) else {
        return Ok(None);
    };
    fn rows<E: HalfElem>(y: &[E], b: &[E]) -> Vec<E> {
        let n = b.len();
        fill_par(y.len(), |r, out| {
            // The range may start and end mid-row: walk it a row piece at a time.
            let mut i = r.start;
            while i < r.end {
                let col = i % n;
                let len = (n - col).min(r.end - i);
                let o = &mut out[i - r.start..][..len];
                combine_half(&y[i..i + len], &b[col..col + len], o, |p, q| p + q);
                i += len;
            }
        })
    }
    let out = match (&*sy, &*sb) {
        (Storage::Cpu(CpuStorage::BF16(v)), Storage::Cpu(CpuStorage::BF16(c))) => {
            Tensor::from_vec(rows(&v[y0..y1], &c[b0..b1]), y.shape(), y.device())?
        }
        (Storage::Cpu(CpuStorage::F16(v)), Storage::Cpu(CpuStorage::F16(c))) => {
            Tensor::from_vec(rows(&v[y0..y1], &c[b0..b1]), y.shape(), y.device())?
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bias add gives candle's broadcast add's bits, over several pieces with rows that
    /// straddle them.
    #[test]
    fn row_bias_matches_candles_broadcast_add() {
        let dev = &candle_core::Device::Cpu;
        for (m, n) in [(3, 5), (40, 1283), (128, 1280)] {
            let y: Vec<f32> = (0..m * n).map(|i| ((i * 7919 % 4099) as f32 - 2049.0) * 0.0131).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.37).collect();
            for dtype in [C::BF16, C::F16] {
                let y = Tensor::from_vec(y.clone(), (m, n), dev).unwrap().to_dtype(dtype).unwrap();
                let b = Tensor::from_vec(b.clone(), n, dev).unwrap().to_dtype(dtype).unwrap();
                let got = add_row_bias(&y, &b).unwrap().expect("taken");
                let want = y.broadcast_add(&b).unwrap();
                assert!(crate::half_slices::same_bits(&got, &want), "{dtype:?} {m}x{n}");
            }
        }
    }

    use infer_cpu_kernels::activation::reference::{gelu as gelu_ref, silu as silu_ref, sin as sin_ref};

    fn inputs() -> Vec<f32> {
        let mut x: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 3e-4).collect();
        x.extend((-2000..=2000).map(|i| i as f32 * 0.05));
        x.extend([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 3e38, -3e38]);
        x
    }

    /// bf16 and f16 activations are the f64 value rounded once: within one unit in the last
    /// place of the half type (half an ulp from the rounding, a few f32 ulps from the f32
    /// evaluation), through the tensor path and split across the pool.
    #[test]
    fn half_activations_round_once() {
        use half::{bf16, f16};
        let x: Vec<f32> = (-60_000..60_000).map(|i| i as f32 * 2.5e-4).collect();
        let dev = candle_core::Device::Cpu;
        for (op, act, reference) in [
            (UnaryOp::Silu, Act::Silu, silu_ref as fn(f32) -> f64),
            (UnaryOp::GeluTanh, Act::GeluTanh, gelu_ref as fn(f32) -> f64),
            (UnaryOp::Sin, Act::Sin, sin_ref as fn(f32) -> f64),
        ] {
            let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
            let yb = unary(&Tensor::new(xb.as_slice(), &dev).unwrap(), op).unwrap();
            assert_eq!(yb.dtype(), C::BF16);
            for (&xi, &yi) in xb.iter().zip(&yb.to_vec1::<bf16>().unwrap()) {
                let want = reference(xi.to_f32());
                let w = bf16::from_f64(want.abs());
                let ulp = (bf16::from_bits(w.to_bits() + 1).to_f64() - w.to_f64()).max(1e-30);
                assert!((yi.to_f64() - want).abs() <= ulp, "bf16 {act:?}({xi}) = {yi}, want {want}");
            }
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let yh = unary(&Tensor::new(xh.as_slice(), &dev).unwrap(), op).unwrap();
            assert_eq!(yh.dtype(), C::F16);
            for (&xi, &yi) in xh.iter().zip(&yh.to_vec1::<f16>().unwrap()) {
                let want = reference(xi.to_f32());
                let w = f16::from_f64(want.abs());
                let ulp = (f16::from_bits(w.to_bits() + 1).to_f64() - w.to_f64()).max(1e-7);
                assert!((yi.to_f64() - want).abs() <= ulp, "f16 {act:?}({xi}) = {yi}, want {want}");
            }
        }
    }

    #[test]
    fn tensor_path_matches_slices() {
        let mut x = inputs();
        x.truncate(x.len() / 3 * 3);
        let t = Tensor::from_vec(x.clone(), (x.len() / 3, 3), &candle_core::Device::Cpu).unwrap();
        // Strided (transposed) and large enough to be split across the pool.
        let y = unary(&t.t().unwrap(), UnaryOp::GeluTanh).unwrap().t().unwrap();
        let mut want = vec![0f32; x.len()];
        act_slice(Act::GeluTanh, &x, &mut want);
        assert_eq!(y.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
    }

    /// Half add / sub / mul round once from the f32 result, bit for bit, over the pool's split
    /// and a short last block; a strided operand takes candle's path and agrees on these values.
    #[test]
    fn half_binary_rounds_once() {
        use half::{bf16, f16};
        let n = ACT_PARALLEL_MIN + infer_cpu_kernels::half_slices::HALF_BLOCK / 2 + 3;
        let dev = &candle_core::Device::Cpu;
        let a: Vec<f32> = (0..n).map(|i| ((i * 7919 % 20011) as f32 - 10005.0) * 0.0137).collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 104729 % 30011) as f32 - 15005.0) * 0.00071).collect();
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul] {
            let f = |x: f32, y: f32| match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                _ => x * y,
            };
            let (ab, bb): (Vec<bf16>, Vec<bf16>) =
                (a.iter().map(|&v| bf16::from_f32(v)).collect(), b.iter().map(|&v| bf16::from_f32(v)).collect());
            let want: Vec<u16> =
                ab.iter().zip(&bb).map(|(x, y)| bf16::from_f32(f(x.to_f32(), y.to_f32())).to_bits()).collect();
            let (ta, tb) = (Tensor::from_vec(ab, (n,), dev).unwrap(), Tensor::from_vec(bb, (n,), dev).unwrap());
            let got = binary(&ta, &tb, op).unwrap().to_vec1::<bf16>().unwrap();
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "{op:?} bf16");
            // candle's path (a strided view of the same values) gives the same bits here.
            let strided = |t: &Tensor| Tensor::stack(&[t, t], 1).unwrap().narrow(1, 0, 1).unwrap().squeeze(1).unwrap();
            let via_candle = binary(&strided(&ta), &tb, op).unwrap().to_vec1::<bf16>().unwrap();
            assert_eq!(via_candle, got, "{op:?} bf16 against candle");

            let (ah, bh): (Vec<f16>, Vec<f16>) =
                (a.iter().map(|&v| f16::from_f32(v)).collect(), b.iter().map(|&v| f16::from_f32(v)).collect());
            let want: Vec<u16> =
                ah.iter().zip(&bh).map(|(x, y)| f16::from_f32(f(x.to_f32(), y.to_f32())).to_bits()).collect();
            let got = binary(&Tensor::from_vec(ah, (n,), dev).unwrap(), &Tensor::from_vec(bh, (n,), dev).unwrap(), op)
                .unwrap()
                .to_vec1::<f16>()
                .unwrap();
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "{op:?} f16");
        }
    }
}
