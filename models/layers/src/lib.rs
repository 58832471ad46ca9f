//! infer-layers: the transformer building blocks model plugins share (linear, norms, SwiGLU,
//! rotary embeddings, grouped-query self-attention with a KV cache, config.json reading), written
//! once against the core op set.
//!
//! This crate registers no plugin. Model crates depend on it and never on each other, so each model
//! plugin library exports only its own registrations.

pub mod attention;
pub mod config_json;
mod linear;
mod mlp;
mod norm;
mod rotary;
pub mod text_formats;

pub use attention::{AttentionConfig, KvTarget, SelfAttention};
pub use config_json::{read_config, rope_theta};
pub use linear::{Linear, StackedLinear};
pub use mlp::SwiGlu;
pub use norm::RmsNorm;
pub use rotary::{Llama3Scaling, RopeAngles, Rotary};
