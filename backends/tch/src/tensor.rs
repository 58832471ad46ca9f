//! `TchTensor`: the backend's tensor behind `infer_core::TensorObj`.
//!
//! A libtorch tensor plus the infer dtype it stands for. libtorch's unsigned 32-bit type is a
//! barely supported "shell" dtype (no indexing, few kernels), so infer's `U32` (token ids,
//! arg-max/arg-sort results) lives in an `Int64` tensor tagged `U32`: index ops take it as is,
//! and `to_bytes` writes it back as u32.

use abi_stable::{sabi_trait::TD_CanDowncast, std_types::RSlice};
use infer_core::backend::TensorImpl_TO;
use infer_core::{DType, Error, Result, TensorImpl, TensorObj};
use tch::{Kind, Tensor};

use crate::error::{OpError, OpResult};

pub struct TchTensor {
    pub t: Tensor,
    pub dtype: DType,
    dims: Vec<usize>,
}

// SAFETY: `tch::Tensor` is a pointer to a reference-counted `at::Tensor`; it is `Send` but not
// `Sync` only because it is a raw pointer. libtorch tensors may be read from several threads at
// once (every op here creates a new tensor); the one in-place write, `SliceAssign`, is
// documented by the op contract as consuming its `dst`, so no other thread reads it meanwhile.
unsafe impl Sync for TchTensor {}

/// The libtorch kind that stores a dense infer dtype.
pub fn storage_kind(d: DType) -> Option<Kind> {
    Some(match d {
        DType::F32 => Kind::Float,
        DType::F16 => Kind::Half,
        DType::BF16 => Kind::BFloat16,
        DType::U8 => Kind::Uint8,
        DType::U32 | DType::I64 => Kind::Int64,
        _ => return None,
    })
}

impl TchTensor {
    /// Wraps a libtorch result. Kinds infer has no name for are normalized (bool -> u8,
    /// i8/i16/i32 -> i64, f64 -> f32); an `Int64` result is tagged `U32` when `u32` is set.
    pub fn new(t: Tensor, u32: bool) -> OpResult<TchTensor> {
        let (t, dtype) = match t.f_kind()? {
            Kind::Float => (t, DType::F32),
            Kind::Half => (t, DType::F16),
            Kind::BFloat16 => (t, DType::BF16),
            Kind::Uint8 => (t, DType::U8),
            Kind::Bool => (t.f_to_kind(Kind::Uint8)?, DType::U8),
            Kind::Int64 => (t, if u32 { DType::U32 } else { DType::I64 }),
            Kind::Int | Kind::Int16 | Kind::Int8 => {
                (t.f_to_kind(Kind::Int64)?, if u32 { DType::U32 } else { DType::I64 })
            }
            Kind::Double => (t.f_to_kind(Kind::Float)?, DType::F32),
            other => {
                return Err(OpError(format!("libtorch produced a {other:?} tensor, which infer has no dtype for")))
            }
        };
        let dims = t.size().iter().map(|&d| d as usize).collect();
        Ok(TchTensor { t, dtype, dims })
    }

    /// A result that keeps the integer tagging of `like` (U32 stays U32).
    pub fn like(t: Tensor, like: &TchTensor) -> OpResult<TchTensor> {
        Self::new(t, like.dtype == DType::U32)
    }

    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    pub fn is_float(&self) -> bool {
        self.dtype.is_float()
    }

    /// "f32[2, 3]": for error messages.
    pub fn describe(&self) -> String {
        format!("{}{:?}", self.dtype, self.dims)
    }

    /// Wraps into the type-erased handle (downcastable by this backend).
    pub fn into_obj(self) -> TensorObj {
        TensorImpl_TO::from_value(self, TD_CanDowncast)
    }
}

impl TensorImpl for TchTensor {
    fn shape(&self) -> RSlice<'_, usize> {
        RSlice::from_slice(&self.dims)
    }

    fn dtype(&self) -> DType {
        self.dtype
    }
}

/// The backend tensor behind `obj`, or an error when another backend made it.
pub fn downcast<'a>(obj: &'a TensorObj, what: &str) -> Result<&'a TchTensor> {
    obj.obj.downcast_as::<TchTensor>().map_err(|_| {
        Error::backend(format!(
            "{what}: tensor {:?} ({}) was not made by the tch backend",
            obj.shape().as_slice(),
            obj.dtype()
        ))
    })
}
