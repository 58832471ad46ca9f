//! A `tekken.json` (Mistral's tokenizer, both Voxtral models): parsing and checks, then encoding
//! and decoding with it. Input: the JSON text, then (after a NUL byte) text to encode whose bytes
//! also serve as ids to decode.
#![no_main]

use infer_core::text::tekken::Tekken;
use infer_core::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (json, text) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(json) = std::str::from_utf8(json) else { return };
    let Ok(tok) = Tekken::from_json(json) else { return };
    let text = String::from_utf8_lossy(text);
    let ids = tok.encode(&text, true).expect("tekken encodes any text");
    let _ = tok.decode(&ids, false);
    let odd: Vec<u32> = text.bytes().map(|b| (b as u32) * 131).collect();
    let _ = tok.decode(&odd, true);
    for &id in odd.iter().take(8) {
        if let Some(t) = tok.id_to_token(id) {
            let _ = tok.token_to_id(&t);
        }
        let _ = tok.regular_bytes(id);
    }
    let _ = tok.audio_section();
    let _ = (tok.special_id("[AUDIO]"), tok.bos_id(), tok.eos_ids());
});
