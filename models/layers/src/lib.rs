//! infer-layers: the transformer building blocks model plugins share, written once against the
//! core op set: linear, norms (RMSNorm, LayerNorm), gated MLPs, rotary embeddings (whole or
//! partial), one configurable grouped-query self-attention with a KV cache, the decoder block
//! (pre-, post- or sandwich norms), the decoder-only skeleton ([`CausalDecoder`]: embed -> blocks
//! -> final norm -> head, with packed batches), the Llama-like assembly from hyperparameters, the
//! HF <-> GGUF tensor-name tables, and config.json reading. docs/layers.md shows how an
//! architecture composes them.
//!
//! This crate registers no plugin. Model crates depend on it and never on each other, so each model
//! plugin library exports only its own registrations.

pub mod attention;
pub mod block;
pub mod checkpoint;
pub mod config_json;
pub mod decoder;
pub mod hparams;
mod linear;
pub mod llama_like;
mod mlp;
mod norm;
mod rotary;
pub mod text_formats;

pub use attention::{AttentionConfig, KvTarget, ProjectionBias, QkNorm, QkNormScope, SelfAttention};
pub use block::{BlockConfig, BlockNames, DecoderBlock, DecoderLayer, NormPlacement};
pub use checkpoint::{gguf_name, gguf_name_with, hf_name, Checkpoint};
pub use config_json::{read_config, rope_theta};
pub use decoder::{CausalDecoder, DecoderParts};
pub use hparams::HParams;
pub use linear::{Linear, StackedLinear};
pub use llama_like::model_info;
pub use mlp::{Activation, GatedMlp, MlpConfig, SwiGlu};
pub use norm::{LayerNorm, Norm, NormKind, RmsNorm};
pub use rotary::{Llama3Scaling, RopeAngles, Rotary};
