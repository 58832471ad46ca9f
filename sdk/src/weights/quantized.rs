//! Pre-quantized checkpoints as [`Weights`](crate::weights::Weights) reads them: a quantized
//! weight is a 1-D `U8` tensor of its GGML blocks, and the safetensors header's `__metadata__`
//! key [`METADATA_KEY`] maps each such tensor's name to `{"dtype": "q4_k", "shape": [out, in]}`.
//! The recording hook ([`record_quantized`]) is how `infer quantize` learns which weights a load
//! quantized; the writer lives in the host crate (infer-core).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::{DType, Error, Result, Tensor};

/// The `__metadata__` key that lists a safetensors file's quantized tensors.
pub const METADATA_KEY: &str = "infer.quantized";

/// A weight quantized at load while [`record_quantized`] ran.
pub struct QuantizedWeight {
    /// The safetensors file it was read from.
    pub file: PathBuf,
    /// Its name in that file.
    pub name: String,
    /// The blocks, as the backend holds them.
    pub tensor: Tensor,
}

thread_local! {
    /// The weights quantized on this thread while a recording runs.
    static RECORDING: RefCell<Option<Vec<QuantizedWeight>>> = const { RefCell::new(None) };
}

/// Runs `load` and returns, with its result, every float weight that
/// [`Weights::get_linear`](crate::weights::Weights::get_linear) quantized meanwhile on this thread (loads
/// on other threads are not seen, nor a plugin library's models: a library carries its own copy
/// of this crate).
pub fn record_quantized<T>(load: impl FnOnce() -> T) -> (T, Vec<QuantizedWeight>) {
    /// Ends the recording however `load` ends (a panic included), restoring an outer one.
    struct Restore(Option<Vec<QuantizedWeight>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            RECORDING.with(|r| *r.borrow_mut() = outer);
        }
    }
    let restore = Restore(RECORDING.with(|r| r.borrow_mut().replace(Vec::new())));
    let out = load();
    let recorded = RECORDING.with(|r| r.borrow_mut().take()).unwrap_or_default();
    drop(restore);
    (out, recorded)
}

/// Notes a weight quantized at load, when a recording runs on this thread.
pub(crate) fn note(file: &Path, name: &str, tensor: &Tensor) {
    RECORDING.with(|r| {
        if let Some(list) = r.borrow_mut().as_mut() {
            list.push(QuantizedWeight { file: file.to_path_buf(), name: name.to_string(), tensor: tensor.clone() });
        }
    });
}

/// The quantized tensors a safetensors header lists under [`METADATA_KEY`]: name -> (format,
/// logical shape). `path` names the file in errors.
pub fn listed(path: &Path, metadata: Option<&HashMap<String, String>>) -> Result<HashMap<String, (DType, Vec<usize>)>> {
    let Some(json) = metadata.and_then(|m| m.get(METADATA_KEY)) else { return Ok(HashMap::new()) };
    let bad = |m: String| Error::checkpoint(path, format!("`{METADATA_KEY}` metadata: {m}"));
    let entries: BTreeMap<String, ListedTensor> =
        serde_json::from_str(json).map_err(|e| bad(format!("not a map of {{dtype, shape}} ({e})")))?;
    entries
        .into_iter()
        .map(|(name, t)| {
            let dtype = DType::parse_quantized(&t.dtype)
                .ok_or_else(|| bad(format!("tensor `{name}`: `{}` is not a GGML block format", t.dtype)))?;
            Ok((name, (dtype, t.shape)))
        })
        .collect()
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct ListedTensor {
    pub dtype: String,
    pub shape: Vec<usize>,
}
