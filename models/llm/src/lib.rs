//! infer-llm: decoder LLM architectures as a model plugin. One file per architecture; the
//! shared decoder skeleton, attention and layers are written once against the core op set.

pub mod attention;
pub mod config;
pub mod decoder;
pub mod layers;
pub mod qwen3;

infer_core::register_text_model! {
    name: "qwen3",
    description: "Qwen3 decoder (config.json + safetensors)",
    architectures: ["qwen3"],
    load: qwen3::load,
}
