//! Voxtral-Mini-4B-Realtime (Mistral): streaming speech recognition.
//!
//! audio -> 16 kHz mono -> padding + log-mel ([`frontend`]) -> causal conv stem and sliding-window
//! encoder ([`encoder`]) -> frame stacking + projector ([`projector`]) -> one audio embedding per
//! 80 ms, summed with the previous token's embedding -> time-conditioned decoder ([`decoder`]) ->
//! one token per step ([`session`]). Both checkpoint layouts ([`checkpoint`]): Hugging Face and
//! Mistral-native. See docs/models/voxtral-realtime.md.

pub mod checkpoint;
pub mod config;
pub mod decoder;
pub mod encoder;
pub mod frontend;
pub mod model;
pub mod primed;
pub mod projector;
pub mod session;
pub mod text_stream;

pub use model::{VoxtralModel, VoxtralRealtime};
pub use session::{Session, Trace};

infer_core::register_model! {
    name: "voxtral-realtime",
    description: "Voxtral-Mini-4B-Realtime: streaming speech recognition (Hugging Face or Mistral layout)",
    architectures: [
        // Mistral's params.json names no model type: a Whisper-style audio encoder and a
        // time-conditioned (ada) decoder are this model.
        infer_core::plugin::Architecture::named("voxtral_realtime")
            .params_sections(infer_core::rstrs!["/multimodal/whisper_model_args", "/ada_rms_norm_t_cond"]),
    ],
    kinds: [infer_core::plugin::SpeechRecognition => VoxtralRealtime::load],
}
