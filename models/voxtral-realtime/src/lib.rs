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

infer_core::register_recognizer_model! {
    name: "voxtral-realtime",
    description: "Voxtral-Mini-4B-Realtime: streaming speech recognition (Hugging Face or Mistral layout)",
    architectures: ["voxtral_realtime"],
    load: VoxtralRealtime::load,
}
