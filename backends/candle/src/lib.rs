//! infer-backend-candle: the infer op set on candle, CPU.
//!
//! [`CandleBackend`] implements `infer_core::BackendImpl`. Dense tensors are candle tensors;
//! GGML block-quantized weights stay quantized and run through candle's k-quant kernels
//! (`Linear`), row lookups (`Embedding`) or dequantization (`ToDType`). Every entry point catches
//! panics and returns them as errors, so the backend can sit behind the plugin ABI.
//!
//! Module map: [`tensor`] (the tensor type), [`convert`] (bytes and dtypes), [`quant`]
//! (quantized weights), [`ops`] (dispatch) and one module per op family.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx_attention;
pub mod attention;
pub mod conv;
pub mod convert;
pub mod elementwise;
pub mod error;
pub mod f32_tiles;
mod fused_attention;
pub mod gemv;
pub mod ggml;
pub mod half_gemm;
mod half_slices;
pub mod linear;
pub mod mapped;
pub mod norm;
pub mod ops;
mod pool;
pub mod quant;
mod quant_q4k;
mod quant_q8_0;
pub mod reduce;
pub mod shape_ops;
pub mod snake;
pub mod sys;
pub mod tensor;
pub mod weight_rows;

mod registration;

/// The benches' seeded inputs, shared with the unit tests.
#[cfg(test)]
mod test_inputs;

use abi_stable::std_types::{RResult, RSlice, RStr, RVec};
use infer_core::backend::ffi_result;
use infer_core::{
    Backend, BackendImpl, DType, DeviceInfo, Error, FfiError, MemoryStats, Op, Result, SharedBytes, TensorObj,
};

pub use tensor::CandleTensor;

/// The candle backend on the CPU.
#[derive(Debug, Clone, Default)]
pub struct CandleBackend {
    _private: (),
}

impl CandleBackend {
    /// The CPU backend (always available).
    pub fn cpu() -> Result<Self> {
        Ok(CandleBackend { _private: () })
    }

    /// A ready handle on the CPU backend.
    pub fn backend() -> Result<Backend> {
        Ok(Backend::from_impl(Self::cpu()?))
    }
}

impl BackendImpl for CandleBackend {
    fn name(&self) -> RStr<'_> {
        RStr::from_str("candle")
    }

    fn device(&self) -> DeviceInfo {
        // Infallible signatures: a panic (none is expected) must still not unwind across FFI.
        std::panic::catch_unwind(sys::device_info).unwrap_or_else(|_| DeviceInfo {
            kind: infer_core::DeviceKind::Cpu,
            ordinal: 0,
            description: "cpu".into(),
        })
    }

    fn memory(&self) -> MemoryStats {
        std::panic::catch_unwind(sys::memory_stats).unwrap_or_default()
    }

    fn supports_dtype(&self, dtype: DType) -> bool {
        convert::to_candle_dtype(dtype).is_some() || quant::to_ggml(dtype).is_some()
    }

    fn from_bytes(
        &self,
        bytes: RSlice<'_, u8>,
        dtype: DType,
        shape: RSlice<'_, usize>,
    ) -> RResult<TensorObj, FfiError> {
        ffi_result("from_bytes", || {
            let (bytes, shape) = (bytes.as_slice(), shape.as_slice());
            if dtype.is_quantized() {
                Ok(CandleTensor::Quant(quant::from_bytes(bytes, dtype, shape)?).into_obj())
            } else {
                Ok(CandleTensor::Dense(convert::dense_from_bytes(bytes, dtype, shape)?).into_obj())
            }
        })
    }

    fn from_bytes_as(
        &self,
        bytes: RSlice<'_, u8>,
        dtype: DType,
        to: DType,
        shape: RSlice<'_, usize>,
    ) -> RResult<TensorObj, FfiError> {
        ffi_result("from_bytes_as", || {
            if to.is_quantized() {
                // Quantized at load straight from the checkpoint's bytes.
                let q = quant::quantize_bytes(bytes.as_slice(), dtype, to, shape.as_slice())?;
                return Ok(CandleTensor::Quant(q).into_obj());
            }
            let t = convert::dense_from_bytes_as(bytes.as_slice(), dtype, to, shape.as_slice())?;
            Ok(CandleTensor::Dense(t).into_obj())
        })
    }

    /// Quantized matrices with native kernels and float tensors stay in the owner's (mapped)
    /// bytes; float tensors are copied on first use by an op other than `Embedding`.
    fn from_shared(
        &self,
        owner: SharedBytes,
        start: usize,
        end: usize,
        dtype: DType,
        shape: RSlice<'_, usize>,
    ) -> RResult<TensorObj, FfiError> {
        ffi_result("from_shared", || {
            if dtype.is_quantized() {
                Ok(CandleTensor::Quant(quant::from_shared(owner, start, end, dtype, shape.as_slice())?).into_obj())
            } else if dtype.is_float() {
                let m = mapped::MappedTensor::new(owner, start, end, dtype, shape.as_slice())?;
                Ok(CandleTensor::Mapped(std::sync::Arc::new(m)).into_obj())
            } else {
                let bytes = owner.bytes();
                let bytes = bytes.as_slice().get(start..end).ok_or_else(|| {
                    Error::Shape(format!("from_shared: range {start}..{end} outside {} bytes", bytes.len()))
                })?;
                Ok(CandleTensor::Dense(convert::dense_from_bytes(bytes, dtype, shape.as_slice())?).into_obj())
            }
        })
    }

    fn full(&self, value: f64, dtype: DType, shape: RSlice<'_, usize>) -> RResult<TensorObj, FfiError> {
        ffi_result("full", || Ok(CandleTensor::Dense(convert::full(value, dtype, shape.as_slice())?).into_obj()))
    }

    /// Dense tensors: row-major little-endian elements. Quantized tensors: their raw GGML blocks
    /// (exactly what `from_bytes` took), not dequantized values; use `ToDType(F32)` for those.
    fn to_bytes(&self, t: &TensorObj) -> RResult<RVec<u8>, FfiError> {
        ffi_result("to_bytes", || {
            let t = tensor::downcast(t, "to_bytes")?;
            let bytes = match t {
                CandleTensor::Dense(x) => convert::dense_to_bytes(x),
                CandleTensor::Quant(q) => quant::to_bytes(q),
                CandleTensor::Mapped(m) if m.stored_dtype() == m.dtype() => Ok(m.bytes().to_vec()),
                CandleTensor::Mapped(m) => m.dense().and_then(convert::dense_to_bytes),
            };
            bytes
                .map(RVec::from)
                .map_err(|e| Error::backend(format!("to_bytes {}: {}", t.describe(), crate::error::message(&e))))
        })
    }

    fn exec(&self, op: Op<'_>, inputs: RSlice<'_, &TensorObj>) -> RResult<TensorObj, FfiError> {
        ffi_result(op.name(), || ops::exec(op, inputs.as_slice()))
    }

    /// candle on the CPU is eager: nothing to wait for.
    fn eval(&self, _tensors: RSlice<'_, &TensorObj>) -> RResult<(), FfiError> {
        ffi_result("eval", || Ok(()))
    }
}
