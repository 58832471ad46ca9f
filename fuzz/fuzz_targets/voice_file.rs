//! A Voxtral TTS preset voice: a `torch.save` `.pt` (zip + pickle, read through candle's pickle
//! reader) or a `.safetensors`, checked to be `[N, dim]` and turned into a tensor. Input: one byte
//! picking the kind, two bytes of `dim`, the file.
#![no_main]

use infer_core::DType;
use infer_voxtral_tts::voices::read_voice;
use libfuzzer_sys::fuzz_target;

/// `read_voice` catches a panic inside candle's pickle reader (LONG1 longer than 8 bytes
/// overflows a shift in this checked build) and returns an error.
const PICKLE_READER: &[&str] = &["/src/pickle.rs"]; // candle-core's; no other crate here has one

fuzz_target!(init: infer_fuzz::tolerate_upstream_panics(PICKLE_READER), |data: &[u8]| {
    let [kind, d0, d1, file @ ..] = data else { return };
    let name = if kind & 1 == 0 { "voice.pt" } else { "voice.safetensors" };
    let path = infer_fuzz::scratch_file(name, file);
    let dim = u16::from_le_bytes([*d0, *d1]) as usize;
    let Ok(rows) = read_voice(&path, dim) else { return };
    let backend = infer_backend_candle::CandleBackend::backend().expect("candle CPU backend");
    let _ = rows.tensor(&backend, DType::F32);
});
