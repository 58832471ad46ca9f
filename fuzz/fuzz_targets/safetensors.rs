//! A safetensors file: the header checks of the weight index (truncation, offsets, dtype and
//! byte-count agreement), reading every tensor onto the candle backend, and the architecture
//! guess that reads tensor names from the header of a config without `model_type`.
#![no_main]

use infer_core::checkpoint_info::CheckpointInfo;
use infer_core::{DType, Weights};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = infer_fuzz::scratch_dir().join("safetensors");
    std::fs::create_dir_all(&dir).expect("scratch checkpoint");
    let path = dir.join("model.safetensors");
    std::fs::write(&path, data).expect("scratch file");
    std::fs::write(dir.join("config.json"), "{}").expect("scratch config");
    let _ = CheckpointInfo::inspect(&dir);
    let backend = infer_backend_candle::CandleBackend::backend().expect("candle CPU backend");
    let Ok(w) = Weights::from_file(&path, &backend, DType::F32) else { return };
    let names: Vec<String> = w.names().map(String::from).collect();
    for name in names {
        if let Ok(t) = w.get(&name) {
            let _ = w.get_shaped(&name, &t.dims().to_vec());
        }
    }
});
