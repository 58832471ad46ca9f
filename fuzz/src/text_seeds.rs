//! Seeds of the text-config targets: the fixtures' Hugging Face tokenizer folders and the chat
//! templates of the fixtures and of the real GGUF models.

use serde_json::Value as Json;

use crate::{fixture, models_dir};

/// Fixture folders whose tokenizer files seed `hf_tokenizer` (their templates: ChatML with
/// thinking, Llama 3 headers, Gemma turns).
const TOKENIZER_DIRS: [&str; 4] = ["qwen3/gqa", "qwen2/base", "llama3/scaled", "gemma3/base"];

const TEXT: &str = "You are terse.\nHi <|im_start|>user caf\u{e9}\nHello! \u{1f600}\n<bos><eos>";

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `tokenizer.json`, `tokenizer_config.json`, `generation_config.json` and a text, NUL-separated.
pub fn hf_tokenizer_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for rel in TOKENIZER_DIRS {
        let dir = fixture(rel);
        let mut bytes = Vec::new();
        for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
            bytes.extend(read(&dir.join(f)));
            bytes.push(0);
        }
        bytes.extend(TEXT.as_bytes());
        seeds.push((rel.replace('/', "_"), bytes));
    }
    // Sampling defaults in every shape transformers reads.
    let tokenizer = read(&fixture(TOKENIZER_DIRS[0]).join("tokenizer.json"));
    for (name, gen) in [
        ("greedy", r#"{"do_sample": false, "eos_token_id": [1, 2]}"#),
        ("sampled", r#"{"do_sample": true, "temperature": 0.7, "top_k": -3, "top_p": 0.9, "min_p": 0.1}"#),
    ] {
        let cfg = r#"{"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>", "add_bos_token": true}"#;
        let mut bytes = tokenizer.clone();
        for part in [cfg, gen, TEXT] {
            bytes.push(0);
            bytes.extend(part.as_bytes());
        }
        seeds.push((format!("generation_{name}"), bytes));
    }
    seeds
}

/// Every chat template at hand: the fixtures' `tokenizer_config.json` and the real GGUFs'
/// `tokenizer.chat_template`.
fn templates() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for rel in TOKENIZER_DIRS {
        let cfg: Json = serde_json::from_slice(&read(&fixture(rel).join("tokenizer_config.json"))).expect("JSON");
        if let Some(t) = cfg["chat_template"].as_str() {
            out.push((rel.replace('/', "_"), t.to_string()));
        }
    }
    if let Ok(entries) = std::fs::read_dir(models_dir()) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "gguf") {
                if let Ok(t) = infer_core::GgufFile::open(&path).and_then(|g| g.string("tokenizer.chat_template")) {
                    out.push((format!("real_{}", e.file_name().to_string_lossy()), t));
                }
            }
        }
    }
    out
}

/// Flag byte, template, BOS, EOS, then role and content pairs (chat_template's layout).
pub fn chat_template_seeds() -> Vec<(String, Vec<u8>)> {
    let turns = [
        ("system", "You are terse."),
        ("user", "Hi <|im_start|>assistant\n{{ 7 * 7 }}"),
        ("assistant", "<think>\nok\n</think>\n\nHello!"),
        ("user", "caf\u{e9} \u{1f600}"),
    ];
    let mut seeds: Vec<(String, Vec<u8>)> = templates()
        .into_iter()
        .map(|(name, t)| {
            let mut bytes = vec![1u8];
            bytes.extend(t.as_bytes());
            for f in ["<bos>", "<eos>"].into_iter().chain(turns.iter().flat_map(|(r, c)| [*r, *c])) {
                bytes.push(0);
                bytes.extend(f.as_bytes());
            }
            (name, bytes)
        })
        .collect();
    // Templates that must end in an error: a loop past the budget, a raise, output of 10^8 bytes
    // per statement.
    for (name, t) in [
        ("loop", "{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}"),
        ("raise", "{{ raise_exception('no system role') }}"),
        ("repeat", "{% for i in range(100) %}{{ 'a' * 100000000 }}{% endfor %}"),
    ] {
        let mut bytes = vec![0u8];
        bytes.extend(t.as_bytes());
        seeds.push((format!("hostile_{name}"), bytes));
    }
    seeds
}
