//! Qwen3-TTS configs: the talker's config.json (first byte even) or the 12 Hz codec's (odd),
//! loaded with the tiny fixture weights beside them (model + `speech_tokenizer/`).
#![no_main]

use infer_core::{DType, ModelLoadOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, config)) = data.split_first() else { return };
    // The fixture's speech_tokenizer/ is the codec fixture (a link), linked in with the rest.
    let parts = [("qwen3-tts/small", "")];
    let (name, replaced) =
        if pick & 1 == 0 { ("tts-talker", "config.json") } else { ("tts-codec", "speech_tokenizer/config.json") };
    let dir = infer_fuzz::checkpoint_dir(name, &parts, replaced);
    std::fs::write(dir.join(replaced), config).expect("scratch config");
    let backend = infer_backend_candle::CandleBackend::backend().expect("candle CPU backend");
    let opts = ModelLoadOptions { dtype: DType::F32, context_len: 0, ..Default::default() };
    let _ = infer_qwen3_tts::Qwen3Tts::load(&dir, &backend, &opts);
});
