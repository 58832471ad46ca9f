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

use codec::Codec12Hz;

/// The codec on its own (`speech_tokenizer/` of a checkpoint, or Qwen3-TTS-Tokenizer-12Hz).
fn load_codec(
    dir: &std::path::Path,
    backend: &infer_core::Backend,
    options: &infer_core::ModelLoadOptions,
) -> infer_core::Result<Codec12Hz> {
    options.refuse_quant("the Qwen3-TTS codec")?;
    Codec12Hz::load(dir, backend, options.dtype)
}

infer_core::register_model! {
    name: "qwen3-tts-codec",
    description: "Qwen3-TTS-Tokenizer-12Hz: 24 kHz audio <-> 16 codebooks at 12.5 frames a second",
    architectures: [infer_core::plugin::Architecture::named("qwen3_tts_tokenizer_12hz")],
    kinds: [infer_core::plugin::AudioCodecKind => load_codec],
}

infer_core::register_model! {
    name: "qwen3-tts",
    description: "Qwen3-TTS 0.6B / 1.7B (12 Hz): text to speech, voice presets and cloning",
    architectures: [infer_core::plugin::Architecture::named("qwen3_tts")],
    kinds: [infer_core::plugin::SpeechSynthesis => Qwen3Tts::load],
}
