//! `CandleTensor`: the backend's tensor behind `infer_core::TensorObj`.
//!
//! Dense tensors are plain `candle_core::Tensor`s (cloning one shares its storage). GGML
//! block-quantized weights stay quantized as a `QTensor` (shared through an `Arc`) and are only
//! consumed by `Linear`, `Embedding` and `ToDType` (dequantization). Mapped tensors are float
//! lookup tables left in a checkpoint's pages ([`MappedTensor`]).

use std::sync::Arc;

use abi_stable::{sabi_trait::TD_CanDowncast, std_types::RSlice};
use candle_core::quantized::QTensor;
use candle_core::Tensor;
use infer_core::backend::TensorImpl_TO;
use infer_core::{DType, Error, Result, TensorImpl, TensorObj};

use crate::convert;
use crate::ggml::GgmlMatrix;
use crate::mapped::MappedTensor;

/// A block-quantized weight (GGML layout), shape as logical elements, e.g. (out, in).
#[derive(Clone)]
pub struct QuantTensor {
    pub repr: QuantRepr,
    pub dtype: DType,
}

/// Matrices of the formats with native kernels keep the file's blocks; other GGML types and
/// shapes go through candle's `QTensor`.
#[derive(Clone)]
pub enum QuantRepr {
    Native(Arc<GgmlMatrix>),
    Candle(Arc<QTensor>),
}

impl QuantTensor {
    pub fn dims(&self) -> &[usize] {
        match &self.repr {
            QuantRepr::Native(m) => m.shape(),
            QuantRepr::Candle(q) => q.shape().dims(),
        }
    }
}

pub enum CandleTensor {
    Dense(Tensor),
    Quant(QuantTensor),
    Mapped(Arc<MappedTensor>),
}

impl CandleTensor {
    pub fn dims(&self) -> &[usize] {
        match self {
            CandleTensor::Dense(t) => t.dims(),
            CandleTensor::Quant(q) => q.dims(),
            CandleTensor::Mapped(m) => m.dims(),
        }
    }

    pub fn infer_dtype(&self) -> DType {
        match self {
            CandleTensor::Dense(t) => convert::from_candle_dtype(t.dtype()).unwrap_or(DType::F32),
            CandleTensor::Quant(q) => q.dtype,
            CandleTensor::Mapped(m) => m.dtype(),
        }
    }

    /// The dense tensor (a mapped one copied on first use), or an error naming `what` (an op
    /// and operand) for a quantized one.
    pub fn dense(&self, what: &str) -> candle_core::Result<&Tensor> {
        match self {
            CandleTensor::Dense(t) => Ok(t),
            CandleTensor::Mapped(m) => m.dense(),
            CandleTensor::Quant(q) => candle_core::bail!(
                "{what}: quantized {} tensor {:?} can only be used by linear/embedding/to_dtype",
                q.dtype,
                q.dims()
            ),
        }
    }

    /// "f32[2, 3]": for error messages.
    pub fn describe(&self) -> String {
        format!("{}{:?}", self.infer_dtype(), self.dims())
    }

    /// Wraps into the type-erased handle (downcastable by this backend).
    pub fn into_obj(self) -> TensorObj {
        TensorImpl_TO::from_value(self, TD_CanDowncast)
    }

    /// Wraps a dense candle tensor, normalizing dtypes candle may produce that infer has no name
    /// for (f64 -> f32, i16/i32 -> i64).
    pub fn wrap(t: Tensor) -> candle_core::Result<TensorObj> {
        use candle_core::DType as C;
        let t = match t.dtype() {
            C::F64 => t.to_dtype(C::F32)?,
            C::I16 | C::I32 => t.to_dtype(C::I64)?,
            _ => t,
        };
        if convert::from_candle_dtype(t.dtype()).is_none() {
            candle_core::bail!("candle produced a {:?} tensor, which infer has no dtype for", t.dtype());
        }
        Ok(CandleTensor::Dense(t).into_obj())
    }
}

impl TensorImpl for CandleTensor {
    fn shape(&self) -> RSlice<'_, usize> {
        RSlice::from_slice(self.dims())
    }

    fn dtype(&self) -> DType {
        self.infer_dtype()
    }
}

/// The backend tensor behind `obj`, or an error when another backend made it.
pub fn downcast<'a>(obj: &'a TensorObj, what: &str) -> Result<&'a CandleTensor> {
    obj.obj.downcast_as::<CandleTensor>().map_err(|_| {
        Error::backend(format!(
            "{what}: tensor {:?} ({}) was not made by the candle backend",
            obj.shape().as_slice(),
            obj.dtype()
        ))
    })
}
