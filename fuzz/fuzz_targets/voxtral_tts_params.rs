//! Voxtral TTS `params.json` (Mistral's format, comma-separated codec stage lists), loaded with
//! the tiny fixture's weights, tekken.json and voices beside it.
#![no_main]

use infer_core::{DType, ModelLoadOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = infer_fuzz::checkpoint_dir("voxtral-tts", &[("voxtral-tts/small", "")], "params.json");
    std::fs::write(dir.join("params.json"), data).expect("scratch params");
    let _ = infer_voxtral_tts::config::VoxtralTtsConfig::from_json(&String::from_utf8_lossy(data));
    let backend = infer_backend_candle::CandleBackend::backend().expect("candle CPU backend");
    let opts = ModelLoadOptions { dtype: DType::F32, context_len: 0, ..Default::default() };
    let _ = infer_voxtral_tts::VoxtralTts::load(&dir, &backend, &opts);
});
