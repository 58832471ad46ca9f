//! Where an architecture's weights and hyperparameters come from: a Hugging Face directory or a
//! GGUF file. GGUF tensor names are mapped from the HF names here, in one place.

use std::path::{Path, PathBuf};
#[cfg(feature = "gguf")]
use std::sync::Arc;

#[cfg(feature = "gguf")]
use infer_gguf::GgufFile;
use infer_sdk::{Backend, DType, Result, Weights};

pub enum Checkpoint {
    Dir(PathBuf),
    /// A GGUF file (the `gguf` feature, on by default, which links candle's GGUF reader).
    #[cfg(feature = "gguf")]
    Gguf(Arc<GgufFile>),
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self> {
        #[cfg(feature = "gguf")]
        if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            return Ok(Checkpoint::Gguf(Arc::new(GgufFile::open(path)?)));
        }
        Ok(Checkpoint::Dir(path.to_path_buf()))
    }

    /// The checkpoint's weights under HF names.
    pub fn weights(&self, backend: &Backend, dtype: DType, gguf_names: fn(&str) -> String) -> Result<Weights> {
        #[cfg(not(feature = "gguf"))]
        let _ = gguf_names;
        match self {
            Checkpoint::Dir(dir) => Weights::from_dir(dir, backend, dtype),
            #[cfg(feature = "gguf")]
            Checkpoint::Gguf(g) => infer_gguf::weights(g.clone(), backend, dtype, Arc::new(gguf_names)),
        }
    }
}

/// HF -> GGUF names of the top-level tensors (after `model.` is dropped).
pub const GGUF_TOP_NAMES: &[(&str, &str)] = &[
    ("embed_tokens.weight", "token_embd.weight"),
    ("norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

/// HF -> GGUF names of the tensors of block `N` (`layers.N.<hf>` <-> `blk.N.<gguf>`), by prefix
/// (`.weight` / `.bias` follow), for the Llama-like decoders.
pub const GGUF_BLOCK_NAMES: &[(&str, &str)] = &[
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
];

/// Gemma 2 / 3's block norms (sandwich): llama.cpp names them apart from the Llama family's.
pub const GGUF_GEMMA_BLOCK_NAMES: &[(&str, &str)] = &[
    ("post_attention_layernorm", "post_attention_norm"),
    ("pre_feedforward_layernorm", "ffn_norm"),
    ("post_feedforward_layernorm", "post_ffw_norm"),
];

/// HF tensor names of the Llama-like decoders -> llama.cpp's GGUF names.
pub fn gguf_name(hf: &str) -> String {
    gguf_name_with(hf, &[])
}

/// As [`gguf_name`], the block names in `overrides` looked up before [`GGUF_BLOCK_NAMES`] (an
/// architecture whose names differ: [`GGUF_GEMMA_BLOCK_NAMES`]).
pub fn gguf_name_with(hf: &str, overrides: &[(&str, &str)]) -> String {
    let hf = hf.strip_prefix("model.").unwrap_or(hf);
    if let Some((_, to)) = GGUF_TOP_NAMES.iter().find(|(from, _)| *from == hf) {
        return (*to).into();
    }
    let Some(rest) = hf.strip_prefix("layers.") else { return hf.to_string() };
    let (layer, name) = rest.split_once('.').unwrap_or((rest, ""));
    let mapped = overrides
        .iter()
        .chain(GGUF_BLOCK_NAMES)
        .find_map(|(from, to)| name.strip_prefix(from).map(|suffix| format!("{to}{suffix}")))
        .unwrap_or_else(|| name.to_string());
    format!("blk.{layer}.{mapped}")
}

/// GGUF names -> the HF names [`gguf_name`] maps from (`blk.3.attn_q.bias` ->
/// `model.layers.3.self_attn.q_proj.bias`); names outside the tables come back unchanged.
pub fn hf_name(gguf: &str) -> String {
    if let Some((from, _)) = GGUF_TOP_NAMES.iter().find(|(_, to)| *to == gguf) {
        return if *from == "lm_head.weight" { (*from).into() } else { format!("model.{from}") };
    }
    let Some(rest) = gguf.strip_prefix("blk.") else { return gguf.to_string() };
    let (layer, name) = rest.split_once('.').unwrap_or((rest, ""));
    let (base, suffix) = name.split_once('.').map_or((name, ""), |(b, s)| (b, s));
    let Some((from, _)) = GGUF_BLOCK_NAMES.iter().find(|(_, to)| *to == base) else { return gguf.to_string() };
    let dot = if suffix.is_empty() { "" } else { "." };
    format!("model.layers.{layer}.{from}{dot}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::{gguf_name, gguf_name_with, hf_name, GGUF_GEMMA_BLOCK_NAMES};

    #[test]
    fn maps_hf_names_to_gguf() {
        assert_eq!(gguf_name("model.embed_tokens.weight"), "token_embd.weight");
        assert_eq!(gguf_name("model.layers.3.self_attn.q_proj.bias"), "blk.3.attn_q.bias");
        assert_eq!(gguf_name("model.layers.10.mlp.down_proj.weight"), "blk.10.ffn_down.weight");
        assert_eq!(gguf_name("model.layers.0.self_attn.k_norm.weight"), "blk.0.attn_k_norm.weight");
        assert_eq!(gguf_name("lm_head.weight"), "output.weight");
    }

    #[test]
    fn gemma_norms_have_their_own_names() {
        let g = |n| gguf_name_with(n, GGUF_GEMMA_BLOCK_NAMES);
        assert_eq!(g("model.layers.2.post_attention_layernorm.weight"), "blk.2.post_attention_norm.weight");
        assert_eq!(g("model.layers.2.pre_feedforward_layernorm.weight"), "blk.2.ffn_norm.weight");
        assert_eq!(g("model.layers.2.post_feedforward_layernorm.weight"), "blk.2.post_ffw_norm.weight");
        assert_eq!(g("model.layers.2.self_attn.q_norm.weight"), "blk.2.attn_q_norm.weight");
    }

    #[test]
    fn gguf_names_map_back() {
        for hf in [
            "model.embed_tokens.weight",
            "model.norm.weight",
            "lm_head.weight",
            "model.layers.3.self_attn.q_proj.bias",
            "model.layers.10.mlp.down_proj.weight",
            "model.layers.0.post_attention_layernorm.weight",
        ] {
            assert_eq!(hf_name(&gguf_name(hf)), hf);
        }
    }
}
