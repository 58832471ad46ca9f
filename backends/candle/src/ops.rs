//! `exec`: one op of the op set on candle tensors. Checks arity, unwraps operands, dispatches
//! to the module implementing the op, and names the op and operand shapes in errors.

use candle_core::{DType as C, Tensor};
use infer_core::{Error, Op, Result, TensorObj};

use crate::attention::{self, AttnParams};
use crate::conv::{self, ConvParams};
use crate::convert;
use crate::elementwise as ew;
use crate::linear;
use crate::norm;
use crate::quant;
use crate::reduce;
use crate::shape_ops;
use crate::tensor::{downcast, CandleTensor};

/// Runs `op` on `inputs`; errors read "<op> [f32[1, 4], ...]: <what went wrong>".
pub fn exec(op: Op<'_>, inputs: &[&TensorObj]) -> Result<TensorObj> {
    let name = op.name();
    let ts = inputs.iter().map(|o| downcast(o, name)).collect::<Result<Vec<&CandleTensor>>>()?;
    op.check_arity(ts.len(), || describe(&ts))?;
    // A mapped half-precision weight seen as f32 stays mapped (its rows widen as they are read).
    if let (Op::ToDType(to), [CandleTensor::Mapped(m)]) = (&op, ts.as_slice()) {
        if let Some(wide) = m.widened(*to) {
            return Ok(CandleTensor::Mapped(std::sync::Arc::new(wide)).into_obj());
        }
    }
    let out = match op {
        Op::ToDType(to) if to.is_quantized() => {
            ts[0].dense(name).and_then(|t| quant::quantize(t, to)).map(|q| CandleTensor::Quant(q).into_obj())
        }
        Op::Concat { dim: 0 } if ts.iter().all(|t| matches!(t, CandleTensor::Quant(_))) => {
            let qs = ts.iter().filter_map(|t| if let CandleTensor::Quant(q) = t { Some(q) } else { None });
            quant::concat_rows(&qs.collect::<Vec<_>>()).map(|q| CandleTensor::Quant(q).into_obj())
        }
        _ => run(op, &ts).and_then(CandleTensor::wrap),
    };
    out.map_err(|e| Error::backend(format!("{name} {}: {}", describe(&ts), crate::error::message(&e))))
}

fn describe(ts: &[&CandleTensor]) -> String {
    infer_core::op::describe_operands(ts.iter().map(|t| t.describe()))
}

fn run(op: Op<'_>, ts: &[&CandleTensor]) -> candle_core::Result<Tensor> {
    let name = op.name();
    let d = |i: usize| -> candle_core::Result<&Tensor> { ts[i].dense(name) };
    let opt = |i: usize| -> candle_core::Result<Option<&Tensor>> { ts.get(i).map(|t| t.dense(name)).transpose() };
    match op {
        Op::Unary(u) => ew::unary(d(0)?, u),
        Op::Binary(b) => ew::binary(d(0)?, d(1)?, b),
        Op::Compare(c) => ew::compare(d(0)?, d(1)?, c),
        Op::Affine { mul, add } => ew::affine(d(0)?, mul, add),
        Op::Powf { exponent } => ew::powf(d(0)?, exponent),
        Op::Clamp { min, max } => ew::clamp(d(0)?, min, max),
        Op::Where => ew::where_cond(d(0)?, d(1)?, d(2)?),
        Op::ToDType(to) => to_dtype(ts[0], to),
        Op::Reshape(shape) => shape_ops::reshape(d(0)?, shape.as_slice()),
        Op::Permute(dims) => shape_ops::permute(d(0)?, dims.as_slice()),
        Op::BroadcastTo(shape) => ew::broadcast(d(0)?, shape.as_slice()),
        Op::Narrow { dim, start, len } => shape_ops::narrow(d(0)?, dim, start, len),
        Op::Concat { dim } => {
            let xs = ts.iter().map(|t| t.dense(name)).collect::<candle_core::Result<Vec<_>>>()?;
            shape_ops::concat(&xs, dim)
        }
        Op::Contiguous => shape_ops::contiguous(d(0)?),
        Op::IndexSelect { dim } => shape_ops::index_select(d(0)?, d(1)?, dim),
        Op::Gather { dim } => shape_ops::gather(d(0)?, d(1)?, dim),
        Op::Reduce { op, dim, keepdim } => reduce::reduce(d(0)?, op, dim, keepdim),
        Op::Softmax => reduce::softmax(d(0)?),
        Op::LogSoftmax => reduce::log_softmax(d(0)?),
        Op::Cumsum { dim } => reduce::cumsum(d(0)?, dim),
        Op::ArgSort { descending } => reduce::argsort(d(0)?, descending),
        Op::Matmul => linear::matmul(d(0)?, d(1)?),
        Op::Linear => linear::linear(d(0)?, ts[1], opt(2)?),
        Op::Embedding => linear::embedding(d(0)?, ts[1]),
        Op::RmsNorm { eps } => norm::rms_norm(d(0)?, d(1)?, eps),
        Op::LayerNorm { eps } => norm::layer_norm(d(0)?, d(1)?, opt(2)?, eps),
        Op::Rope(layout) => norm::rope(d(0)?, d(1)?, d(2)?, layout),
        Op::Attention { scale, causal, window, softcap } => attention::attention(
            d(0)?,
            d(1)?,
            d(2)?,
            opt(3)?,
            AttnParams { scale, causal, window, softcap, probs_dtype: None },
        ),
        Op::Conv1d { stride, padding, dilation, groups } => {
            let p = ConvParams { stride, padding, dilation, groups, output_padding: 0 };
            conv::conv1d(d(0)?, d(1)?, opt(2)?, p)
        }
        Op::ConvTranspose1d { stride, padding, output_padding, dilation, groups } => {
            let p = ConvParams { stride, padding, dilation, groups, output_padding };
            conv::conv_transpose1d(d(0)?, d(1)?, opt(2)?, p)
        }
        Op::SliceAssign { dim, start } => shape_ops::slice_assign(d(0)?, d(1)?, dim, start),
        Op::Snake => crate::snake::snake(d(0)?, d(1)?, d(2)?),
    }
}

/// Casts between dense dtypes; a quantized tensor dequantizes (to f32, then to the target).
/// (Quantizing is [`quant::quantize`], dispatched in [`exec`].)
fn to_dtype(x: &CandleTensor, to: infer_core::DType) -> candle_core::Result<Tensor> {
    let target: C =
        convert::to_candle_dtype(to).ok_or_else(|| candle_core::Error::Msg(format!("{to} is not a dense dtype")))?;
    match x {
        CandleTensor::Dense(t) => ew::to_dtype(t, target),
        CandleTensor::Quant(q) => ew::to_dtype(&quant::dequantize(q)?, target),
        CandleTensor::Mapped(m) => ew::to_dtype(m.dense()?, target),
    }
}
