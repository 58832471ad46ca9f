//! Qwen3-TTS (0.6B / 1.7B, 12 Hz): text -> codec codes (talker + code predictor) -> 24 kHz audio
//! (the 12 Hz codec), with voice cloning through the speaker encoder.

pub mod code_predictor;
pub mod codec;
pub mod config;
pub mod embed_decoder;
pub mod generator;
pub mod prompt;
pub mod speaker_encoder;
pub mod synthesizer;
pub mod talker;
pub mod voices;

pub use synthesizer::Qwen3Tts;

infer_core::register_speech_model! {
    name: "qwen3-tts",
    description: "Qwen3-TTS 0.6B / 1.7B (12 Hz): text to speech, voice presets and cloning",
    architectures: ["qwen3_tts"],
    load: Qwen3Tts::load,
}
