//! The Hugging Face `tokenizer.json` tokenizer.

use std::path::Path;

use crate::conventions::TokenizerConventions;
use crate::jinja_template::JinjaTemplate;
use infer_sdk::{ChatTemplate, TokenBytes, Tokenizer};
use infer_sdk::{Error, Result};

/// BOS/EOS facts and the chat template, wherever the vocabulary came from.
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub add_bos: bool,
    pub eos: Vec<u32>,
    pub template: Option<JinjaTemplate>,
}

/// `tokenizer.json` plus the special-token facts from `tokenizer_config.json`,
/// `generation_config.json` and `config.json` next to it.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<u32>,
    add_bos: bool,
    eos: Vec<u32>,
    template: Option<JinjaTemplate>,
}

impl HfTokenizer {
    /// Loads the tokenizer of the checkpoint directory `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        Self::from_dir_with(dir, &TokenizerConventions::default())
    }

    /// [`HfTokenizer::from_dir`] with the claiming plugin's `conventions` (the pre-tokenizer of a
    /// vocab.json + merges.txt vocabulary, by its `tokenizer_class`).
    pub fn from_dir_with(dir: &Path, conventions: &TokenizerConventions<'_>) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        let tok_cfg = read_json_opt(&dir.join("tokenizer_config.json"))?;
        let inner = if path.exists() {
            read_tokenizer_json(&path)?
        } else if dir.join("vocab.json").exists() && dir.join("merges.txt").exists() {
            crate::byte_bpe::from_vocab_merges(dir, tok_cfg.as_ref(), conventions)?
        } else {
            return Err(Error::config(
                &path,
                "tokenizer.json (or vocab.json + merges.txt) not found (the checkpoint must ship its tokenizer)",
            ));
        };
        let gen_cfg = read_json_opt(&dir.join("generation_config.json"))?;
        let model_cfg = read_json_opt(&dir.join("config.json"))?;

        let lookup = |v: &serde_json::Value| -> Option<u32> {
            match v {
                serde_json::Value::String(s) => inner.token_to_id(s),
                serde_json::Value::Object(o) => {
                    o.get("content").and_then(|c| c.as_str()).and_then(|s| inner.token_to_id(s))
                }
                serde_json::Value::Number(n) => n.as_u64().map(|n| n as u32),
                _ => None,
            }
        };
        let field = |key: &str| -> Vec<&serde_json::Value> {
            [&tok_cfg, &gen_cfg, &model_cfg].into_iter().flatten().filter_map(|c| c.get(key)).collect()
        };

        let bos = field("bos_token").into_iter().chain(field("bos_token_id")).find_map(lookup);
        let add_bos = tok_cfg.as_ref().and_then(|c| c.get("add_bos_token")).and_then(|v| v.as_bool()).unwrap_or(false);
        let mut eos = Vec::new();
        for v in field("eos_token_id").into_iter().chain(field("eos_token")) {
            match v {
                serde_json::Value::Array(items) => eos.extend(items.iter().filter_map(lookup)),
                other => eos.extend(lookup(other)),
            }
        }
        eos.sort_unstable();
        eos.dedup();

        let template = match tok_cfg.as_ref().and_then(|c| c.get("chat_template")) {
            Some(serde_json::Value::String(src)) => Some(JinjaTemplate::new(
                src.clone(),
                &inner_token(&inner, bos),
                &inner_token(&inner, eos.first().copied()),
            )?),
            _ => {
                let jinja = dir.join("chat_template.jinja");
                if jinja.exists() {
                    let src = std::fs::read_to_string(&jinja).map_err(|e| Error::io(&jinja, e))?;
                    Some(JinjaTemplate::new(
                        src,
                        &inner_token(&inner, bos),
                        &inner_token(&inner, eos.first().copied()),
                    )?)
                } else {
                    None
                }
            }
        };
        Ok(HfTokenizer { inner, bos, add_bos, eos, template })
    }

    /// A tokenizer assembled elsewhere (e.g. from GGUF metadata).
    pub fn from_parts(
        inner: tokenizers::Tokenizer,
        bos: Option<u32>,
        add_bos: bool,
        eos: Vec<u32>,
        template: Option<JinjaTemplate>,
    ) -> Self {
        HfTokenizer { inner, bos, add_bos, eos, template }
    }

    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// `tokenizer.json` through the tokenizers crate. It is a third-party parser of a downloaded
/// file, and 0.23.2 panics on some malformed ones (a syntax error inside `decoder` reaches an
/// `expect`; the fuzzer found it): a panic is an unreadable file like any other.
fn read_tokenizer_json(path: &Path) -> Result<tokenizers::Tokenizer> {
    infer_sdk::error::catch_panic("the tokenizers crate panicked", || {
        tokenizers::Tokenizer::from_file(path).map_err(|e| Error::config(path, format!("cannot parse tokenizer: {e}")))
    })
    .map_err(|e| e.into_reader_panic(|| format!("{}: cannot parse tokenizer", path.display())))
}

/// The tokenizers crate's work on a text: the checkpoint's `tokenizer.json` configures it, and
/// 0.23.2 panics on some configurations (a `Replace` normalizer whose pattern matches the empty
/// string indexes past its alignments). Such a panic is a tokenizer error, not a crash.
fn guarded<T>(f: impl FnOnce() -> tokenizers::Result<T>) -> Result<T> {
    infer_sdk::error::catch_panic("the tokenizers crate panicked", || f().map_err(|e| Error::Tokenizer(e.to_string())))
        .map_err(|e| match e {
            Error::Panic(m) => Error::Tokenizer(m),
            other => other,
        })
}

fn inner_token(t: &tokenizers::Tokenizer, id: Option<u32>) -> String {
    id.and_then(|i| t.id_to_token(i)).unwrap_or_default()
}

fn read_json_opt(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map(Some).map_err(|e| Error::config(path, format!("invalid JSON: {e}")))
}

impl Tokenizer for HfTokenizer {
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let enc = guarded(|| self.inner.encode(text, false))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if add_bos {
            if let Some(b) = self.bos {
                ids.push(b);
            }
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    fn encode_literal(&self, text: &str) -> Result<Vec<u32>> {
        // A copy that splits added tokens like any text; made only for content that needs it.
        let mut literal = self.inner.clone();
        literal.set_encode_special_tokens(true);
        let enc = guarded(|| literal.encode(text, false))?;
        Ok(enc.get_ids().to_vec())
    }

    fn contains_special_token(&self, text: &str) -> bool {
        self.inner.get_added_tokens_decoder().values().any(|t| !t.content.is_empty() && text.contains(&t.content))
    }

    fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        guarded(|| self.inner.decode(ids, skip_special))
    }

    fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    fn adds_bos(&self) -> bool {
        self.add_bos
    }

    fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    fn token_bytes(&self) -> Option<Vec<TokenBytes>> {
        crate::token_bytes::of_tokenizer(&self.inner)
    }
    fn chat_template(&self) -> Option<&dyn ChatTemplate> {
        self.template.as_ref().map(|t| t as &dyn ChatTemplate)
    }
}
