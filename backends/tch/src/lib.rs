//! infer-backend-tch: the infer op set on libtorch (PyTorch 2.13.0 through tch 0.26), on the CPU
//! and on CUDA.
//!
//! [`TchBackend`] implements `infer_core::BackendImpl`. Tensors are libtorch tensors
//! ([`tensor::TchTensor`]); every op is one or a few ATen calls through tch's fallible `f_*`
//! API, so a libtorch error becomes an infer error naming the op and its operands, never a
//! panic. GGML block formats are not consumed natively (`supports_dtype` is false for them):
//! the weight loader dequantizes them on the host.
//!
//! Module map: [`tensor`] (the tensor type), [`convert`] (bytes), [`ops`] (dispatch and most
//! ops), [`attention`], [`sys`] (threads, devices, memory).

pub mod attention;
pub mod convert;
pub mod error;
pub mod ops;
pub mod sys;
pub mod tensor;

mod registration;

use abi_stable::std_types::{RResult, RSlice, RStr, RVec};
use infer_core::backend::ffi_result;
use infer_core::{Backend, BackendImpl, DType, DeviceInfo, Error, FfiError, MemoryStats, Op, Result, TensorObj};

pub use tensor::TchTensor;

/// The tch backend on one device.
#[derive(Debug, Clone)]
pub struct TchBackend {
    device: tch::Device,
}

impl TchBackend {
    /// The backend on `device`: "" / "cpu" / "cpu:0", "cuda" / "cuda:N".
    pub fn new(device: &str) -> Result<Self> {
        sys::configure_threads();
        sys::configure_half_reductions();
        let device = match device.trim() {
            "" | "cpu" | "cpu:0" => tch::Device::Cpu,
            d if d == "cuda" || d.starts_with("cuda:") => {
                let ordinal = match d.strip_prefix("cuda:") {
                    None => 0,
                    Some(n) => n
                        .parse::<usize>()
                        .map_err(|_| Error::invalid(format!("tch: bad CUDA device `{d}` (want cuda or cuda:N)")))?,
                };
                let count = sys::cuda_device_count();
                if count == 0 {
                    return Err(Error::unsupported(sys::no_cuda_reason()));
                }
                if ordinal >= count {
                    return Err(Error::invalid(format!("tch: CUDA device {ordinal} asked for, libtorch sees {count}")));
                }
                tch::Device::Cuda(ordinal)
            }
            other => {
                return Err(Error::unsupported(format!(
                    "tch drives the CPU and CUDA; device `{other}` needs another backend"
                )))
            }
        };
        Ok(TchBackend { device })
    }

    /// A ready handle on the CPU backend.
    pub fn cpu() -> Result<Backend> {
        Ok(Backend::from_impl(Self::new("cpu")?))
    }

    pub fn tch_device(&self) -> tch::Device {
        self.device
    }
}

impl BackendImpl for TchBackend {
    fn name(&self) -> RStr<'_> {
        RStr::from_str("tch")
    }

    fn device(&self) -> DeviceInfo {
        let device = self.device;
        // Infallible signature: a panic must still not unwind across FFI.
        std::panic::catch_unwind(|| sys::device_info(device)).unwrap_or_else(|_| DeviceInfo {
            kind: if device.is_cuda() { infer_core::DeviceKind::Cuda } else { infer_core::DeviceKind::Cpu },
            ordinal: 0,
            description: "libtorch".into(),
        })
    }

    fn memory(&self) -> MemoryStats {
        std::panic::catch_unwind(sys::memory_stats).unwrap_or_default()
    }

    /// Dense dtypes only: GGML block formats are dequantized by the loader.
    fn supports_dtype(&self, dtype: DType) -> bool {
        tensor::storage_kind(dtype).is_some()
    }

    fn from_bytes(
        &self,
        bytes: RSlice<'_, u8>,
        dtype: DType,
        shape: RSlice<'_, usize>,
    ) -> RResult<TensorObj, FfiError> {
        ffi_result("from_bytes", || {
            Ok(convert::from_bytes(bytes.as_slice(), dtype, shape.as_slice(), self.device)?.into_obj())
        })
    }

    fn full(&self, value: f64, dtype: DType, shape: RSlice<'_, usize>) -> RResult<TensorObj, FfiError> {
        ffi_result("full", || Ok(convert::full(value, dtype, shape.as_slice(), self.device)?.into_obj()))
    }

    fn to_bytes(&self, t: &TensorObj) -> RResult<RVec<u8>, FfiError> {
        ffi_result("to_bytes", || {
            let t = tensor::downcast(t, "to_bytes")?;
            convert::to_bytes(t)
                .map(RVec::from)
                .map_err(|e| Error::backend(format!("to_bytes {}: {}", t.describe(), e.0)))
        })
    }

    fn exec(&self, op: Op<'_>, inputs: RSlice<'_, &TensorObj>) -> RResult<TensorObj, FfiError> {
        ffi_result(op.name(), || ops::exec(op, inputs.as_slice()))
    }

    /// libtorch runs eagerly on the CPU; on CUDA, kernels are queued on the device's stream and
    /// every read-back (`to_bytes`) synchronizes, so there is nothing to force here either.
    fn eval(&self, _tensors: RSlice<'_, &TensorObj>) -> RResult<(), FfiError> {
        ffi_result("eval", || Ok(()))
    }
}
