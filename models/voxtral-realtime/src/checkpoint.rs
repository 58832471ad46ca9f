//! The two on-disk layouts and the one place their tensor names are mapped.
//!
//! The model asks for Hugging Face names as transformers 5.23 `save_pretrained` writes them
//! (`audio_tower.*`, `language_model.model.*`, `multi_modal_projector.*`). A Mistral-native
//! checkpoint (`params.json` + `consolidated.safetensors`) stores the same tensors under Mistral's
//! names, with one real difference: its q/k projection rows are in the interleaved-RoPE order
//! (transformers' converter permutes them for split-half RoPE). So the native layout is read
//! through a name map, without copying, and rotated with [`RopeLayout::Interleaved`].

use std::path::Path;
use std::sync::Arc;

use infer_core::text::tekken::Tekken;
use infer_core::{Backend, DType, Error, Result, RopeLayout, Weights};

use crate::config::Params;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    HuggingFace,
    Mistral,
}

/// A checkpoint directory: its layout, hyper-parameters, tokenizer and weights.
pub struct Checkpoint {
    pub layout: Layout,
    pub params: Params,
    pub tekken: Tekken,
    pub weights: Weights,
}

impl Checkpoint {
    pub fn open(dir: &Path, backend: &Backend, dtype: DType) -> Result<Self> {
        let layout = if dir.join("config.json").exists() {
            Layout::HuggingFace
        } else if dir.join("params.json").exists() {
            Layout::Mistral
        } else {
            return Err(Error::config(
                dir,
                "neither config.json nor params.json found: not a Voxtral Realtime checkpoint",
            ));
        };
        let params = match layout {
            Layout::HuggingFace => Params::from_hf_dir(dir)?,
            Layout::Mistral => Params::from_params_json(dir)?,
        };
        let tekken_path = dir.join("tekken.json");
        if !tekken_path.exists() {
            return Err(Error::config(
                &tekken_path,
                "not found (Voxtral Realtime ships its Tekken tokenizer as tekken.json)",
            ));
        }
        let tekken = Tekken::from_file(&tekken_path)?;
        let weights = Weights::from_dir(dir, backend, dtype)?;
        let weights = match layout {
            Layout::HuggingFace => weights,
            Layout::Mistral => weights.with_name_map(Arc::new(|name: &str| mistral_name(name))),
        };
        Ok(Checkpoint { layout, params, tekken, weights })
    }

    /// How q/k rows are ordered for RoPE in this layout.
    pub fn rope_layout(&self) -> RopeLayout {
        match self.layout {
            Layout::HuggingFace => RopeLayout::SplitHalf,
            Layout::Mistral => RopeLayout::Interleaved,
        }
    }
}

const ENCODER: &str = "mm_streams_embeddings.embedding_module.whisper_encoder";

/// Per-layer names: Hugging Face suffix -> Mistral suffix.
const ENCODER_LAYER: [(&str, &str); 9] = [
    ("self_attn.q_proj.", "attention.wq."),
    ("self_attn.k_proj.", "attention.wk."),
    ("self_attn.v_proj.", "attention.wv."),
    ("self_attn.o_proj.", "attention.wo."),
    ("self_attn_layer_norm.", "attention_norm."),
    ("final_layer_norm.", "ffn_norm."),
    ("mlp.gate_proj.", "feed_forward.w1."),
    ("mlp.down_proj.", "feed_forward.w2."),
    ("mlp.up_proj.", "feed_forward.w3."),
];

const DECODER_LAYER: [(&str, &str); 11] = [
    ("self_attn.q_proj.", "attention.wq."),
    ("self_attn.k_proj.", "attention.wk."),
    ("self_attn.v_proj.", "attention.wv."),
    ("self_attn.o_proj.", "attention.wo."),
    ("input_layernorm.", "attention_norm."),
    ("post_attention_layernorm.", "ffn_norm."),
    ("mlp.gate_proj.", "feed_forward.w1."),
    ("mlp.down_proj.", "feed_forward.w2."),
    ("mlp.up_proj.", "feed_forward.w3."),
    ("ada_rms_norm.linear1.", "ada_rms_norm_t_cond.0."),
    ("ada_rms_norm.linear2.", "ada_rms_norm_t_cond.2."),
];

/// A Hugging Face tensor name in Mistral's `consolidated.safetensors`.
pub fn mistral_name(hf: &str) -> String {
    let layer = |rest: &str, table: &[(&str, &str)], prefix: &str| -> Option<String> {
        let (i, tail) = rest.split_once('.')?;
        table.iter().find_map(|(h, m)| tail.strip_prefix(h).map(|p| format!("{prefix}.{i}.{m}{p}")))
    };
    let mapped = if let Some(r) = hf.strip_prefix("audio_tower.") {
        if let Some(r) = r.strip_prefix("embedder.conv1.") {
            Some(format!("{ENCODER}.conv_layers.0.conv.{r}"))
        } else if let Some(r) = r.strip_prefix("embedder.conv2.") {
            Some(format!("{ENCODER}.conv_layers.1.conv.{r}"))
        } else if let Some(r) = r.strip_prefix("norm.") {
            Some(format!("{ENCODER}.transformer.norm.{r}"))
        } else {
            r.strip_prefix("layers.").and_then(|r| layer(r, &ENCODER_LAYER, &format!("{ENCODER}.transformer.layers")))
        }
    } else if let Some(r) = hf.strip_prefix("multi_modal_projector.") {
        match r {
            "linear_1.weight" => {
                Some("mm_streams_embeddings.embedding_module.audio_language_projection.0.weight".into())
            }
            "linear_2.weight" => {
                Some("mm_streams_embeddings.embedding_module.audio_language_projection.2.weight".into())
            }
            _ => None,
        }
    } else if let Some(r) = hf.strip_prefix("language_model.") {
        match r {
            "model.embed_tokens.weight" => Some("mm_streams_embeddings.embedding_module.tok_embeddings.weight".into()),
            "model.norm.weight" => Some("norm.weight".into()),
            "lm_head.weight" => Some("output.weight".into()),
            _ => r.strip_prefix("model.layers.").and_then(|r| layer(r, &DECODER_LAYER, "layers")),
        }
    } else {
        None
    };
    mapped.unwrap_or_else(|| hf.to_string())
}

#[cfg(test)]
mod tests {
    use super::mistral_name;

    #[test]
    fn hugging_face_names_map_to_mistral_names() {
        let cases = [
            (
                "audio_tower.embedder.conv2.bias",
                "mm_streams_embeddings.embedding_module.whisper_encoder.conv_layers.1.conv.bias",
            ),
            (
                "audio_tower.layers.3.self_attn.q_proj.weight",
                "mm_streams_embeddings.embedding_module.whisper_encoder.transformer.layers.3.attention.wq.weight",
            ),
            (
                "audio_tower.layers.0.final_layer_norm.weight",
                "mm_streams_embeddings.embedding_module.whisper_encoder.transformer.layers.0.ffn_norm.weight",
            ),
            (
                "audio_tower.norm.weight",
                "mm_streams_embeddings.embedding_module.whisper_encoder.transformer.norm.weight",
            ),
            (
                "multi_modal_projector.linear_2.weight",
                "mm_streams_embeddings.embedding_module.audio_language_projection.2.weight",
            ),
            (
                "language_model.model.embed_tokens.weight",
                "mm_streams_embeddings.embedding_module.tok_embeddings.weight",
            ),
            ("language_model.model.layers.25.ada_rms_norm.linear2.weight", "layers.25.ada_rms_norm_t_cond.2.weight"),
            ("language_model.model.layers.1.mlp.down_proj.weight", "layers.1.feed_forward.w2.weight"),
            ("language_model.model.norm.weight", "norm.weight"),
            ("something.else", "something.else"),
        ];
        for (hf, m) in cases {
            assert_eq!(mistral_name(hf), m, "{hf}");
        }
    }
}
