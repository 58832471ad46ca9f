//! Tokenizers stored in GGUF metadata, rebuilt as `tokenizers` pipelines:
//!
//! - `tokenizer.ggml.model = "gpt2"`: byte-level BPE from `tokens` + `merges`, with the
//!   pre-tokenizer regex named by `tokenizer.ggml.pre` (Qwen2, Llama 3, GPT-2);
//! - `tokenizer.ggml.model = "llama"`: SentencePiece BPE from `tokens` + `scores` (Gemma, Llama 2),
//!   run by [`crate::spm`] exactly as llama.cpp does.
//!
//! Control and user-defined tokens become added tokens, so `<start_of_turn>` in text is one id.

use serde_json::{json, Value};

use crate::byte_bpe::{build, merge_pair, ByteBpeParts, GPT2_PATTERN};
use crate::conventions::TokenizerConventions;
use crate::hf_tokenizer::{HfTokenizer, SpecialTokens};
use crate::jinja_template::JinjaTemplate;
use crate::spm::{SpmModel, SpmTokenizer};
use infer_gguf::GgufFile;
use infer_sdk::Tokenizer;
use infer_sdk::{Error, Result};

const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// The tokenizer a GGUF file's metadata describes, with the claiming plugin's `conventions`
/// (pre-tokenizers by `tokenizer.ggml.pre`, tokens that end a turn).
pub fn tokenizer_from_gguf(g: &GgufFile, conventions: &TokenizerConventions<'_>) -> Result<Box<dyn Tokenizer>> {
    let model = g.string("tokenizer.ggml.model")?;
    let tokens = g.strings("tokenizer.ggml.tokens")?;
    let types: Vec<i64> = match g.array("tokenizer.ggml.token_type") {
        Ok(v) => v.iter().map(|t| t.to_i32().map(i64::from).unwrap_or(1)).collect(),
        Err(_) => vec![1; tokens.len()],
    };
    match model.as_str() {
        "gpt2" => gpt2_tokenizer(g, &tokens, &types, conventions),
        "llama" => {
            let scores: Vec<f32> =
                g.array("tokenizer.ggml.scores")?.iter().map(|s| s.to_f32().unwrap_or(0.0)).collect();
            let prefix = g.bool("tokenizer.ggml.add_space_prefix").unwrap_or(false);
            let spm = SpmModel::new(tokens.clone(), scores, types, prefix)?;
            let special = special_tokens(g, &tokens, |t| spm.id(t), true, conventions)?;
            Ok(Box::new(SpmTokenizer { model: spm, special }))
        }
        other => {
            Err(Error::checkpoint(g.path(), format!("unsupported tokenizer model `{other}` (gpt2 and llama are)")))
        }
    }
}

fn gpt2_tokenizer(
    g: &GgufFile,
    tokens: &[String],
    types: &[i64],
    conventions: &TokenizerConventions<'_>,
) -> Result<Box<dyn Tokenizer>> {
    let added: Vec<Value> = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| matches!(types.get(*i), Some(&TOKEN_CONTROL) | Some(&TOKEN_USER_DEFINED)))
        .map(|(i, t)| {
            json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": types[i] == TOKEN_CONTROL})
        })
        .collect();
    let mut parts = gpt2_spec(g, tokens, conventions)?;
    parts.added = added;
    let inner = build(parts)
        .map_err(|e| Error::checkpoint(g.path(), format!("cannot build the tokenizer from metadata: {e}")))?;
    let s = special_tokens(g, tokens, |t| inner.token_to_id(t), false, conventions)?;
    Ok(Box::new(HfTokenizer::from_parts(inner, s.bos, s.add_bos, s.eos, s.template)))
}

/// BOS/EOS ids, whether to add BOS, and the chat template, from `tokenizer.*` metadata.
fn special_tokens(
    g: &GgufFile,
    tokens: &[String],
    lookup: impl Fn(&str) -> Option<u32>,
    add_bos_default: bool,
    conventions: &TokenizerConventions<'_>,
) -> Result<SpecialTokens> {
    let id = |key: &str| g.usize(key).ok().map(|v| v as u32);
    let bos = id("tokenizer.ggml.bos_token_id");
    let add_bos = g.bool("tokenizer.ggml.add_bos_token").unwrap_or(add_bos_default);
    let mut eos: Vec<u32> =
        [id("tokenizer.ggml.eos_token_id"), id("tokenizer.ggml.eot_token_id")].into_iter().flatten().collect();
    eos.extend(conventions.end_of_turn.iter().filter_map(|t| lookup(t.as_str())));
    eos.sort_unstable();
    eos.dedup();
    let name = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize)).cloned().unwrap_or_default();
    let template = match g.string("tokenizer.chat_template") {
        Ok(src) => Some(JinjaTemplate::new(src, &name(bos), &name(eos.first().copied()))?),
        Err(_) => None,
    };
    Ok(SpecialTokens { bos, add_bos, eos, template })
}

fn gpt2_spec<'a>(
    g: &GgufFile,
    tokens: &'a [String],
    conventions: &TokenizerConventions<'a>,
) -> Result<ByteBpeParts<'a>> {
    let merges = g
        .strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| merge_pair(&m).ok_or_else(|| Error::checkpoint(g.path(), format!("malformed merge `{m}`"))))
        .collect::<Result<_>>()?;
    let pre = g.string("tokenizer.ggml.pre").unwrap_or_default();
    let (pattern, nfc) = conventions.pre_tokenizer(&pre).map_or((GPT2_PATTERN, false), |p| (p.pattern.as_str(), p.nfc));
    let vocab = tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    Ok(ByteBpeParts { vocab, merges, pattern, nfc, added: Vec::new() })
}
