//! Text embeddings from a decoder: a sentence-transformers folder's pipeline (`modules.json`:
//! Transformer, Pooling, Normalize) around a [`CausalDecoder`](infer_layers::CausalDecoder)'s
//! final hidden states. The folder's metadata says how to pool and whether to normalise
//! ([`sentence_transformers`]); [`pooling`] does it; [`embedder`] runs a batch in one packed
//! forward.

pub mod embedder;
pub mod pooling;
pub mod sentence_transformers;

pub use embedder::DecoderEmbedder;
pub use pooling::Pooling;
pub use sentence_transformers::SentenceConfig;
