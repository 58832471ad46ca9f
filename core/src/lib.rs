//! infer-core: the contracts of the infer framework.
//!
//! - [`Backend`] / [`Tensor`] / [`Op`]: the tensor op set models are written against;
//! - text models ([`TextModel`]) and the one generation loop that serves every architecture;
//! - audio contracts ([`audio::SpeechSynthesizer`], [`audio::SpeechRecognizer`],
//!   [`audio::AudioCodec`]);
//! - [`Registry`]: built-in plugins (`inventory`) and plugin libraries (`abi_stable`) behind
//!   one lookup, configured by `plugins.toml`.

pub mod audio;
pub mod audio_io;
pub mod backend;
pub mod checkpoint_info;
pub mod dsp;
pub mod dtype;
pub mod error;
pub mod gguf;
pub mod op;
pub mod plugin;
pub mod plugin_config;
pub mod process_memory;
pub mod quantized_checkpoint;
pub mod recognizer_ffi;
pub mod registry;
pub mod speech_ffi;
pub mod tensor;
pub mod text;
pub mod weights;

pub use backend::{
    Backend, BackendImpl, BackendImpl_TO, BackendObj, DeviceInfo, DeviceKind, MemoryStats, SharedBytes,
    SharedBytesImpl, SharedBytesImpl_TO, TensorImpl, TensorImpl_TO, TensorObj,
};
pub use dtype::DType;
pub use error::{catch_panic, Error, ErrorKind, FfiError, Result};
pub use gguf::GgufFile;
pub use op::{BinaryOp, CmpOp, Op, ReduceOp, RopeLayout, UnaryOp};
pub use plugin::{ModelKind, ModelLoadOptions};
pub use plugin_config::PluginConfig;
pub use registry::{BackendNeed, Origin, Registry};
pub use tensor::{AttentionOpts, Conv1dParams, Tensor};
pub use text::causal_lm::{CausalLm, CausalLmBox};
pub use text::generation_defaults::SamplingDefaults;
pub use text::kv_cache::{KvCache, LayerCache};
pub use text::model::{TextModel, TokenStream};
pub use text::sequence_batch::{FinishReason, SeqEvent, SeqId, SequenceBatch};
pub use text::tokenizer::{HfTokenizer, Tokenizer};
pub use text::types::{
    BatchResult, CancelToken, ChatTemplateOrigin, ClassifyResult, GenerateConfig, GenerateMetrics, LoadConfig, Message,
    ModelInfo, Token,
};
pub use weights::{NameMap, Weights};

/// Re-exports the plugin macros rely on; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use abi_stable;
    pub use inventory;
}
