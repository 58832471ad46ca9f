//! infer-sdk: what a plugin is written against.
//!
//! - [`Backend`] / [`Tensor`] / [`Op`]: the tensor op set models are written against;
//! - [`Weights`]: a checkpoint's named tensors (safetensors, memory-mapped; GGUF through
//!   `infer-gguf`);
//! - text contracts ([`TextModel`], [`CausalLm`], [`Tokenizer`], KV caches);
//! - audio contracts ([`audio::SpeechSynthesizer`], [`audio::SpeechRecognizer`],
//!   [`audio::AudioCodec`]);
//! - the text-embedding contract ([`embed::TextEmbedder`]);
//! - the plugin ABI ([`plugin`]) and its registration macros.
//!
//! It depends on no ML library, tokenizer, template engine or audio codec: those live in the
//! runtimes above it (`infer-text`, `infer-audio`, `infer-gguf`) and the host crate
//! (`infer-core`), and a plugin links only what it uses.

pub mod audio;
pub mod backend;
pub mod codec_ffi;
pub mod dtype;
pub mod embed;
pub mod embed_ffi;
pub mod error;
pub mod op;
pub mod plugin;
pub mod recognizer_ffi;
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
pub use op::{BinaryOp, CmpOp, Op, ReduceOp, RopeLayout, UnaryOp};
pub use plugin::{ModelKind, ModelLoadOptions};
pub use tensor::{AttentionOpts, Conv1dParams, Tensor};
pub use text::causal_lm::{CausalLm, CausalLmBox};
pub use text::chat_template::ChatTemplate;
pub use text::conversation::Conversation;
pub use text::generation_defaults::SamplingDefaults;
pub use text::kv_cache::{KvCache, LayerCache};
pub use text::model::{TextModel, TokenStream};
pub use text::sequence_batch::{FinishReason, SeqEvent, SeqId, SequenceBatch};
pub use text::tokenizer::{TokenBytes, Tokenizer};
pub use text::types::{
    BatchResult, CancelToken, ChatTemplateOrigin, ClassifyResult, Constraint, GenerateConfig, GenerateMetrics,
    LoadConfig, Message, ModelInfo, Token,
};
pub use weights::{NameMap, Weights};

/// Re-exports the plugin macros rely on; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use abi_stable;
    pub use inventory;
}
