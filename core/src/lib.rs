//! infer-core: the host side of the infer framework, and one import for everything.
//!
//! - [`Registry`]: built-in plugins (`inventory`) and plugin libraries (`abi_stable`) behind
//!   one lookup, configured by `plugins.toml` ([`PluginConfig`]);
//! - checkpoint inspection ([`checkpoint_info`]) and quantized copies ([`quantized_checkpoint`]);
//! - the layers below, re-exported at the paths hosts use: the SDK's contracts
//!   ([`infer_sdk`]: [`Backend`], [`Tensor`], [`TextModel`], the audio traits, the plugin ABI),
//!   the text runtime ([`infer_text`]: generation engine, tokenizers, chat templates), the audio
//!   runtime ([`infer_audio`]) and GGUF files ([`infer_gguf`]).
//!
//! A plugin depends on `infer-sdk` (and the runtimes it uses), not on this crate.

pub mod checkpoint_info;
pub mod plugin;
pub mod plugin_config;
pub mod process_memory;
pub mod quantized_checkpoint;
pub mod registry;

pub use infer_audio::{audio_io, dsp};
pub use infer_gguf as gguf;
pub use infer_sdk::{
    audio, backend, codec_ffi, dtype, embed, embed_ffi, error, op, recognizer_ffi, speech_ffi, tensor, weights,
};
pub use infer_sdk::{export_plugin_library, register_backend, register_model, rstrs};

/// The text contracts ([`infer_sdk::text`]) and the text runtime ([`infer_text`]) under one path.
pub mod text {
    pub use infer_sdk::text::*;
    pub use infer_text::*;

    /// The tokenizer contract and the Hugging Face implementation.
    pub mod tokenizer {
        pub use infer_sdk::text::tokenizer::*;
        pub use infer_text::hf_tokenizer::*;
    }

    /// The chat-template contract and the Jinja implementation.
    pub mod chat_template {
        pub use infer_sdk::text::chat_template::*;
        pub use infer_text::jinja_template::*;
    }
}

pub use gguf::GgufFile;
pub use infer_sdk::backend::{
    Backend, BackendImpl, BackendImpl_TO, BackendObj, DeviceInfo, DeviceKind, MemoryStats, SharedBytes,
    SharedBytesImpl, SharedBytesImpl_TO, TensorImpl, TensorImpl_TO, TensorObj,
};
pub use infer_sdk::dtype::DType;
pub use infer_sdk::error::{catch_panic, Error, ErrorKind, FfiError, Result};
pub use infer_sdk::op::{BinaryOp, CmpOp, Op, ReduceOp, RopeLayout, UnaryOp};
pub use infer_sdk::plugin::{ModelKind, ModelLoadOptions};
pub use infer_sdk::tensor::{AttentionOpts, Conv1dParams, Tensor};
pub use infer_sdk::text::causal_lm::{CausalLm, CausalLmBox};
pub use infer_sdk::text::conversation::Conversation;
pub use infer_sdk::text::generation_defaults::SamplingDefaults;
pub use infer_sdk::text::kv_cache::{KvCache, LayerCache};
pub use infer_sdk::text::model::{TextModel, TokenStream};
pub use infer_sdk::text::sequence_batch::{FinishReason, SeqEvent, SeqId, SequenceBatch, TokenLogprobs};
pub use infer_sdk::text::tokenizer::{TokenBytes, Tokenizer};
pub use infer_sdk::text::types::{
    BatchResult, CancelToken, ChatTemplateOrigin, ClassifyResult, Constraint, GenerateConfig, GenerateMetrics,
    LoadConfig, Message, ModelInfo, Token,
};
pub use infer_sdk::weights::{NameMap, Weights};
pub use infer_text::HfTokenizer;
pub use plugin_config::PluginConfig;
pub use registry::{BackendNeed, Origin, Registry};

#[doc(hidden)]
pub use infer_sdk::__private;
