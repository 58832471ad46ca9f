//! infer-llm: decoder LLM architectures as a model plugin. One file per architecture (its
//! hyperparameters, names and quirks) and one registration each; the decoder skeleton, the blocks
//! and the checkpoint mapping are `infer-layers`' (docs/layers.md).

pub mod gemma3;
pub mod llama;
pub mod qwen2;
pub mod qwen3;

/// Where they lived before `infer-layers` had them (the fuzz targets name these paths).
pub use infer_layers::{checkpoint, hparams};

infer_core::register_text_model! {
    name: "qwen3",
    description: "Qwen3 decoder (safetensors or GGUF)",
    architectures: ["qwen3"],
    load: qwen3::load,
}

infer_core::register_text_model! {
    name: "qwen2",
    description: "Qwen2 / Qwen2.5 decoder (safetensors or GGUF)",
    architectures: ["qwen2"],
    load: qwen2::load,
}

infer_core::register_text_model! {
    name: "llama",
    description: "Llama 3 decoder with llama3 RoPE scaling (safetensors or GGUF)",
    architectures: ["llama"],
    load: llama::load,
}

infer_core::register_text_model! {
    name: "gemma3",
    description: "Gemma 3 text decoder: sliding-window and global layers (safetensors or GGUF)",
    architectures: ["gemma3", "gemma3_text"],
    load: gemma3::load,
}
