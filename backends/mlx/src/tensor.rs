//! `MlxTensor`: the backend's tensor behind `infer_core::TensorObj`: an `mlx_rs::Array` (a
//! lazy graph node until evaluated) plus the infer dtype and dims it stands for.

use abi_stable::{sabi_trait::TD_CanDowncast, std_types::RSlice};
use infer_core::backend::TensorImpl_TO;
use infer_core::{DType, Error, Result, TensorImpl, TensorObj};
use mlx_rs::{Array, Dtype};

use crate::error::{bail, OpResult};

pub struct MlxTensor {
    pub a: Array,
    pub dtype: DType,
    dims: Vec<usize>,
}

// SAFETY: an `mlx_rs::Array` is a reference-counted handle on an MLX array node; it is `Send`
// but not `Sync` because evaluating an array mutates the node (its data is filled in and its
// inputs are dropped). Every MLX call of this backend (graph building, evaluation, read-back)
// runs under the process-wide lock of `sys::mlx_lock`, so no two threads touch MLX at once.
unsafe impl Sync for MlxTensor {}

/// The MLX dtype that stores a dense infer dtype.
pub fn mlx_dtype(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::F32 => Dtype::Float32,
        DType::F16 => Dtype::Float16,
        DType::BF16 => Dtype::Bfloat16,
        DType::U8 => Dtype::Uint8,
        DType::U32 => Dtype::Uint32,
        DType::I64 => Dtype::Int64,
        _ => return None,
    })
}

pub fn mlx_dtype_of(d: DType) -> OpResult<Dtype> {
    match mlx_dtype(d) {
        Some(m) => Ok(m),
        None => bail!("the MLX backend has no {d} kernels (GGML block formats are dequantized at load)"),
    }
}

impl MlxTensor {
    /// Wraps an MLX result. Dtypes infer has no name for are normalized: bool -> u8, other
    /// signed integers -> i64, other unsigned ones -> u32, f64 -> f32.
    pub fn new(a: Array) -> OpResult<MlxTensor> {
        let (a, dtype) = match a.dtype() {
            Dtype::Float32 => (a, DType::F32),
            Dtype::Float16 => (a, DType::F16),
            Dtype::Bfloat16 => (a, DType::BF16),
            Dtype::Uint8 => (a, DType::U8),
            Dtype::Uint32 => (a, DType::U32),
            Dtype::Int64 => (a, DType::I64),
            Dtype::Bool => (a.as_dtype(Dtype::Uint8)?, DType::U8),
            Dtype::Int8 | Dtype::Int16 | Dtype::Int32 => (a.as_dtype(Dtype::Int64)?, DType::I64),
            Dtype::Uint16 | Dtype::Uint64 => (a.as_dtype(Dtype::Uint32)?, DType::U32),
            Dtype::Float64 => (a.as_dtype(Dtype::Float32)?, DType::F32),
            other => bail!("MLX produced a {other:?} array, which infer has no dtype for"),
        };
        let dims = a.shape().iter().map(|&d| d as usize).collect();
        Ok(MlxTensor { a, dtype, dims })
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

impl TensorImpl for MlxTensor {
    fn shape(&self) -> RSlice<'_, usize> {
        RSlice::from_slice(&self.dims)
    }

    fn dtype(&self) -> DType {
        self.dtype
    }
}

/// The backend tensor behind `obj`, or an error when another backend made it.
pub fn downcast<'a>(obj: &'a TensorObj, what: &str) -> Result<&'a MlxTensor> {
    obj.obj.downcast_as::<MlxTensor>().map_err(|_| {
        Error::backend(format!(
            "{what}: tensor {:?} ({}) was not made by the mlx backend",
            obj.shape().as_slice(),
            obj.dtype()
        ))
    })
}

/// Shape as MLX wants it.
pub fn shape_i32(shape: &[usize]) -> OpResult<Vec<i32>> {
    shape
        .iter()
        .map(|&d| i32::try_from(d).map_err(|_| crate::error::OpError(format!("dimension {d} exceeds MLX's i32 sizes"))))
        .collect()
}
