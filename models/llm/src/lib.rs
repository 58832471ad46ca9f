//! infer-llm: decoder LLM architectures as a model plugin. One file per architecture (its
//! hyperparameters, names and quirks) and one registration each; the decoder skeleton, the blocks
//! and the checkpoint mapping are `infer-layers`' (docs/layers.md).

pub mod embedding;
pub mod gemma3;
pub mod llama;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_embedding;

/// Where they lived before `infer-layers` had them (the fuzz targets name these paths).
pub use infer_layers::{checkpoint, hparams};

use infer_core::plugin::{Architecture, TextEmbedding, TextGeneration};
use infer_layers::text_formats::{CHATML, END_OF_TURN, GEMMA_TURNS, LLAMA3_HEADERS, PRE_TOKENIZERS};

/// What every architecture here shares: the vocabularies' pre-tokenizers and end-of-turn tokens.
const fn text_model(name: &'static str) -> Architecture {
    Architecture::named(name).pre_tokenizers(PRE_TOKENIZERS).end_of_turn(END_OF_TURN)
}

infer_core::register_model! {
    name: "qwen3",
    description: "Qwen3 decoder (safetensors or GGUF)",
    // A config.json without model_type is Qwen3 when it has per-head q/k norms (go-mlx's rule).
    architectures: [text_model("qwen3")
        .marker_tensors(infer_core::rstrs!["model.layers.0.self_attn.q_norm.weight"])
        .chat_format("ChatML", CHATML)],
    kinds: [TextGeneration => qwen3::load],
}

infer_core::register_model! {
    name: "qwen2",
    description: "Qwen2 / Qwen2.5 decoder (safetensors or GGUF)",
    // ... and Qwen2 when it has q/k/v biases.
    architectures: [text_model("qwen2")
        .marker_tensors(infer_core::rstrs!["model.layers.0.self_attn.q_proj.bias"])
        .chat_format("ChatML", CHATML)],
    kinds: [TextGeneration => qwen2::load],
}

infer_core::register_model! {
    name: "llama",
    description: "Llama 3 decoder with llama3 RoPE scaling (safetensors or GGUF)",
    architectures: [text_model("llama").chat_format("Llama 3 headers", LLAMA3_HEADERS)],
    kinds: [TextGeneration => llama::load],
}

infer_core::register_model! {
    name: "gemma3",
    description: "Gemma 3 text decoder: sliding-window and global layers (safetensors or GGUF)",
    architectures: [
        text_model("gemma3").chat_format("Gemma turns", GEMMA_TURNS),
        text_model("gemma3_text").chat_format("Gemma turns", GEMMA_TURNS),
    ],
    kinds: [TextGeneration => gemma3::load],
}

// Its own plugin: the registry picks a plugin per kind, so it claims qwen3 for embeddings only
// and leaves the qwen3 text plugin as it is.
infer_core::register_model! {
    name: "qwen3-embedding",
    description: "Qwen3 text embeddings (Qwen3-Embedding sentence-transformers folders)",
    architectures: [Architecture::named("qwen3")],
    kinds: [TextEmbedding => qwen3_embedding::load],
}
