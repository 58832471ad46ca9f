//! Where an architecture's weights and hyperparameters come from: a Hugging Face directory or a
//! GGUF file. GGUF tensor names are mapped from the HF names here, in one place.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use infer_core::{Backend, DType, GgufFile, Result, Weights};

pub enum Checkpoint {
    Dir(PathBuf),
    Gguf(Arc<GgufFile>),
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self> {
        if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            Ok(Checkpoint::Gguf(Arc::new(GgufFile::open(path)?)))
        } else {
            Ok(Checkpoint::Dir(path.to_path_buf()))
        }
    }

    /// The checkpoint's weights under HF names.
    pub fn weights(&self, backend: &Backend, dtype: DType, gguf_names: fn(&str) -> String) -> Result<Weights> {
        match self {
            Checkpoint::Dir(dir) => Weights::from_dir(dir, backend, dtype),
            Checkpoint::Gguf(g) => infer_core::gguf::weights(g.clone(), backend, dtype, Arc::new(gguf_names)),
        }
    }
}

/// HF tensor names of the Llama-like decoders -> llama.cpp's GGUF names.
pub fn gguf_name(hf: &str) -> String {
    let hf = hf.strip_prefix("model.").unwrap_or(hf);
    match hf {
        "embed_tokens.weight" => return "token_embd.weight".into(),
        "norm.weight" => return "output_norm.weight".into(),
        "lm_head.weight" => return "output.weight".into(),
        _ => {}
    }
    let Some(rest) = hf.strip_prefix("layers.") else { return hf.to_string() };
    let (layer, name) = rest.split_once('.').unwrap_or((rest, ""));
    let mapped = [
        ("input_layernorm", "attn_norm"),
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("self_attn.q_norm", "attn_q_norm"),
        ("self_attn.k_norm", "attn_k_norm"),
        ("post_attention_layernorm", "ffn_norm"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
    ]
    .iter()
    .find_map(|(from, to)| name.strip_prefix(from).map(|suffix| format!("{to}{suffix}")))
    .unwrap_or_else(|| name.to_string());
    format!("blk.{layer}.{mapped}")
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn maps_hf_names_to_gguf() {
        assert_eq!(gguf_name("model.embed_tokens.weight"), "token_embd.weight");
        assert_eq!(gguf_name("model.layers.3.self_attn.q_proj.bias"), "blk.3.attn_q.bias");
        assert_eq!(gguf_name("model.layers.10.mlp.down_proj.weight"), "blk.10.ffn_down.weight");
        assert_eq!(gguf_name("model.layers.0.self_attn.k_norm.weight"), "blk.0.attn_k_norm.weight");
        assert_eq!(gguf_name("lm_head.weight"), "output.weight");
    }
}
