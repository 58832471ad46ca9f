//! Voxtral-4B-TTS (`mistralai/Voxtral-4B-TTS-2603`): text -> one frame per backbone step (a
//! semantic code from the Mistral backbone's hidden state, acoustic codes by flow matching with
//! classifier-free guidance) -> 24 kHz audio (the conv + windowed-transformer codec), with preset
//! voices. Matches mlx-audio 0.6.2 on the real repository layout.

pub mod acoustic_head;
pub mod backbone;
pub mod codec;
pub mod config;
pub mod generator;
pub mod names;
pub mod prompt;
pub mod sanitize;
pub mod synthesizer;
pub mod voices;

pub use synthesizer::VoxtralTts;

infer_core::register_model! {
    name: "voxtral-tts",
    description: "Voxtral-4B-TTS: text to speech with preset voices (flow-matching acoustic head, 24 kHz codec)",
    architectures: [
        // Mistral's params.json names no model type: a backbone with a flow-matching acoustic
        // transformer is this model.
        infer_core::plugin::Architecture::named("voxtral_tts")
            .params_sections(infer_core::rstrs!["/multimodal/audio_model_args/acoustic_transformer_args"]),
    ],
    kinds: [infer_core::plugin::SpeechSynthesis => VoxtralTts::load],
}
