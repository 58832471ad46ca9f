//! Voxtral Realtime configs in both layouts: Mistral's params.json (first byte even) or the
//! Hugging Face config.json (odd), loaded with the tiny fixture's weights and tekken.json.
#![no_main]

use infer_core::{DType, ModelLoadOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, config)) = data.split_first() else { return };
    let (name, fixture, replaced) = if pick & 1 == 0 {
        ("vxrt-mistral", "voxtral-realtime/mistral", "params.json")
    } else {
        ("vxrt-hf", "voxtral-realtime/hf", "config.json")
    };
    let dir = infer_fuzz::checkpoint_dir(name, &[(fixture, "")], replaced);
    std::fs::write(dir.join(replaced), config).expect("scratch config");
    let backend = infer_backend_candle::CandleBackend::backend().expect("candle CPU backend");
    let opts = ModelLoadOptions { dtype: DType::F32, context_len: 0, ..Default::default() };
    let _ = infer_voxtral_realtime::VoxtralRealtime::load(&dir, &backend, &opts);
});
