//! A Hugging Face tokenizer folder: `tokenizer.json` (the `tokenizers` crate's reader),
//! `tokenizer_config.json` (BOS/EOS tokens, `add_bos_token`, the chat template) and
//! `generation_config.json` (EOS ids, the sampling defaults), read by `HfTokenizer::from_dir`
//! and `SamplingDefaults::from_generation_config`, then used: encode with and without special
//! tokens, decode, id maps, the chat template rendered with messages made of the text.
//! Input: the three files and a text, separated by NUL bytes (JSON never holds a raw NUL).
#![no_main]

use infer_core::text::generation_defaults::SamplingDefaults;
use infer_core::text::tokenizer::HfTokenizer;
use infer_core::{Message, Tokenizer};
use libfuzzer_sys::fuzz_target;

/// `HfTokenizer::from_dir` catches a panic inside the tokenizers crate's `tokenizer.json` reader
/// (0.23.2 `expect`s some inner parses) and returns an error.
const READERS: &[&str] = &["/tokenizers-"];

fuzz_target!(init: infer_fuzz::tolerate_upstream_panics(READERS), |data: &[u8]| {
    let mut parts = data.splitn(4, |&b| b == 0);
    let files = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"];
    let dir = infer_fuzz::scratch_dir().join("hf_tokenizer");
    std::fs::create_dir_all(&dir).expect("scratch checkpoint");
    for name in files {
        match parts.next() {
            Some(bytes) => std::fs::write(dir.join(name), bytes).expect("scratch file"),
            None => {
                let _ = std::fs::remove_file(dir.join(name));
            }
        }
    }
    let text = String::from_utf8_lossy(parts.next().unwrap_or_default());

    if let Ok(defaults) = SamplingDefaults::from_generation_config(&dir.join("generation_config.json")) {
        let _ = defaults.generate_config();
    }
    let Ok(tok) = HfTokenizer::from_dir(&dir) else { return };
    let Ok(ids) = tok.encode(&text, tok.adds_bos()) else { return };
    let _ = tok.encode_literal(&text);
    let _ = tok.contains_special_token(&text);
    let _ = tok.decode(&ids, false);
    let _ = tok.decode(&ids, true);
    let odd: Vec<u32> = text.bytes().map(|b| (b as u32) * 97).chain([u32::MAX, tok.vocab_size() as u32]).collect();
    let _ = tok.decode(&odd, false);
    for &id in odd.iter().take(8) {
        if let Some(t) = tok.id_to_token(id) {
            let _ = tok.token_to_id(&t);
        }
    }
    let _ = (tok.bos_id(), tok.eos_ids());
    if let Some(template) = tok.chat_template() {
        let messages: Vec<Message> = text
            .lines()
            .take(16)
            .enumerate()
            .map(|(i, l)| Message::new(["system", "user", "assistant"][i % 3], l))
            .collect();
        let _ = template.render(&messages, true);
    }
});
