//! infer-backend-mlx: the infer op set on MLX through mlx-rs 0.33: the Metal GPU on Apple
//! silicon, the CPU elsewhere (MLX's CPU build, as the `mlx-cpu` wheel ships it on Linux).
//!
//! [`MlxBackend`] implements `infer_core::BackendImpl`. Tensors are MLX arrays
//! ([`tensor::MlxTensor`]); every op adds one or a few nodes to MLX's lazy graph through
//! mlx-rs's fallible API, so an MLX error becomes an infer error naming the op and its operands,
//! never a panic. Nothing is computed until the `eval` hook (called by the generation loop once
//! per step) or a read-back: a decode step is one graph, evaluated once. GGML block formats are
//! not consumed natively (`supports_dtype` is false for them): the weight loader dequantizes
//! them on the host.
//!
//! Module map: [`tensor`] (the tensor type), [`convert`] (bytes), [`ops`] (dispatch,
//! element-wise, shapes, reductions), [`fused`] (matmul, norms, RoPE, convolutions),
//! [`attention`], [`sys`] (devices, the MLX lock, memory), [`profile`] (ops per step, graph
//! building against evaluation time).

pub mod attention;
pub mod convert;
pub mod error;
pub mod fused;
pub mod ops;
pub mod profile;
pub mod sys;
pub mod tensor;

mod registration;

use abi_stable::std_types::{RResult, RSlice, RStr, RVec};
use infer_core::backend::ffi_result;
use infer_core::{
    Backend, BackendImpl, DType, DeviceInfo, DeviceKind, Error, FfiError, MemoryStats, Op, Result, TensorObj,
};
use mlx_rs::Stream;

pub use tensor::MlxTensor;

/// The MLX backend on one device (its default stream).
pub struct MlxBackend {
    kind: DeviceKind,
    stream: Stream,
}

// SAFETY: a `Stream` is a small handle (device + index) that MLX reads only while ops are added
// under `sys::mlx_lock`.
unsafe impl Send for MlxBackend {}
unsafe impl Sync for MlxBackend {}

impl std::fmt::Debug for MlxBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MlxBackend({})", self.kind.name())
    }
}

impl MlxBackend {
    /// The backend on `device`: "" (the GPU where MLX has one, else the CPU), "cpu", "gpu" or
    /// "metal".
    pub fn new(device: &str) -> Result<Self> {
        let _guard = sys::mlx_lock();
        let (kind, stream) = sys::select_device(device)?;
        Ok(MlxBackend { kind, stream })
    }

    /// A ready handle on the CPU backend.
    pub fn cpu() -> Result<Backend> {
        Ok(Backend::from_impl(Self::new("cpu")?))
    }

    pub fn device_kind(&self) -> DeviceKind {
        self.kind
    }
}

impl BackendImpl for MlxBackend {
    fn name(&self) -> RStr<'_> {
        RStr::from_str("mlx")
    }

    fn device(&self) -> DeviceInfo {
        let kind = self.kind;
        // Infallible signature: a panic must still not unwind across FFI.
        std::panic::catch_unwind(|| sys::device_info(kind)).unwrap_or_else(|_| DeviceInfo {
            kind,
            ordinal: 0,
            description: "mlx".into(),
        })
    }

    fn memory(&self) -> MemoryStats {
        std::panic::catch_unwind(sys::memory_stats).unwrap_or_default()
    }

    /// Dense dtypes only: GGML block formats are dequantized by the loader.
    fn supports_dtype(&self, dtype: DType) -> bool {
        tensor::mlx_dtype(dtype).is_some()
    }

    fn from_bytes(
        &self,
        bytes: RSlice<'_, u8>,
        dtype: DType,
        shape: RSlice<'_, usize>,
    ) -> RResult<TensorObj, FfiError> {
        ffi_result("from_bytes", || {
            let _guard = sys::mlx_lock();
            mlx_rs::with_stream(&self.stream, || {
                Ok(convert::from_bytes(bytes.as_slice(), dtype, shape.as_slice())?.into_obj())
            })
        })
    }

    fn full(&self, value: f64, dtype: DType, shape: RSlice<'_, usize>) -> RResult<TensorObj, FfiError> {
        ffi_result("full", || {
            let _guard = sys::mlx_lock();
            mlx_rs::with_stream(&self.stream, || Ok(convert::full(value, dtype, shape.as_slice())?.into_obj()))
        })
    }

    fn to_bytes(&self, t: &TensorObj) -> RResult<RVec<u8>, FfiError> {
        ffi_result("to_bytes", || {
            let t = tensor::downcast(t, "to_bytes")?;
            let _guard = sys::mlx_lock();
            profile::evaluation("read-back", || mlx_rs::with_stream(&self.stream, || convert::to_bytes(t)))
                .map(RVec::from)
                .map_err(|e| Error::backend(format!("to_bytes {}: {}", t.describe(), e.0)))
        })
    }

    fn exec(&self, op: Op<'_>, inputs: RSlice<'_, &TensorObj>) -> RResult<TensorObj, FfiError> {
        ffi_result(op.name(), || {
            let _guard = sys::mlx_lock();
            profile::op(|| ops::exec(op, inputs.as_slice(), &self.stream, self.kind != DeviceKind::Metal))
        })
    }

    /// Evaluates the graphs behind `tensors` in one go (MLX's `eval`): the generation loop calls
    /// this once per step, so a step's ops run as one scheduled graph.
    fn eval(&self, tensors: RSlice<'_, &TensorObj>) -> RResult<(), FfiError> {
        ffi_result("eval", || {
            let ts = tensors.iter().map(|t| tensor::downcast(t, "eval")).collect::<Result<Vec<_>>>()?;
            let _guard = sys::mlx_lock();
            profile::evaluation("eval", || mlx_rs::transforms::eval(ts.iter().map(|t| &t.a)))
                .map_err(|e| Error::backend(format!("eval: {}", error::one_line(e.what()))))
        })
    }
}
