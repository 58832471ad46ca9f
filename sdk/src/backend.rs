//! The backend contract: where tensors live and how ops run.
//!
//! The contract is a pair of `abi_stable` traits, so a backend built into the binary and one
//! loaded from a plugin library are reached the same way: through `Backend`, a cheap cloneable
//! handle. Every method returns `RResult` and implementations must not unwind (use
//! [`crate::catch_panic`]): a panic crossing the trait's `extern "C"` shims would abort.

// abi_stable's sabi_trait expands to impls rustc now lints as non-local.
#![allow(non_local_definitions)]
// `BackendImpl::from_bytes` is a factory method on the backend, not a conversion of `self`.
#![allow(clippy::wrong_self_convention)]

use abi_stable::{
    sabi_trait,
    std_types::{RArc, RBox, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

use crate::{DType, Error, FfiError, Op, Result};

/// A backend's tensor: opaque to everyone but the backend that made it.
#[sabi_trait]
pub trait TensorImpl: Send + Sync {
    fn shape(&self) -> RSlice<'_, usize>;
    fn dtype(&self) -> DType;
}

/// Type-erased backend tensor (downcastable by the backend that created it).
pub type TensorObj = TensorImpl_TO<'static, RBox<()>>;

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum DeviceKind {
    Cpu,
    Cuda,
    Metal,
}

impl DeviceKind {
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Metal => "metal",
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, StableAbi)]
pub struct DeviceInfo {
    pub kind: DeviceKind,
    pub ordinal: u32,
    /// Human-readable description, e.g. "cpu (2 threads, avx512)".
    pub description: RString,
}

/// Memory figures in bytes; 0 where a backend cannot tell.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, StableAbi)]
pub struct MemoryStats {
    pub active_bytes: u64,
    pub peak_bytes: u64,
    pub device_total_bytes: u64,
}

/// Bytes that stay valid and unchanged while a handle lives (a memory-mapped checkpoint file):
/// a backend that computes on weights in place keeps the handle instead of copying them.
#[sabi_trait]
pub trait SharedBytesImpl: Clone + Send + Sync {
    fn bytes(&self) -> RSlice<'_, u8>;
}

/// A cloneable handle on [`SharedBytesImpl`] bytes.
pub type SharedBytes = SharedBytesImpl_TO<'static, RArc<()>>;

/// What a backend implements. Models never see this trait: they use [`crate::Tensor`].
#[sabi_trait]
pub trait BackendImpl: Send + Sync {
    /// The backend's registered name, e.g. "candle".
    fn name(&self) -> RStr<'_>;
    fn device(&self) -> DeviceInfo;
    fn memory(&self) -> MemoryStats;
    /// Whether `Linear`/`Embedding` consume this (quantized) dtype natively. Where not, the
    /// weight loader dequantizes to f32 at load time.
    fn supports_dtype(&self, dtype: DType) -> bool;
    /// A tensor from little-endian row-major bytes (`dtype.storage_bytes(numel)` of them).
    fn from_bytes(&self, bytes: RSlice<'_, u8>, dtype: DType, shape: RSlice<'_, usize>)
        -> RResult<TensorObj, FfiError>;
    /// Like `from_bytes` for `owner.bytes()[start..end]`. A backend that can compute on those
    /// bytes where they are may keep `owner` instead of copying (the candle backend does for
    /// GGML matrices: the weights are then the file's pages, resident once); by default they
    /// are copied.
    fn from_shared(
        &self,
        owner: SharedBytes,
        start: usize,
        end: usize,
        dtype: DType,
        shape: RSlice<'_, usize>,
    ) -> RResult<TensorObj, FfiError> {
        match owner.bytes().as_slice().get(start..end) {
            Some(bytes) => self.from_bytes(bytes.into(), dtype, shape),
            None => RResult::RErr(FfiError::from(Error::Shape(format!(
                "from_shared: range {start}..{end} outside {} bytes",
                owner.bytes().len()
            )))),
        }
    }
    /// Like `from_bytes`, the float elements converted to the float dtype `to` on the way: a
    /// weight loader's single pass over a checkpoint stored in another float type (no copy in
    /// the stored type first). `to` may also be a block format [`BackendImpl::supports_dtype`]
    /// accepts: the (rows, cols) matrix is then quantized from the bytes, as `ToDType(to)` would.
    /// By default, copies then converts.
    fn from_bytes_as(
        &self,
        bytes: RSlice<'_, u8>,
        dtype: DType,
        to: DType,
        shape: RSlice<'_, usize>,
    ) -> RResult<TensorObj, FfiError> {
        match self.from_bytes(bytes, dtype, shape) {
            RResult::ROk(t) => self.exec(Op::ToDType(to), RSlice::from_slice(&[&t])),
            RResult::RErr(e) => RResult::RErr(e),
        }
    }
    /// A tensor filled with `value`.
    fn full(&self, value: f64, dtype: DType, shape: RSlice<'_, usize>) -> RResult<TensorObj, FfiError>;
    /// Row-major little-endian bytes of `t` (waits for pending work); a quantized tensor gives
    /// its raw GGML blocks (what `from_bytes` took).
    fn to_bytes(&self, t: &TensorObj) -> RResult<RVec<u8>, FfiError>;
    /// Runs one op of the op set.
    fn exec(&self, op: Op<'_>, inputs: RSlice<'_, &TensorObj>) -> RResult<TensorObj, FfiError>;
    /// Forces evaluation of lazy tensors (MLX); eager backends return at once.
    fn eval(&self, tensors: RSlice<'_, &TensorObj>) -> RResult<(), FfiError>;
}

pub type BackendObj = BackendImpl_TO<'static, RBox<()>>;

/// A handle on a live backend instance (one device). Cloning is cheap.
#[repr(C)]
#[derive(Clone, StableAbi)]
pub struct Backend {
    inner: RArc<BackendObj>,
}

impl Backend {
    pub fn new(obj: BackendObj) -> Self {
        Backend { inner: RArc::new(obj) }
    }

    /// Wraps a Rust implementation of the contract.
    pub fn from_impl<B: BackendImpl + 'static>(b: B) -> Self {
        Self::new(BackendImpl_TO::from_value(b, abi_stable::sabi_trait::TD_Opaque))
    }

    pub fn obj(&self) -> &BackendObj {
        &self.inner
    }

    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    pub fn device(&self) -> DeviceInfo {
        self.inner.device()
    }

    pub fn memory(&self) -> MemoryStats {
        self.inner.memory()
    }

    pub fn supports_dtype(&self, dtype: DType) -> bool {
        self.inner.supports_dtype(dtype)
    }

    pub fn same_as(&self, other: &Backend) -> bool {
        std::ptr::eq::<BackendObj>(&*self.inner, &*other.inner)
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({} on {})", self.name(), self.device().kind.name())
    }
}

/// Converts a backend's FFI result to the host error type.
pub fn lift<T>(r: RResult<T, FfiError>) -> Result<T> {
    r.into_result().map_err(Error::from)
}

/// For backend implementors: runs `f`, catching panics, and converts to the FFI result type.
pub fn ffi_result<T>(what: &str, f: impl FnOnce() -> Result<T>) -> RResult<T, FfiError> {
    crate::catch_panic(what, f).map_err(FfiError::from).into()
}
