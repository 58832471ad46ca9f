//! `exec`: one op of the op set on MLX arrays. Checks arity, unwraps operands, dispatches, and
//! names the op and operand shapes in errors. Semantics follow the op contract in
//! `infer_core::Op` and the candle backend (the reference implementation of the contract):
//! dtype promotion, f32 math for half types where candle computes in f32, u8 masks, u32 indices.
//!
//! Every op only adds nodes to MLX's lazy graph; nothing is computed until `eval` or a
//! read-back, so a decode step becomes one graph evaluated once.

use infer_core::{BinaryOp, CmpOp, DType, Error, Op, ReduceOp, UnaryOp};
use infer_core::{Result, TensorObj};
use mlx_rs::ops::indexing::{ArrayIndex, ArrayIndexOp, TryIndexOp};
use mlx_rs::{ops, Array, Dtype, Stream};

use crate::attention::{self, AttnParams};
use crate::convert::scalar;
use crate::error::{bail, OpError, OpResult};
use crate::fused;
use crate::tensor::{downcast, mlx_dtype_of, shape_i32, MlxTensor};

/// Runs `op` on `inputs` on `stream`; errors read "<op> [f32[1, 4], ...]: <what went wrong>".
/// `cpu`: whether the stream is on the CPU (attention then computes in f32).
pub fn exec(op: Op<'_>, inputs: &[&TensorObj], stream: &Stream, cpu: bool) -> Result<TensorObj> {
    let name = op.name();
    let ts = inputs.iter().map(|o| downcast(o, name)).collect::<Result<Vec<&MlxTensor>>>()?;
    op.check_arity(ts.len(), || describe(&ts))?;
    mlx_rs::with_stream(stream, || run(op, &ts, stream, cpu))
        .map(MlxTensor::into_obj)
        .map_err(|e| Error::backend(format!("{name} {}: {}", describe(&ts), e.0)))
}

fn describe(ts: &[&MlxTensor]) -> String {
    infer_core::op::describe_operands(ts.iter().map(|t| t.describe()))
}

fn run(op: Op<'_>, ts: &[&MlxTensor], stream: &Stream, cpu: bool) -> OpResult<MlxTensor> {
    let x = ts[0];
    let opt = |i: usize| ts.get(i).copied();
    match op {
        Op::Unary(u) => unary(x, u),
        Op::Binary(b) => binary(x, ts[1], b),
        Op::Compare(c) => compare(x, ts[1], c),
        Op::Affine { mul, add } => affine(x, mul, add),
        Op::Powf { exponent } => {
            float_only(x)?;
            MlxTensor::new(x.a.power(scalar(exponent, x.dtype)?)?)
        }
        Op::Clamp { min, max } => clamp(x, min, max),
        Op::Where => where_cond(x, ts[1], ts[2]),
        Op::ToDType(d) => MlxTensor::new(x.a.as_dtype(mlx_dtype_of(d)?)?),
        Op::Reshape(shape) => {
            let shape = shape.as_slice();
            if shape.iter().product::<usize>() != x.dims().iter().product::<usize>() {
                bail!("cannot reshape {:?} to {shape:?}", x.dims());
            }
            MlxTensor::new(x.a.reshape(&shape_i32(shape)?)?)
        }
        Op::Permute(dims) => permute(x, dims.as_slice()),
        Op::BroadcastTo(shape) => MlxTensor::new(ops::broadcast_to(&x.a, &shape_i32(shape.as_slice())?)?),
        Op::Narrow { dim, start, len } => {
            check_dim(x, dim)?;
            if start + len > x.dims()[dim] {
                bail!("narrow {start}..{} is out of range for dim {dim} of {:?}", start + len, x.dims());
            }
            MlxTensor::new(narrow(&x.a, x.rank(), dim, start, len, stream)?)
        }
        Op::Concat { dim } => concat(ts, dim),
        Op::Contiguous => MlxTensor::new(x.a.contiguous()?),
        Op::IndexSelect { dim } => {
            check_dim(x, dim)?;
            if ts[1].rank() != 1 {
                bail!("index_select ids must be 1-D, got {:?}", ts[1].dims());
            }
            let ids = index(ts[1])?;
            check_ids_in_range(ts[1], x.dims()[dim])?;
            MlxTensor::new(x.a.take_axis(&ids, dim as i32)?)
        }
        Op::Gather { dim } => {
            check_dim(x, dim)?;
            if ts[1].rank() != x.rank() {
                bail!("gather ids {:?} must have the rank of x {:?}", ts[1].dims(), x.dims());
            }
            check_ids_in_range(ts[1], x.dims()[dim])?;
            MlxTensor::new(x.a.take_along_axis(index(ts[1])?, dim as i32)?)
        }
        Op::Reduce { op, dim, keepdim } => reduce(x, op, dim, keepdim),
        Op::Softmax => softmax(x, false),
        Op::LogSoftmax => softmax(x, true),
        Op::Cumsum { dim } => {
            check_dim(x, dim)?;
            let y = if x.is_float() {
                f32_of(x)?.cumsum(dim as i32, false, true)?.as_dtype(x.a.dtype())?
            } else {
                x.a.as_dtype(Dtype::Int64)?.cumsum(dim as i32, false, true)?
            };
            MlxTensor::new(y)
        }
        Op::ArgSort { descending } => argsort(x, descending),
        Op::Matmul => fused::matmul(x, ts[1]),
        Op::Linear => fused::linear(x, ts[1], opt(2)),
        Op::Embedding => {
            let table = ts[1];
            if table.rank() != 2 {
                bail!("embedding table must be (vocab, dim), got {:?}", table.dims());
            }
            check_ids_in_range(x, table.dims()[0])?;
            MlxTensor::new(table.a.take_axis(index(x)?, 0)?)
        }
        Op::RmsNorm { eps } => fused::rms_norm(x, ts[1], eps),
        Op::LayerNorm { eps } => fused::layer_norm(x, ts[1], opt(2), eps),
        Op::Rope(layout) => fused::rope(x, ts[1], ts[2], layout, stream),
        Op::Attention { scale, causal, window, softcap } => attention::attention(
            x,
            ts[1],
            ts[2],
            opt(3),
            AttnParams { scale, causal, window, softcap, f32_compute: cpu },
        ),
        Op::Conv1d { stride, padding, dilation, groups } => {
            fused::conv1d(x, ts[1], opt(2), stride, padding, dilation, groups)
        }
        Op::ConvTranspose1d { stride, padding, output_padding, dilation, groups } => {
            fused::conv_transpose1d(x, ts[1], opt(2), stride, padding, output_padding, dilation, groups)
        }
        Op::SliceAssign { dim, start } => slice_assign(x, ts[1], dim, start, stream),
        Op::Snake => snake(x, ts[1], ts[2]),
    }
}

// ---- helpers ---------------------------------------------------------------------------------

pub fn check_dim(x: &MlxTensor, dim: usize) -> OpResult<()> {
    if dim >= x.rank() {
        bail!("dim {dim} out of range for shape {:?}", x.dims());
    }
    Ok(())
}

pub fn float_only(x: &MlxTensor) -> OpResult<()> {
    if !x.is_float() {
        bail!("needs a float tensor, got {}", x.dtype);
    }
    Ok(())
}

/// `x` as f32 (no node added when it already is).
pub fn f32_of(x: &MlxTensor) -> OpResult<Array> {
    cast(&x.a, Dtype::Float32)
}

/// `a` as `dtype`, without a node when it already is.
pub fn cast(a: &Array, dtype: Dtype) -> OpResult<Array> {
    if a.dtype() == dtype {
        Ok(a.clone())
    } else {
        Ok(a.as_dtype(dtype)?)
    }
}

/// Index operands: u32 ids as they are, u8/i64 ones converted.
fn index(ids: &MlxTensor) -> OpResult<Array> {
    match ids.dtype {
        DType::U32 => Ok(ids.a.clone()),
        DType::U8 | DType::I64 => Ok(ids.a.as_dtype(Dtype::Uint32)?),
        d => bail!("indices must be integers, got {d}"),
    }
}

/// MLX does not bounds-check gather indices (an out-of-range id reads whatever lies there),
/// where candle and libtorch fail: ids that are already materialized (token ids from the host)
/// are checked here. Ids still being computed (arg-sort results in sampling, always in range)
/// are not, since reading them would force an evaluation in the middle of a step's graph.
fn check_ids_in_range(ids: &MlxTensor, bound: usize) -> OpResult<()> {
    if ids.dims().iter().product::<usize>() == 0 || !is_available(&ids.a) {
        return Ok(());
    }
    let max = match ids.dtype {
        DType::U32 => ids.a.try_as_slice::<u32>().ok().and_then(|s| s.iter().max().map(|&m| m as u64)),
        DType::U8 => ids.a.try_as_slice::<u8>().ok().and_then(|s| s.iter().max().map(|&m| m as u64)),
        DType::I64 => ids.a.try_as_slice::<i64>().ok().and_then(|s| s.iter().max().map(|&m| m as u64)),
        _ => None,
    };
    match max {
        Some(m) if m as usize >= bound => bail!("index {m} is out of range for a dimension of size {bound}"),
        _ => Ok(()),
    }
}

/// Whether `a`'s data exists already (a host array, or one evaluated before).
fn is_available(a: &Array) -> bool {
    let mut res = false;
    // SAFETY: `a` is a live array; the call only reads its status.
    let status = unsafe { mlx_sys::_mlx_array_is_available(&mut res, a.as_ptr()) };
    status == 0 && res
}

/// PyTorch-style promotion of two dtypes, as candle does it: floats win over ints, f16 with bf16
/// gives f32, and two different integer types give i64.
pub fn promote(a: DType, b: DType) -> DType {
    if a == b {
        return a;
    }
    match (a.is_float(), b.is_float()) {
        (true, true) => DType::F32,
        (true, false) => a,
        (false, true) => b,
        (false, false) => DType::I64,
    }
}

fn as_dtype(x: &MlxTensor, d: DType) -> OpResult<Array> {
    cast(&x.a, mlx_dtype_of(d)?)
}

/// `a[.., start..start+len, ..]` along `dim` (a view, no copy).
pub fn narrow(a: &Array, rank: usize, dim: usize, start: usize, len: usize, stream: &Stream) -> OpResult<Array> {
    let (s, e) = (start as i32, (start + len) as i32);
    let idx: Vec<ArrayIndexOp<'_>> =
        (0..rank).map(|d| if d == dim { (s..e).index_op() } else { (..).index_op() }).collect();
    Ok(a.try_index_device(&idx[..], stream)?)
}

// ---- element-wise ----------------------------------------------------------------------------

fn unary(x: &MlxTensor, op: UnaryOp) -> OpResult<MlxTensor> {
    let a = &x.a;
    // Composite activations are computed in f32 and rounded once, as candle's per-element
    // kernels do for half types.
    let composite = |f: &dyn Fn(&Array) -> OpResult<Array>| -> OpResult<Array> {
        if x.is_float() && x.dtype != DType::F32 {
            Ok(f(&f32_of(x)?)?.as_dtype(a.dtype())?)
        } else {
            f(a)
        }
    };
    let y = match op {
        UnaryOp::Neg => a.negative()?,
        UnaryOp::Exp => a.exp()?,
        UnaryOp::Log => a.log()?,
        UnaryOp::Sqrt => a.sqrt()?,
        UnaryOp::Recip => a.reciprocal()?,
        UnaryOp::Abs => a.abs()?,
        UnaryOp::Sqr => a.square()?,
        UnaryOp::Sin => a.sin()?,
        UnaryOp::Cos => a.cos()?,
        UnaryOp::Tanh => ops::tanh(a)?,
        UnaryOp::Sigmoid => ops::sigmoid(a)?,
        UnaryOp::Relu => ops::maximum(a, scalar(0.0, x.dtype)?)?,
        UnaryOp::Silu => composite(&|v| Ok(v.multiply(ops::sigmoid(v)?)?))?,
        UnaryOp::GeluTanh => composite(&|v| {
            // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            let inner = v.add(v.power(Array::from_f32(3.0))?.multiply(Array::from_f32(0.044715))?)?;
            let t = ops::tanh(inner.multiply(Array::from_f32((2.0f64 / std::f64::consts::PI).sqrt() as f32))?)?;
            Ok(v.multiply(Array::from_f32(0.5))?.multiply(t.add(Array::from_f32(1.0))?)?)
        })?,
        UnaryOp::GeluErf => composite(&|v| {
            let e = ops::erf(v.multiply(Array::from_f32(std::f32::consts::FRAC_1_SQRT_2))?)?;
            Ok(v.multiply(Array::from_f32(0.5))?.multiply(e.add(Array::from_f32(1.0))?)?)
        })?,
    };
    MlxTensor::new(y)
}

/// `x + inv_beta · sin²(alpha · x)` per channel of x (b, c, t), step by step in x's dtype as
/// the composition of those ops (the op's contract).
fn snake(x: &MlxTensor, alpha: &MlxTensor, inv_beta: &MlxTensor) -> OpResult<MlxTensor> {
    float_only(x)?;
    let c = match *x.dims() {
        [_, c, _] => c,
        _ => bail!("snake needs x of shape (b, c, t), got {:?}", x.dims()),
    };
    let per_channel = |v: &MlxTensor, name: &str| -> OpResult<Array> {
        if v.dims().iter().product::<usize>() != c {
            bail!("{name} {:?} must hold one value per channel ({c})", v.dims());
        }
        Ok(cast(&v.a, x.a.dtype())?.reshape(&[1, c as i32, 1])?)
    };
    let (alpha, inv_beta) = (per_channel(alpha, "alpha")?, per_channel(inv_beta, "inv_beta")?);
    let sin = x.a.multiply(&alpha)?.sin()?;
    MlxTensor::new(x.a.add(&sin.square()?.multiply(&inv_beta)?)?)
}

fn binary(a: &MlxTensor, b: &MlxTensor, op: BinaryOp) -> OpResult<MlxTensor> {
    let mut d = promote(a.dtype, b.dtype);
    // True division, as PyTorch's `/`: integers divide as floats.
    if op == BinaryOp::Div && !d.is_float() {
        d = DType::F32;
    }
    let (x, y) = (as_dtype(a, d)?, as_dtype(b, d)?);
    let r = match op {
        BinaryOp::Add => x.add(&y)?,
        BinaryOp::Sub => x.subtract(&y)?,
        BinaryOp::Mul => x.multiply(&y)?,
        BinaryOp::Div => x.divide(&y)?,
        BinaryOp::Maximum => ops::maximum(&x, &y)?,
        BinaryOp::Minimum => ops::minimum(&x, &y)?,
    };
    MlxTensor::new(cast(&r, mlx_dtype_of(d)?)?)
}

fn compare(a: &MlxTensor, b: &MlxTensor, op: CmpOp) -> OpResult<MlxTensor> {
    let d = promote(a.dtype, b.dtype);
    let (x, y) = (as_dtype(a, d)?, as_dtype(b, d)?);
    let r = match op {
        CmpOp::Eq => x.eq(&y)?,
        CmpOp::Ne => x.ne(&y)?,
        CmpOp::Lt => x.lt(&y)?,
        CmpOp::Le => x.le(&y)?,
        CmpOp::Gt => x.gt(&y)?,
        CmpOp::Ge => x.ge(&y)?,
    };
    MlxTensor::new(r) // bool -> u8
}

/// `cond ? on_true : on_false`, broadcasting all three; any nonzero condition is true.
fn where_cond(cond: &MlxTensor, t: &MlxTensor, f: &MlxTensor) -> OpResult<MlxTensor> {
    let c = cond.a.ne(scalar(0.0, cond.dtype)?)?;
    let d = promote(t.dtype, f.dtype);
    MlxTensor::new(ops::select(&c, as_dtype(t, d)?, as_dtype(f, d)?)?)
}

/// `x * mul + add` in x's dtype (integers compute in f32 and truncate back).
fn affine(x: &MlxTensor, mul: f64, add: f64) -> OpResult<MlxTensor> {
    if !x.is_float() {
        let y = f32_of(x)?.multiply(Array::from_f32(mul as f32))?.add(Array::from_f32(add as f32))?;
        return MlxTensor::new(y.as_dtype(x.a.dtype())?);
    }
    let mut y = x.a.clone();
    if mul != 1.0 {
        y = y.multiply(scalar(mul, x.dtype)?)?;
    }
    if add != 0.0 {
        y = y.add(scalar(add, x.dtype)?)?;
    }
    MlxTensor::new(y)
}

/// Clamps to [min, max]; an infinite or NaN bound is no bound. Keeps x's dtype.
fn clamp(x: &MlxTensor, min: f64, max: f64) -> OpResult<MlxTensor> {
    let int = !x.is_float();
    let mut y = x.a.clone();
    if min.is_finite() {
        let m = if int { min.ceil() } else { min };
        y = ops::maximum(&y, scalar(m.max(int_floor(x.dtype)), x.dtype)?)?;
    }
    if max.is_finite() {
        let m = if int { max.floor() } else { max };
        y = ops::minimum(&y, scalar(m.max(int_floor(x.dtype)), x.dtype)?)?;
    }
    MlxTensor::new(y)
}

/// The smallest value an integer dtype holds (a negative bound on an unsigned tensor is 0).
fn int_floor(d: DType) -> f64 {
    match d {
        DType::U8 | DType::U32 => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

// ---- shape ops -------------------------------------------------------------------------------

fn permute(x: &MlxTensor, dims: &[usize]) -> OpResult<MlxTensor> {
    let mut seen = vec![false; x.rank()];
    if dims.len() != x.rank() || dims.iter().any(|&d| d >= x.rank() || std::mem::replace(&mut seen[d], true)) {
        bail!("{dims:?} is not a permutation of the {} dims of {:?}", x.rank(), x.dims());
    }
    let axes: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    MlxTensor::new(x.a.transpose_axes(&axes)?)
}

fn concat(ts: &[&MlxTensor], dim: usize) -> OpResult<MlxTensor> {
    let first = ts[0];
    check_dim(first, dim)?;
    if let Some(o) = ts.iter().find(|t| t.dtype != first.dtype) {
        bail!("concat of {} and {} tensors", first.dtype, o.dtype);
    }
    if let Some(o) = ts.iter().find(|t| t.rank() != first.rank()) {
        bail!("concat of rank {} and rank {} tensors", first.rank(), o.rank());
    }
    let parts: Vec<&Array> = ts.iter().map(|t| &t.a).collect();
    MlxTensor::new(ops::concatenate(&parts, dim as i32)?)
}

/// `dst` with `src` written at `start` along `dim`. MLX arrays are immutable, so this is MLX's
/// slice update, which writes into dst's buffer in place when dst has no other user at
/// evaluation time (the op contract consumes dst: a KV cache append then costs O(new tokens)),
/// and copies it otherwise.
fn slice_assign(dst: &MlxTensor, src: &MlxTensor, dim: usize, start: usize, stream: &Stream) -> OpResult<MlxTensor> {
    check_dim(dst, dim)?;
    if src.rank() != dst.rank() {
        bail!("src {:?} and dst {:?} differ in rank", src.dims(), dst.dims());
    }
    for (i, (&a, &b)) in dst.dims().iter().zip(src.dims()).enumerate() {
        if (i == dim && start + b > a) || (i != dim && a != b) {
            bail!("src {:?} does not fit into dst {:?} at {start} along dim {dim}", src.dims(), dst.dims());
        }
    }
    let len = src.dims()[dim];
    if len == 0 {
        return MlxTensor::new(dst.a.clone());
    }
    let upd = cast(&src.a, dst.a.dtype())?;
    let (s, e) = (start as i32, (start + len) as i32);
    let idx: Vec<ArrayIndexOp<'_>> =
        (0..dst.rank()).map(|d| if d == dim { (s..e).index_op() } else { (..).index_op() }).collect();
    let mut out = dst.a.clone();
    mlx_rs::ops::indexing::TryIndexMutOp::try_index_mut_device(&mut out, &idx[..], &upd, stream)?;
    MlxTensor::new(out)
}

// ---- reductions ------------------------------------------------------------------------------

/// As in PyTorch: sums of integers are i64, f16/bf16 sums and means accumulate in f32 (the
/// result keeps the input dtype), means of integers are an error, arg-max/min give the first
/// index of the extreme value as u32.
fn reduce(x: &MlxTensor, op: ReduceOp, dim: usize, keepdim: bool) -> OpResult<MlxTensor> {
    check_dim(x, dim)?;
    let d = dim as i32;
    match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            if op == ReduceOp::Mean && !x.is_float() {
                bail!("mean of an integer tensor ({}); convert to a float dtype first", x.dtype);
            }
            if !x.is_float() {
                return MlxTensor::new(x.a.as_dtype(Dtype::Int64)?.sum_axis(d, keepdim)?);
            }
            let xf = f32_of(x)?;
            let y = if op == ReduceOp::Sum { xf.sum_axis(d, keepdim)? } else { xf.mean_axis(d, keepdim)? };
            MlxTensor::new(y.as_dtype(x.a.dtype())?)
        }
        ReduceOp::Max | ReduceOp::Min => {
            if x.dims()[dim] == 0 {
                bail!("{op:?} over an empty dim {dim} of {:?}", x.dims());
            }
            let y = if op == ReduceOp::Max { x.a.max_axis(d, keepdim)? } else { x.a.min_axis(d, keepdim)? };
            MlxTensor::new(y)
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            if x.dims()[dim] == 0 {
                bail!("{op:?} over an empty dim {dim} of {:?}", x.dims());
            }
            let y = if op == ReduceOp::ArgMax {
                ops::indexing::argmax_axis(&x.a, d, keepdim)?
            } else {
                ops::indexing::argmin_axis(&x.a, d, keepdim)?
            };
            MlxTensor::new(y.as_dtype(Dtype::Uint32)?)
        }
    }
}

/// (Log-)softmax over the last dim, computed in f32; the result has the input dtype.
fn softmax(x: &MlxTensor, log: bool) -> OpResult<MlxTensor> {
    float_only(x)?;
    if x.rank() == 0 {
        bail!("softmax of a scalar");
    }
    let xf = f32_of(x)?;
    let y = if log { xf.subtract(xf.logsumexp_axis(-1, true)?)? } else { ops::softmax_axis(&xf, -1, true)? };
    MlxTensor::new(y.as_dtype(x.a.dtype())?)
}

/// Stable arg-sort along the last dim (ties keep their order in both directions, as candle's).
/// Descending sorts the negated values; unsigned integers are widened first.
fn argsort(x: &MlxTensor, descending: bool) -> OpResult<MlxTensor> {
    if x.rank() == 0 {
        bail!("argsort of a scalar");
    }
    let keys = match (descending, x.is_float()) {
        (false, _) => x.a.clone(),
        (true, true) => x.a.negative()?,
        (true, false) => x.a.as_dtype(Dtype::Int64)?.negative()?,
    };
    MlxTensor::new(ops::argsort_axis(&keys, -1)?.as_dtype(Dtype::Uint32)?)
}

impl From<mlx_rs::error::AsSliceError> for OpError {
    fn from(e: mlx_rs::error::AsSliceError) -> Self {
        OpError(e.to_string())
    }
}
