//! Element-wise ops: unary functions, broadcasting binary ops and comparisons, `where`,
//! affine / powf / clamp, dtype casts. Mixed dtypes are promoted like PyTorch does.

use candle_core::{DType as C, Result, Shape, Tensor};
use infer_core::{BinaryOp, CmpOp, UnaryOp};

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
    if t.dtype() == d {
        Ok(t.clone())
    } else {
        t.to_dtype(d)
    }
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
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => candle_nn::ops::sigmoid(x),
        UnaryOp::Relu => x.relu(),
        UnaryOp::Silu => x.silu(),
        UnaryOp::GeluTanh => x.gelu(),
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
