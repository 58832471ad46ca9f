//! A plugin library whose backend and model loaders panic: the host must get errors, not aborts.

use std::path::Path;

use infer_core::{Backend, BackendImpl, ModelLoadOptions, Result};

fn always() -> bool {
    true
}

fn create(_device: &str) -> Result<NeverBackend> {
    panic!("panicky backend refuses to start")
}

fn load(_path: &Path, _backend: &Backend, _opts: &ModelLoadOptions) -> Result<NeverModel> {
    panic!("panicky model refuses to load")
}

/// Never constructed: the loaders panic first.
enum NeverBackend {}
enum NeverModel {}

mod impls {
    use super::*;
    use abi_stable::std_types::{ROption, RResult, RSlice, RStr, RVec};
    use infer_core::{DType, DeviceInfo, FfiError, KvCache, MemoryStats, ModelInfo, Op, Tensor, TensorObj};

    impl BackendImpl for NeverBackend {
        fn name(&self) -> RStr<'_> {
            match *self {}
        }
        fn device(&self) -> DeviceInfo {
            match *self {}
        }
        fn memory(&self) -> MemoryStats {
            match *self {}
        }
        fn supports_dtype(&self, _: DType) -> bool {
            match *self {}
        }
        fn from_bytes(&self, _: RSlice<'_, u8>, _: DType, _: RSlice<'_, usize>) -> RResult<TensorObj, FfiError> {
            match *self {}
        }
        fn full(&self, _: f64, _: DType, _: RSlice<'_, usize>) -> RResult<TensorObj, FfiError> {
            match *self {}
        }
        fn to_bytes(&self, _: &TensorObj) -> RResult<RVec<u8>, FfiError> {
            match *self {}
        }
        fn exec(&self, _: Op<'_>, _: RSlice<'_, &TensorObj>) -> RResult<TensorObj, FfiError> {
            match *self {}
        }
        fn eval(&self, _: RSlice<'_, &TensorObj>) -> RResult<(), FfiError> {
            match *self {}
        }
    }

    impl infer_core::CausalLm for NeverModel {
        fn info(&self) -> ModelInfo {
            match *self {}
        }
        fn new_cache(&self, _: usize) -> RResult<KvCache, FfiError> {
            match *self {}
        }
        fn forward(&self, _: &Tensor, _: &mut KvCache, _: ROption<&Tensor>, _: bool) -> RResult<Tensor, FfiError> {
            match *self {}
        }
    }
}

infer_core::register_backend! {
    name: "panicky",
    description: "test backend whose constructor panics",
    devices: ["cpu"],
    available: always,
    create: create,
}

infer_core::register_model! {
    name: "panicky",
    description: "test model plugin whose loader panics",
    architectures: [infer_core::plugin::Architecture::named("panicky")],
    kinds: [infer_core::plugin::TextGeneration => load],
}

infer_core::export_plugin_library!();
