//! Byte-level BPE vocabularies (GPT-2, Qwen2, Llama 3) assembled as a `tokenizers` pipeline from
//! their parts: GGUF metadata, or the `vocab.json` + `merges.txt` pair that checkpoints without a
//! `tokenizer.json` ship (Qwen3-TTS, older GPT-2 style repositories).

use crate::conventions::TokenizerConventions;
use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use infer_sdk::{Error, Result};

/// GPT-2's split regex (also llama.cpp's default for `gpt2`).
pub(crate) const GPT2_PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// The pieces of a byte-level BPE tokenizer.
pub(crate) struct ByteBpeParts<'a> {
    pub vocab: HashMap<&'a str, usize>,
    /// Merge pairs, highest priority first.
    pub merges: Vec<(String, String)>,
    pub pattern: &'static str,
    /// NFC-normalise before splitting (Qwen2).
    pub nfc: bool,
    /// Added tokens as `tokenizers` JSON objects (`id`, `content`, `special`, ...).
    pub added: Vec<Value>,
}

pub(crate) fn build(parts: ByteBpeParts<'_>) -> std::result::Result<tokenizers::Tokenizer, String> {
    let merges: Vec<Value> = parts.merges.iter().map(|(a, b)| json!([a, b])).collect();
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "post_processor": null,
        "added_tokens": parts.added,
        "normalizer": if parts.nfc { json!({"type": "NFC"}) } else { Value::Null },
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": parts.pattern}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
        ]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": parts.vocab, "merges": merges}
    });
    serde_json::from_value::<tokenizers::Tokenizer>(doc).map_err(|e| e.to_string())
}

/// Splits a `merges.txt` / GGUF merge line `a b` into its pair.
pub(crate) fn merge_pair(line: &str) -> Option<(String, String)> {
    line.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string()))
}

/// `vocab.json` + `merges.txt` (+ the added tokens of `tokenizer_config.json`) in `dir`, the
/// slow-tokenizer files of `GPT2Tokenizer` / `Qwen2Tokenizer`.
pub(crate) fn from_vocab_merges(
    dir: &Path,
    tok_cfg: Option<&Value>,
    conventions: &TokenizerConventions<'_>,
) -> Result<tokenizers::Tokenizer> {
    let vocab_path = dir.join("vocab.json");
    let merges_path = dir.join("merges.txt");
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| Error::io(p, e));
    let vocab_text = read(&vocab_path)?;
    let vocab: HashMap<String, usize> = serde_json::from_str(&vocab_text)
        .map_err(|e| Error::config(&vocab_path, format!("not a token -> id map: {e}")))?;
    let merges = read(&merges_path)?
        .lines()
        .filter(|l| !l.starts_with("#version") && !l.trim().is_empty())
        .map(|l| merge_pair(l).ok_or_else(|| Error::config(&merges_path, format!("malformed merge `{l}`"))))
        .collect::<Result<Vec<_>>>()?;
    let class = tok_cfg.and_then(|c| c.get("tokenizer_class")).and_then(Value::as_str).unwrap_or("");
    let (pattern, nfc) =
        conventions.pre_tokenizer_for_class(class).map_or((GPT2_PATTERN, false), |p| (p.pattern.as_str(), p.nfc));
    let mut added: Vec<Value> = Vec::new();
    if let Some(Value::Object(map)) = tok_cfg.and_then(|c| c.get("added_tokens_decoder")) {
        for (id, tok) in map {
            let id: u64 = id.parse().map_err(|_| {
                Error::config(dir.join("tokenizer_config.json"), format!("added token id `{id}` is not a number"))
            })?;
            let field = |k: &str| tok.get(k).and_then(Value::as_bool).unwrap_or(false);
            added.push(json!({
                "id": id,
                "content": tok.get("content").and_then(Value::as_str).unwrap_or_default(),
                "single_word": field("single_word"), "lstrip": field("lstrip"), "rstrip": field("rstrip"),
                "normalized": field("normalized"), "special": field("special"),
            }));
        }
    }
    let vocab = vocab.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    build(ByteBpeParts { vocab, merges, pattern, nfc, added })
        .map_err(|e| Error::config(&vocab_path, format!("cannot build the BPE tokenizer: {e}")))
}
