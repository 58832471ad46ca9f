//! A tokenizer built from GGUF metadata (`gpt2` byte-level BPE or `llama` SentencePiece), then
//! used: encode (with and without special-token parsing), decode, the chat template. The input
//! describes the vocabulary; candle's GGUF writer turns it into a file.
#![no_main]

use arbitrary::Arbitrary;
use candle_core::quantized::gguf_file::{self, Value};
use infer_core::text::gguf_tokenizer::tokenizer_from_gguf;
use infer_core::{GgufFile, Message};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Vocab {
    spm: bool,
    tokens: Vec<String>,
    types: Option<Vec<i32>>,
    scores: Option<Vec<f32>>,
    merges: Option<Vec<String>>,
    pre: Option<String>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: Option<bool>,
    add_space_prefix: Option<bool>,
    template: Option<String>,
    text: String,
    ids: Vec<u32>,
}

fuzz_target!(|v: Vocab| {
    let mut meta: Vec<(&str, Value)> = vec![
        ("tokenizer.ggml.model", Value::String(if v.spm { "llama" } else { "gpt2" }.into())),
        ("tokenizer.ggml.tokens", Value::Array(v.tokens.iter().cloned().map(Value::String).collect())),
    ];
    if let Some(t) = &v.types {
        meta.push(("tokenizer.ggml.token_type", Value::Array(t.iter().map(|&x| Value::I32(x)).collect())));
    }
    if let Some(s) = &v.scores {
        meta.push(("tokenizer.ggml.scores", Value::Array(s.iter().map(|&x| Value::F32(x)).collect())));
    }
    if let Some(m) = &v.merges {
        meta.push(("tokenizer.ggml.merges", Value::Array(m.iter().cloned().map(Value::String).collect())));
    }
    if let Some(p) = &v.pre {
        meta.push(("tokenizer.ggml.pre", Value::String(p.clone())));
    }
    if let Some(b) = v.bos {
        meta.push(("tokenizer.ggml.bos_token_id", Value::U32(b)));
    }
    if let Some(e) = v.eos {
        meta.push(("tokenizer.ggml.eos_token_id", Value::U32(e)));
    }
    if let Some(a) = v.add_bos {
        meta.push(("tokenizer.ggml.add_bos_token", Value::Bool(a)));
    }
    if let Some(a) = v.add_space_prefix {
        meta.push(("tokenizer.ggml.add_space_prefix", Value::Bool(a)));
    }
    if let Some(t) = &v.template {
        meta.push(("tokenizer.chat_template", Value::String(t.clone())));
    }
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let mut bytes = Vec::new();
    gguf_file::write(&mut std::io::Cursor::new(&mut bytes), &meta_refs, &[]).expect("candle writes GGUF");
    let path = infer_fuzz::scratch_file("tokenizer.gguf", &bytes);
    let g = GgufFile::open(&path).expect("a GGUF candle wrote opens");
    let Ok(tok) = tokenizer_from_gguf(&g) else { return };
    let _ = tok.encode(&v.text, true);
    let _ = tok.encode_literal(&v.text);
    let _ = tok.contains_special_token(&v.text);
    let _ = tok.decode(&v.ids, false);
    let _ = tok.decode(&v.ids, true);
    for &id in v.ids.iter().take(8) {
        if let Some(t) = tok.id_to_token(id) {
            let _ = tok.token_to_id(&t);
        }
    }
    if let Some(t) = tok.chat_template() {
        let _ = t.render(&[Message::new("system", "s"), Message::new("user", v.text.clone())], true);
    }
});
