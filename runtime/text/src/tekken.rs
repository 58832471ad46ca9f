//! Mistral's Tekken tokenizer (`tekken.json`), shared by Voxtral TTS and Voxtral Realtime.
//!
//! Tekken is tiktoken-style byte-level BPE: the file lists every regular token's bytes by rank,
//! and encoding splits text with the file's regex, then merges byte pairs by rank. The BPE itself
//! is tiktoken's (the `tiktoken-rs` crate); this file maps tekken.json onto it as
//! mistral-common 1.13 does (`Tekkenizer.from_file`):
//!
//! - ids `0..num_special` are special tokens (`<unk>`, `<s>`, `</s>`, `[INST]`, `[AUDIO]`, ...);
//!   regular token `r` has id `r + num_special`. Files older than v7 without a `special_tokens`
//!   list get mistral-common's built-in list; missing ranks are `<SPECIAL_{id}>` fillers.
//! - the regular vocabulary is cut to `default_vocab_size - default_num_special_tokens`.
//! - encoding never recognises special tokens written in the text (special ids are only ever
//!   added by the prompt builder), so user text cannot forge `[BEGIN_AUDIO]`.
//! - decoding decodes each run of regular ids to UTF-8 with replacement; special ids are
//!   dropped (`skip_special`) or written as their names.

use std::collections::HashMap;
use std::path::Path;

use base64::Engine as _;
use serde::Deserialize;
use tiktoken_rs::CoreBPE;

use infer_sdk::ChatTemplate;
use infer_sdk::{Error, Result};
use infer_sdk::{TokenBytes, Tokenizer};

/// The special tokens mistral-common assumes for files (≤ v7) that do not list their own.
const LEGACY_SPECIALS: [&str; 20] = [
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
];

/// Versions mistral-common knows, in order; files newer than v7 must list their special tokens.
const VERSIONS: [&str; 7] = ["v1", "v2", "v3", "v7", "v11", "v13", "v15"];

#[derive(Deserialize)]
struct TekkenFile {
    config: TekkenConfig,
    vocab: Vec<VocabEntry>,
    special_tokens: Option<Vec<SpecialEntry>>,
    audio: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct TekkenConfig {
    pattern: String,
    default_vocab_size: usize,
    default_num_special_tokens: usize,
    version: String,
}

#[derive(Deserialize)]
struct VocabEntry {
    rank: usize,
    token_bytes: String,
}

#[derive(Deserialize)]
struct SpecialEntry {
    rank: usize,
    token_str: String,
}

/// A loaded `tekken.json`.
pub struct Tekken {
    bpe: CoreBPE,
    /// Bytes of each regular token, by rank.
    token_bytes: Vec<Vec<u8>>,
    /// Regular token bytes -> rank.
    ranks: HashMap<Vec<u8>, u32>,
    /// Name of each special id, by id.
    specials: Vec<String>,
    special_ids: HashMap<String, u32>,
    eos: Vec<u32>,
    audio: Option<serde_json::Value>,
}

impl Tekken {
    /// Loads `path` (a tekken.json), with errors that name the file and what is wrong.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_json(&text).map_err(|e| match e {
            Error::Tokenizer(m) => Error::config(path, m),
            other => other,
        })
    }

    /// Parses the contents of a tekken.json.
    pub fn from_json(text: &str) -> Result<Self> {
        let bad = |m: String| Error::Tokenizer(m);
        let file: TekkenFile = serde_json::from_str(text).map_err(|e| bad(format!("not a tekken.json: {e}")))?;
        let cfg = &file.config;
        let version = VERSIONS
            .iter()
            .position(|v| *v == cfg.version)
            .ok_or_else(|| bad(format!("unknown tekken version `{}` (known: {})", cfg.version, VERSIONS.join(", "))))?;
        let num_special = cfg.default_num_special_tokens;
        if num_special == 0 || cfg.default_vocab_size <= num_special {
            return Err(bad(format!(
                "default_vocab_size {} must exceed default_num_special_tokens {num_special} (> 0)",
                cfg.default_vocab_size
            )));
        }
        let num_regular = cfg.default_vocab_size - num_special;
        if file.vocab.len() < num_regular {
            return Err(bad(format!(
                "vocab has {} tokens, fewer than default_vocab_size - default_num_special_tokens = {num_regular}",
                file.vocab.len()
            )));
        }

        let specials = special_names(file.special_tokens.as_deref(), version, num_special).map_err(bad)?;
        let special_ids: HashMap<String, u32> =
            specials.iter().enumerate().map(|(id, name)| (name.clone(), id as u32)).collect();

        let b64 = base64::engine::general_purpose::STANDARD;
        let mut token_bytes = Vec::with_capacity(num_regular);
        for (i, entry) in file.vocab.iter().take(num_regular).enumerate() {
            if entry.rank != i {
                return Err(bad(format!("vocab entry {i} has rank {} (ranks must count up from 0)", entry.rank)));
            }
            let bytes = b64
                .decode(&entry.token_bytes)
                .map_err(|e| bad(format!("vocab entry {i}: token_bytes is not base64 ({e})")))?;
            // Ranks 0..256 are the single bytes, so every byte string has an encoding.
            if i < 256 && bytes != [i as u8] {
                return Err(bad(format!("vocab entry {i} must be the single byte {i:#04x}")));
            }
            token_bytes.push(bytes);
        }
        if num_regular < 256 {
            return Err(bad(format!("the regular vocabulary ({num_regular}) must hold the 256 single bytes")));
        }
        let ranks: HashMap<Vec<u8>, u32> =
            token_bytes.iter().enumerate().map(|(rank, bytes)| (bytes.clone(), rank as u32)).collect();
        if ranks.len() != token_bytes.len() {
            return Err(bad("vocab lists the same token bytes twice".into()));
        }
        let bpe = CoreBPE::new(ranks.iter().map(|(b, r)| (b.clone(), *r)).collect(), Default::default(), &cfg.pattern)
            .map_err(|e| bad(format!("config.pattern is not a valid regex: {e}")))?;
        let eos = special_ids.get("</s>").copied().into_iter().collect();
        Ok(Tekken { bpe, token_bytes, ranks, specials, special_ids, eos, audio: file.audio })
    }

    /// Id of a special token by name (`[BEGIN_AUDIO]`, `[STREAMING_PAD]`, ...).
    pub fn special_id(&self, name: &str) -> Option<u32> {
        self.special_ids.get(name).copied()
    }

    /// Number of special ids; regular tokens start here.
    pub fn num_special_tokens(&self) -> usize {
        self.specials.len()
    }

    /// The raw `audio` object of tekken.json (sampling_rate, frame_rate, audio_encoding_config,
    /// transcription_delay_ms, voice_num_audio_tokens, ...), for the audio models to read.
    pub fn audio_section(&self) -> Option<&serde_json::Value> {
        self.audio.as_ref()
    }

    /// Whether `id` is a special token.
    pub fn is_special(&self, id: u32) -> bool {
        (id as usize) < self.specials.len()
    }

    /// Ids of `text` without BOS, never parsing special tokens out of it.
    pub fn encode_text(&self, text: &str) -> Vec<u32> {
        let offset = self.specials.len() as u32;
        self.bpe.encode_ordinary(text).into_iter().map(|r| r + offset).collect()
    }

    /// The bytes of a regular token (`None` for special and out-of-range ids), for decoders that
    /// emit text as it is decided and must not split a UTF-8 character.
    pub fn regular_bytes(&self, id: u32) -> Option<&[u8]> {
        let rank = (id as usize).checked_sub(self.specials.len())?;
        self.token_bytes.get(rank).map(Vec::as_slice)
    }
}

/// The special-token names by id: the file's list, else (≤ v7) mistral-common's legacy list,
/// padded with `<SPECIAL_{id}>` fillers to `num_special`.
fn special_names(
    listed: Option<&[SpecialEntry]>,
    version: usize,
    num_special: usize,
) -> std::result::Result<Vec<String>, String> {
    let mut names: Vec<Option<String>> = vec![None; num_special];
    match listed {
        Some(list) => {
            for s in list {
                let slot = names.get_mut(s.rank).ok_or_else(|| {
                    format!(
                        "special token {} has rank {} outside default_num_special_tokens {num_special}",
                        s.token_str, s.rank
                    )
                })?;
                if slot.is_some() {
                    return Err(format!("two special tokens have rank {}", s.rank));
                }
                *slot = Some(s.token_str.clone());
            }
        }
        None if version <= 3 => {
            for (slot, name) in names.iter_mut().zip(LEGACY_SPECIALS) {
                *slot = Some(name.to_string());
            }
        }
        None => return Err("tekken.json lists no special_tokens (required after v7)".into()),
    }
    let names: Vec<String> =
        names.into_iter().enumerate().map(|(id, n)| n.unwrap_or_else(|| format!("<SPECIAL_{id}>"))).collect();
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(format!("special token {dup} is listed twice"));
    }
    Ok(names)
}

impl Tokenizer for Tekken {
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if add_bos {
            ids.extend(self.bos_id());
        }
        ids.extend(self.encode_text(text));
        Ok(ids)
    }

    fn encode_literal(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.encode_text(text))
    }

    /// Never: Tekken reads no special token out of text.
    fn contains_special_token(&self, _text: &str) -> bool {
        false
    }

    fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut out = String::new();
        let mut run: Vec<u8> = Vec::new();
        for &id in ids {
            if let Some(bytes) = self.regular_bytes(id) {
                run.extend_from_slice(bytes);
                continue;
            }
            // Each run of regular tokens is decoded on its own, as mistral-common does.
            out.push_str(&String::from_utf8_lossy(&run));
            run.clear();
            match self.specials.get(id as usize) {
                Some(name) if !skip_special => out.push_str(name),
                Some(_) => {}
                None => {
                    return Err(Error::Tokenizer(format!("id {id} is outside the vocabulary ({})", self.vocab_size())))
                }
            }
        }
        out.push_str(&String::from_utf8_lossy(&run));
        Ok(out)
    }

    fn vocab_size(&self) -> usize {
        self.specials.len() + self.token_bytes.len()
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.special_id(token).or_else(|| self.ranks.get(token.as_bytes()).map(|r| r + self.specials.len() as u32))
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        match self.regular_bytes(id) {
            Some(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            None => self.specials.get(id as usize).cloned(),
        }
    }

    fn bos_id(&self) -> Option<u32> {
        self.special_id("<s>")
    }

    fn adds_bos(&self) -> bool {
        true
    }

    fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    fn token_bytes(&self) -> Option<Vec<TokenBytes>> {
        let specials = self.specials.iter().map(|name| TokenBytes::Special(name.clone()));
        Some(specials.chain(self.token_bytes.iter().map(|b| TokenBytes::Text(b.clone()))).collect())
    }
    fn chat_template(&self) -> Option<&dyn ChatTemplate> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tekken.json with the 256 bytes, a few merges and `extra` special tokens listed.
    fn tiny(special_tokens: Option<&str>, version: &str) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for m in ["he", "ll", "hell", "hello", " w", "or", " wor", " world"] {
            vocab.push(m.as_bytes().to_vec());
        }
        let entries: Vec<String> = vocab
            .iter()
            .enumerate()
            .map(|(i, b)| format!(r#"{{"rank": {i}, "token_bytes": "{}", "token_str": null}}"#, b64.encode(b)))
            .collect();
        let specials = special_tokens.map(|s| format!(r#""special_tokens": {s},"#)).unwrap_or_default();
        format!(
            r#"{{"config": {{"pattern": "[^\\r\\n\\p{{L}}\\p{{N}}]?\\p{{L}}+|\\p{{N}}| ?[^\\s\\p{{L}}\\p{{N}}]+[\\r\\n]*|\\s+(?!\\S)|\\s+",
               "num_vocab_tokens": {n}, "default_vocab_size": {v}, "default_num_special_tokens": 30, "version": "{version}"}},
               {specials} "vocab": [{}]}}"#,
            entries.join(","),
            n = vocab.len(),
            v = vocab.len() + 30,
        )
    }

    #[test]
    fn legacy_specials_offset_and_merges() {
        let t = Tekken::from_json(&tiny(None, "v3")).unwrap();
        assert_eq!(t.num_special_tokens(), 30);
        assert_eq!(t.bos_id(), Some(1));
        assert_eq!(t.eos_ids(), &[2]);
        assert_eq!(t.special_id("<SPECIAL_25>"), Some(25));
        let hello = 30 + 256 + 3;
        let world = 30 + 256 + 7;
        assert_eq!(t.encode("hello world", true).unwrap(), vec![1, hello, world]);
        // Special names in text are plain text.
        let ids = t.encode_text("[INST]");
        assert!(ids.iter().all(|&i| i >= 30), "{ids:?}");
        assert_eq!(t.decode(&[1, hello, 4, world], true).unwrap(), "hello world");
        assert_eq!(t.decode(&[1, hello, 4, world], false).unwrap(), "<s>hello[/INST] world");
        assert_eq!(t.token_to_id("hello"), Some(hello));
        assert_eq!(t.id_to_token(world).as_deref(), Some(" world"));
        let bytes = t.token_bytes().unwrap();
        assert_eq!(bytes.len(), t.vocab_size());
        assert_eq!(bytes[1], TokenBytes::Special("<s>".into()));
        assert_eq!(bytes[world as usize], TokenBytes::Text(b" world".to_vec()));
        assert_eq!(bytes[30 + 0x41], TokenBytes::Text(b"A".to_vec()));
    }

    #[test]
    fn listed_specials_and_bad_files() {
        let listed = r#"[{"rank": 0, "token_str": "<unk>", "is_control": true},
                         {"rank": 1, "token_str": "<s>", "is_control": true},
                         {"rank": 2, "token_str": "</s>", "is_control": true},
                         {"rank": 24, "token_str": "[AUDIO]", "is_control": true}]"#;
        let t = Tekken::from_json(&tiny(Some(listed), "v13")).unwrap();
        assert_eq!(t.special_id("[AUDIO]"), Some(24));
        assert_eq!(t.special_id("<SPECIAL_3>"), Some(3));
        let e = Tekken::from_json(&tiny(None, "v13")).err().unwrap().to_string();
        assert!(e.contains("special_tokens"), "{e}");
        let e = Tekken::from_json(&tiny(None, "v99")).err().unwrap().to_string();
        assert!(e.contains("unknown tekken version"), "{e}");
        let e = Tekken::from_json("{}").err().unwrap().to_string();
        assert!(e.contains("not a tekken.json"), "{e}");
    }

    #[test]
    fn split_multibyte_characters_decode_with_replacement() {
        let t = Tekken::from_json(&tiny(None, "v3")).unwrap();
        let ids = t.encode_text("é");
        assert_eq!(ids.len(), 2, "two single bytes");
        assert_eq!(t.decode(&ids, true).unwrap(), "é");
        // A special token between the two bytes splits the runs, as in mistral-common.
        assert_eq!(t.decode(&[ids[0], 5, ids[1]], true).unwrap(), "\u{FFFD}\u{FFFD}");
    }
}
