//! `exec`: one op of the op set on libtorch tensors. Checks arity, unwraps operands, dispatches,
//! and names the op and operand shapes in errors. Semantics follow the op contract in
//! `infer_core::Op` and the candle backend (the reference implementation of the contract):
//! dtype promotion, f32 accumulation for half types, u8 masks, u32 indices.

use infer_core::{BinaryOp, CmpOp, DType, Error, Op, ReduceOp, RopeLayout, UnaryOp};
use infer_core::{Result, TensorObj};
use tch::{Kind, Tensor};

use crate::attention::{self, AttnParams};
use crate::error::{bail, OpResult};
use crate::tensor::{downcast, storage_kind, TchTensor};

/// Runs `op` on `inputs`; errors read "<op> [f32[1, 4], ...]: <what went wrong>".
pub fn exec(op: Op<'_>, inputs: &[&TensorObj]) -> Result<TensorObj> {
    let name = op.name();
    let ts = inputs.iter().map(|o| downcast(o, name)).collect::<Result<Vec<&TchTensor>>>()?;
    op.check_arity(ts.len(), || describe(&ts))?;
    run(op, &ts).map(TchTensor::into_obj).map_err(|e| Error::backend(format!("{name} {}: {}", describe(&ts), e.0)))
}

fn describe(ts: &[&TchTensor]) -> String {
    infer_core::op::describe_operands(ts.iter().map(|t| t.describe()))
}

fn run(op: Op<'_>, ts: &[&TchTensor]) -> OpResult<TchTensor> {
    let x = ts[0];
    let opt = |i: usize| ts.get(i).copied();
    match op {
        Op::Unary(u) => unary(x, u),
        Op::Binary(b) => binary(x, ts[1], b),
        Op::Compare(c) => compare(x, ts[1], c),
        Op::Affine { mul, add } => affine(x, mul, add),
        Op::Powf { exponent } => {
            float_only(x)?;
            TchTensor::new(x.t.f_pow_tensor_scalar(exponent)?, false)
        }
        Op::Clamp { min, max } => clamp(x, min, max),
        Op::Where => where_cond(x, ts[1], ts[2]),
        Op::ToDType(d) => TchTensor::new(cast(&x.t, kind_of(d)?)?, d == DType::U32),
        Op::Reshape(shape) => reshape(x, shape.as_slice()),
        Op::Permute(dims) => permute(x, dims.as_slice()),
        Op::BroadcastTo(shape) => TchTensor::like(x.t.f_expand(size(shape.as_slice()), false)?, x),
        Op::Narrow { dim, start, len } => {
            check_dim(x, dim)?;
            if start + len > x.dims()[dim] {
                bail!("narrow {start}..{} is out of range for dim {dim} of {:?}", start + len, x.dims());
            }
            TchTensor::like(x.t.f_narrow(dim as i64, start as i64, len as i64)?, x)
        }
        Op::Concat { dim } => concat(ts, dim),
        Op::Contiguous => TchTensor::like(x.t.f_contiguous()?, x),
        Op::IndexSelect { dim } => {
            check_dim(x, dim)?;
            if ts[1].rank() != 1 {
                bail!("index_select ids must be 1-D, got {:?}", ts[1].dims());
            }
            TchTensor::like(x.t.f_index_select(dim as i64, &index(ts[1], x.dims()[dim])?)?, x)
        }
        Op::Gather { dim } => {
            check_dim(x, dim)?;
            if ts[1].rank() != x.rank() {
                bail!("gather ids {:?} must have the rank of x {:?}", ts[1].dims(), x.dims());
            }
            TchTensor::like(x.t.f_gather(dim as i64, &index(ts[1], x.dims()[dim])?, false)?, x)
        }
        Op::Reduce { op, dim, keepdim } => reduce(x, op, dim, keepdim),
        Op::Softmax => softmax(x, false),
        Op::LogSoftmax => softmax(x, true),
        Op::Cumsum { dim } => {
            check_dim(x, dim)?;
            let y = if x.is_float() {
                cast(&x.t.f_cumsum(dim as i64, Kind::Float)?, x.t.f_kind()?)?
            } else {
                x.t.f_cumsum(dim as i64, Kind::Int64)?
            };
            TchTensor::new(y, false)
        }
        Op::ArgSort { descending } => {
            if x.rank() == 0 {
                bail!("argsort of a scalar");
            }
            // Stable, as candle's: ties keep their order in both directions.
            TchTensor::new(x.t.f_argsort_stable(true, -1, descending)?, true)
        }
        Op::Matmul => matmul(x, ts[1]),
        Op::Linear => linear(x, ts[1], opt(2)),
        Op::Embedding => {
            let table = ts[1];
            if table.rank() != 2 {
                bail!("embedding table must be (vocab, dim), got {:?}", table.dims());
            }
            TchTensor::like(Tensor::f_embedding(&table.t, &index(x, table.dims()[0])?, -1, false, false)?, table)
        }
        Op::RmsNorm { eps } => rms_norm(x, ts[1], eps),
        Op::LayerNorm { eps } => layer_norm(x, ts[1], opt(2), eps),
        Op::Rope(layout) => rope(x, ts[1], ts[2], layout),
        Op::Attention { scale, causal, window, softcap } => {
            attention::attention(x, ts[1], ts[2], opt(3), AttnParams { scale, causal, window, softcap })
        }
        Op::Conv1d { stride, padding, dilation, groups } => {
            conv_check(x, ts[1], stride, dilation, groups)?;
            let y = convolution(x, ts[1], opt(2), Conv { stride, padding, dilation, groups, transposed: None })?;
            TchTensor::new(y, false)
        }
        Op::ConvTranspose1d { stride, padding, output_padding, dilation, groups } => {
            conv_check(x, ts[1], stride, dilation, groups)?;
            let transposed = Some(output_padding);
            let y = convolution(x, ts[1], opt(2), Conv { stride, padding, dilation, groups, transposed })?;
            TchTensor::new(y, false)
        }
        Op::SliceAssign { dim, start } => slice_assign(x, ts[1], dim, start),
        Op::Snake => snake(x, ts[1], ts[2]),
    }
}

// ---- helpers ---------------------------------------------------------------------------------

fn size(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

fn check_dim(x: &TchTensor, dim: usize) -> OpResult<()> {
    if dim >= x.rank() {
        bail!("dim {dim} out of range for shape {:?}", x.dims());
    }
    Ok(())
}

fn float_only(x: &TchTensor) -> OpResult<()> {
    if !x.is_float() {
        bail!("needs a float tensor, got {}", x.dtype);
    }
    Ok(())
}

pub fn kind_of(d: DType) -> OpResult<Kind> {
    match storage_kind(d) {
        Some(k) => Ok(k),
        None => bail!("cannot convert to the quantized dtype {d}; quantize at load"),
    }
}

/// `t` as `kind`, without a copy when it already is.
pub fn cast(t: &Tensor, kind: Kind) -> OpResult<Tensor> {
    if t.f_kind()? == kind {
        Ok(t.shallow_clone())
    } else {
        Ok(t.f_to_kind(kind)?)
    }
}

/// Index operands (u32 ids are already i64; u8 ones are widened) into a dim of `len` rows.
///
/// Off the CPU the ids are checked first: libtorch's CUDA kernels turn an id out of range into a
/// device-side assert, which poisons the CUDA context (every later op of the process fails),
/// where its CPU kernels raise an error. The check reads the ids' min and max back in one copy
/// (a sync).
fn index(ids: &TchTensor, len: usize) -> OpResult<Tensor> {
    let t = match ids.dtype {
        DType::U32 | DType::I64 => ids.t.shallow_clone(),
        DType::U8 => ids.t.f_to_kind(Kind::Int64)?,
        d => bail!("indices must be integers, got {d}"),
    };
    if t.device() != tch::Device::Cpu && t.numel() > 0 {
        let (lo, hi) = id_range(&t)?;
        let bad = if lo < 0 { lo } else { hi };
        if bad < 0 || bad as u64 >= len as u64 {
            bail!("index {bad} is out of range for a dim of {len}");
        }
    }
    Ok(t)
}

/// The smallest and largest of integer ids (non-empty), read back to the host in one copy.
fn id_range(ids: &Tensor) -> OpResult<(i64, i64)> {
    let (lo, hi) = ids.f_aminmax(None, false)?;
    let range = Tensor::f_stack(&[lo, hi], 0)?.f_to(tch::Device::Cpu)?;
    Ok((range.f_int64_value(&[0])?, range.f_int64_value(&[1])?))
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

fn as_dtype(x: &TchTensor, d: DType) -> OpResult<Tensor> {
    cast(&x.t, kind_of(d)?)
}

// ---- element-wise ----------------------------------------------------------------------------

fn unary(x: &TchTensor, op: UnaryOp) -> OpResult<TchTensor> {
    let t = &x.t;
    let y = match op {
        UnaryOp::Neg => t.f_neg()?,
        UnaryOp::Exp => t.f_exp()?,
        UnaryOp::Log => t.f_log()?,
        UnaryOp::Sqrt => t.f_sqrt()?,
        UnaryOp::Recip => t.f_reciprocal()?,
        UnaryOp::Abs => t.f_abs()?,
        UnaryOp::Sqr => t.f_square()?,
        UnaryOp::Sin => t.f_sin()?,
        UnaryOp::Cos => t.f_cos()?,
        UnaryOp::Tanh => t.f_tanh()?,
        UnaryOp::Sigmoid => t.f_sigmoid()?,
        UnaryOp::Relu => t.f_relu()?,
        UnaryOp::Silu => t.f_silu()?,
        UnaryOp::GeluTanh => t.f_gelu("tanh")?,
        UnaryOp::GeluErf => t.f_gelu("none")?,
    };
    TchTensor::like(y, x)
}

fn binary(a: &TchTensor, b: &TchTensor, op: BinaryOp) -> OpResult<TchTensor> {
    let mut d = promote(a.dtype, b.dtype);
    // True division, as PyTorch's `/`: integers divide as floats.
    if op == BinaryOp::Div && !d.is_float() {
        d = DType::F32;
    }
    let (x, y) = (as_dtype(a, d)?, as_dtype(b, d)?);
    let r = match op {
        BinaryOp::Add => x.f_add(&y)?,
        BinaryOp::Sub => x.f_sub(&y)?,
        BinaryOp::Mul => x.f_mul(&y)?,
        BinaryOp::Div => x.f_div(&y)?,
        BinaryOp::Maximum => x.f_maximum(&y)?,
        BinaryOp::Minimum => x.f_minimum(&y)?,
    };
    TchTensor::new(r, d == DType::U32)
}

fn compare(a: &TchTensor, b: &TchTensor, op: CmpOp) -> OpResult<TchTensor> {
    let d = promote(a.dtype, b.dtype);
    let (x, y) = (as_dtype(a, d)?, as_dtype(b, d)?);
    let r = match op {
        CmpOp::Eq => x.f_eq_tensor(&y)?,
        CmpOp::Ne => x.f_ne_tensor(&y)?,
        CmpOp::Lt => x.f_lt_tensor(&y)?,
        CmpOp::Le => x.f_le_tensor(&y)?,
        CmpOp::Gt => x.f_gt_tensor(&y)?,
        CmpOp::Ge => x.f_ge_tensor(&y)?,
    };
    TchTensor::new(r, false) // bool -> u8
}

/// `cond ? on_true : on_false`, broadcasting all three; any nonzero condition is true.
fn where_cond(cond: &TchTensor, t: &TchTensor, f: &TchTensor) -> OpResult<TchTensor> {
    let c = cond.t.f_ne(0)?;
    let d = promote(t.dtype, f.dtype);
    let y = as_dtype(t, d)?.f_where_self(&c, &as_dtype(f, d)?)?;
    TchTensor::new(y, d == DType::U32)
}

/// `x * mul + add` in x's dtype (integers compute in f64 and truncate back, as candle does).
fn affine(x: &TchTensor, mul: f64, add: f64) -> OpResult<TchTensor> {
    if !x.is_float() {
        let y = x.t.f_to_kind(Kind::Double)?.f_mul_scalar(mul)?.f_add_scalar(add)?;
        return TchTensor::like(y.f_to_kind(x.t.f_kind()?)?, x);
    }
    let mut y = x.t.shallow_clone();
    if mul != 1.0 {
        y = y.f_mul_scalar(mul)?;
    }
    if add != 0.0 {
        y = y.f_add_scalar(add)?;
    }
    TchTensor::like(y, x)
}

/// Clamps to [min, max]; an infinite or NaN bound is no bound. Keeps x's dtype.
fn clamp(x: &TchTensor, min: f64, max: f64) -> OpResult<TchTensor> {
    let mut y = x.t.shallow_clone();
    let int = !x.is_float();
    if min.is_finite() {
        y = if int { y.f_clamp_min(min.ceil() as i64)? } else { y.f_clamp_min(min)? };
    }
    if max.is_finite() {
        y = if int { y.f_clamp_max(max.floor() as i64)? } else { y.f_clamp_max(max)? };
    }
    TchTensor::like(cast(&y, x.t.f_kind()?)?, x)
}

// ---- shape ops -------------------------------------------------------------------------------

fn reshape(x: &TchTensor, shape: &[usize]) -> OpResult<TchTensor> {
    if shape.iter().product::<usize>() != x.dims().iter().product::<usize>() {
        bail!("cannot reshape {:?} to {shape:?}", x.dims());
    }
    TchTensor::like(x.t.f_reshape(size(shape))?, x)
}

fn permute(x: &TchTensor, dims: &[usize]) -> OpResult<TchTensor> {
    let mut seen = vec![false; x.rank()];
    if dims.len() != x.rank() || dims.iter().any(|&d| d >= x.rank() || std::mem::replace(&mut seen[d], true)) {
        bail!("{dims:?} is not a permutation of the {} dims of {:?}", x.rank(), x.dims());
    }
    TchTensor::like(x.t.f_permute(size(dims))?, x)
}

fn concat(ts: &[&TchTensor], dim: usize) -> OpResult<TchTensor> {
    let first = ts[0];
    check_dim(first, dim)?;
    if let Some(o) = ts.iter().find(|t| t.dtype != first.dtype) {
        bail!("concat of {} and {} tensors", first.dtype, o.dtype);
    }
    let parts: Vec<&Tensor> = ts.iter().map(|t| &t.t).collect();
    TchTensor::like(Tensor::f_cat(&parts, dim as i64)?, first)
}

/// Writes `src` into `dst` at `start` along `dim` and returns `dst`: in place (`copy_` into a
/// narrowed view), so every tensor sharing dst's storage sees the write and a KV cache append
/// costs O(new tokens). A dst whose elements overlap (a broadcast view) cannot take an in-place
/// write and is copied first. `src` is cast to dst's dtype.
fn slice_assign(dst: &TchTensor, src: &TchTensor, dim: usize, start: usize) -> OpResult<TchTensor> {
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
        return TchTensor::like(dst.t.shallow_clone(), dst);
    }
    let overlapping = dst.t.stride().iter().zip(dst.dims()).any(|(&s, &n)| s == 0 && n > 1);
    let target = if overlapping { dst.t.f_contiguous()? } else { dst.t.shallow_clone() };
    let mut view = target.f_narrow(dim as i64, start as i64, len as i64)?;
    if view.f_copy_(&src.t).is_err() {
        // src aliases dst (a view of it): copy it out first.
        let src = src.t.f_contiguous()?.f_detach_copy()?;
        view.f_copy_(&src)?;
    }
    TchTensor::like(target, dst)
}

/// `x + inv_beta · sin²(alpha · x)` per channel of x (b, c, t), step by step in x's dtype as
/// the composition of those ops (the op's contract).
fn snake(x: &TchTensor, alpha: &TchTensor, inv_beta: &TchTensor) -> OpResult<TchTensor> {
    float_only(x)?;
    let c = match *x.dims() {
        [_, c, _] => c,
        _ => bail!("snake needs x of shape (b, c, t), got {:?}", x.dims()),
    };
    let per_channel = |v: &TchTensor, name: &str| -> OpResult<Tensor> {
        if v.dims().iter().product::<usize>() != c {
            bail!("{name} {:?} must hold one value per channel ({c})", v.dims());
        }
        Ok(cast(&v.t, x.t.f_kind()?)?.f_reshape([1, c as i64, 1])?)
    };
    let (alpha, inv_beta) = (per_channel(alpha, "alpha")?, per_channel(inv_beta, "inv_beta")?);
    let sin = x.t.f_mul(&alpha)?.f_sin()?;
    TchTensor::new(x.t.f_add(&sin.f_square()?.f_mul(&inv_beta)?)?, false)
}

// ---- reductions ------------------------------------------------------------------------------

/// As in PyTorch: sums of integers are i64, f16/bf16 sums and means accumulate in f32 (the
/// result keeps the input dtype), means of integers are an error, arg-max/min give the first
/// index of the extreme value as u32.
fn reduce(x: &TchTensor, op: ReduceOp, dim: usize, keepdim: bool) -> OpResult<TchTensor> {
    check_dim(x, dim)?;
    let d = dim as i64;
    let kind = x.t.f_kind()?;
    match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            if op == ReduceOp::Mean && !x.is_float() {
                bail!("mean of an integer tensor ({}); convert to a float dtype first", x.dtype);
            }
            if !x.is_float() {
                return TchTensor::new(x.t.f_sum_dim_intlist([d].as_slice(), keepdim, Kind::Int64)?, false);
            }
            let y = if op == ReduceOp::Sum {
                x.t.f_sum_dim_intlist([d].as_slice(), keepdim, Kind::Float)?
            } else {
                x.t.f_mean_dim([d].as_slice(), keepdim, Kind::Float)?
            };
            TchTensor::new(cast(&y, kind)?, false)
        }
        ReduceOp::Max | ReduceOp::Min => {
            if x.dims()[dim] == 0 {
                bail!("{op:?} over an empty dim {dim} of {:?}", x.dims());
            }
            let y = if op == ReduceOp::Max { x.t.f_amax([d], keepdim)? } else { x.t.f_amin([d], keepdim)? };
            TchTensor::like(y, x)
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            if x.dims()[dim] == 0 {
                bail!("{op:?} over an empty dim {dim} of {:?}", x.dims());
            }
            let y = if op == ReduceOp::ArgMax { x.t.f_argmax(d, keepdim)? } else { x.t.f_argmin(d, keepdim)? };
            TchTensor::new(y, true)
        }
    }
}

/// (Log-)softmax over the last dim, computed in f32; the result has the input dtype.
fn softmax(x: &TchTensor, log: bool) -> OpResult<TchTensor> {
    float_only(x)?;
    if x.rank() == 0 {
        bail!("softmax of a scalar");
    }
    let y = if log { x.t.f_log_softmax(-1, Kind::Float)? } else { x.t.f_softmax(-1, Kind::Float)? };
    TchTensor::new(cast(&y, x.t.f_kind()?)?, false)
}

// ---- linear algebra --------------------------------------------------------------------------

/// `a @ b` with PyTorch `matmul` semantics (batch dims broadcast, 1-D operands promoted).
fn matmul(a: &TchTensor, b: &TchTensor) -> OpResult<TchTensor> {
    if a.dtype != b.dtype {
        bail!("dtypes differ: {} @ {} (convert one first)", a.dtype, b.dtype);
    }
    if a.rank() == 0 || b.rank() == 0 {
        bail!("matmul of a scalar");
    }
    TchTensor::like(a.t.f_matmul(&b.t)?, a)
}

fn bias_for(bias: Option<&TchTensor>, x: &TchTensor) -> OpResult<Option<Tensor>> {
    bias.map(|b| cast(&b.t, x.t.f_kind()?)).transpose()
}

/// `x @ wᵀ + bias` for `x` of any rank >= 1 and `w` of shape (out, in).
fn linear(x: &TchTensor, w: &TchTensor, bias: Option<&TchTensor>) -> OpResult<TchTensor> {
    if w.rank() != 2 {
        bail!("weight must be (out, in), got {:?}", w.dims());
    }
    if x.dtype != w.dtype {
        bail!(
            "input is {} but the weight is {}: convert one of them (weights are usually converted at load)",
            x.dtype,
            w.dtype
        );
    }
    float_only(x)?;
    let (n, k) = (w.dims()[0], w.dims()[1]);
    if x.dims().last() != Some(&k) {
        bail!("input {:?} does not end with the weight's in-features {k} (weight [{n}, {k}])", x.dims());
    }
    if let Some(b) = bias {
        if b.dims().iter().product::<usize>() != n {
            bail!("bias {:?} does not match {n} out-features", b.dims());
        }
    }
    let b = bias_for(bias, x)?.map(|b| b.f_reshape([n as i64])).transpose()?;
    TchTensor::new(x.t.f_linear(&w.t, b.as_ref())?, false)
}

// ---- fused -----------------------------------------------------------------------------------

/// f16/bf16 inputs are normalized in f32 (as the reference implementations do) and the result
/// is cast back; the weight is applied in f32 too.
fn rms_norm(x: &TchTensor, w: &TchTensor, eps: f32) -> OpResult<TchTensor> {
    float_only(x)?;
    let d = *x.dims().last().unwrap_or(&0) as i64;
    let xf = cast(&x.t, Kind::Float)?;
    let wf = cast(&w.t, Kind::Float)?;
    let y = xf.f_rms_norm([d], Some(&wf), eps as f64)?;
    TchTensor::new(cast(&y, x.t.f_kind()?)?, false)
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim (biased variance), in f32.
fn layer_norm(x: &TchTensor, w: &TchTensor, b: Option<&TchTensor>, eps: f32) -> OpResult<TchTensor> {
    float_only(x)?;
    let d = *x.dims().last().unwrap_or(&0) as i64;
    let xf = cast(&x.t, Kind::Float)?;
    let wf = cast(&w.t, Kind::Float)?;
    let bf = b.map(|b| cast(&b.t, Kind::Float)).transpose()?;
    let y = xf.f_layer_norm([d], Some(&wf), bf.as_ref(), eps as f64, true)?;
    TchTensor::new(cast(&y, x.t.f_kind()?)?, false)
}

/// Rotary embedding of x (b, h, t, d) with cos/sin of shape (t', d/2), t' >= t (the first t
/// rows are used). Half-precision inputs rotate in f32 and round once.
fn rope(x: &TchTensor, cos: &TchTensor, sin: &TchTensor, layout: RopeLayout) -> OpResult<TchTensor> {
    float_only(x)?;
    let [b, h, t, d] = match *x.dims() {
        [b, h, t, d] => [b as i64, h as i64, t as i64, d as i64],
        _ => bail!("rope needs x of shape (b, h, t, d), got {:?}", x.dims()),
    };
    if d % 2 != 0 {
        bail!("rope needs an even head dim, got {d}");
    }
    let half = d / 2;
    let prep = |cs: &TchTensor, name: &str| -> OpResult<Tensor> {
        match *cs.dims() {
            [rows, hh] if hh as i64 == half && rows as i64 >= t => {}
            _ => bail!("{name} table {:?} does not fit x {:?} (want ({t}, {half}))", cs.dims(), x.dims()),
        }
        cast(&cs.t.f_narrow(0, 0, t)?, Kind::Float)
    };
    let (c, s) = (prep(cos, "cos")?, prep(sin, "sin")?);
    let xf = cast(&x.t, Kind::Float)?;
    let y = match layout {
        RopeLayout::SplitHalf => {
            let x1 = xf.f_narrow(-1, 0, half)?;
            let x2 = xf.f_narrow(-1, half, half)?;
            let lo = x1.f_mul(&c)?.f_sub(&x2.f_mul(&s)?)?;
            let hi = x2.f_mul(&c)?.f_add(&x1.f_mul(&s)?)?;
            Tensor::f_cat(&[lo, hi], -1)?
        }
        RopeLayout::Interleaved => {
            let xr = xf.f_reshape([b, h, t, half, 2])?;
            let x0 = xr.f_select(-1, 0)?;
            let x1 = xr.f_select(-1, 1)?;
            let e = x0.f_mul(&c)?.f_sub(&x1.f_mul(&s)?)?;
            let o = x0.f_mul(&s)?.f_add(&x1.f_mul(&c)?)?;
            Tensor::f_stack(&[e, o], -1)?.f_reshape([b, h, t, d])?
        }
    };
    TchTensor::new(cast(&y, x.t.f_kind()?)?, false)
}

// ---- convolutions ----------------------------------------------------------------------------

/// A 1-D convolution's parameters; `transposed` holds the output padding of a transposed one.
struct Conv {
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
    transposed: Option<usize>,
}

/// `conv1d` / `conv_transpose1d` through `at::_convolution`, which takes TF32 as an argument:
/// cuDNN would otherwise run f32 convolutions in TF32 (a 10-bit mantissa, PyTorch's default for
/// convolutions), and an f32 tensor here means f32 on every device, as candle computes it.
fn convolution(x: &TchTensor, w: &TchTensor, bias: Option<&TchTensor>, c: Conv) -> OpResult<tch::Tensor> {
    let bias = bias_for(bias, x)?;
    let i = |v: usize| [v as i64];
    Ok(x.t.f_internal_convolution(
        &w.t,
        bias.as_ref(),
        i(c.stride),
        i(c.padding),
        i(c.dilation),
        c.transposed.is_some(),
        i(c.transposed.unwrap_or(0)),
        c.groups as i64,
        false, // benchmark: cuDNN's autotuner off, as PyTorch's default
        false, // deterministic: PyTorch's default
        true,  // cuDNN where it is available
        false, // allow_tf32
    )?)
}

fn conv_check(x: &TchTensor, w: &TchTensor, stride: usize, dilation: usize, groups: usize) -> OpResult<()> {
    if stride == 0 || dilation == 0 || groups == 0 {
        bail!("stride, dilation and groups must be >= 1 (stride {stride}, dilation {dilation}, groups {groups})");
    }
    if x.dtype != w.dtype {
        bail!("input is {} but the weight is {}", x.dtype, w.dtype);
    }
    float_only(x)?;
    if x.rank() != 3 || w.rank() != 3 {
        bail!("conv1d wants x (b, cin, l) and w of rank 3, got {:?} and {:?}", x.dims(), w.dims());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The range read of the GPU id check (the check itself runs off the CPU only).
    #[test]
    fn id_range_reads_min_and_max() {
        let ids = tch::Tensor::from_slice(&[7i64, 2, 9, 4]);
        assert_eq!(super::id_range(&ids).unwrap(), (2, 9));
        let one = tch::Tensor::from_slice(&[5i64]).reshape([1, 1]);
        assert_eq!(super::id_range(&one).unwrap(), (5, 5));
    }
}
