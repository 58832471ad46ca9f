//! Text generation: the `TextModel` API, the `CausalLm` plugin contract, tokenizers, chat
//! templates, KV caches, sampling and the generation loop.

pub(crate) mod byte_bpe;
pub mod causal_lm;
pub mod chat_formats;
pub mod chat_prompt;
pub mod chat_template;
pub mod engine;
pub mod generation_defaults;
pub mod gguf_tokenizer;
pub mod kv_cache;
pub mod model;
pub mod piece_table;
pub mod sampling;
pub mod sequence_batch;
pub mod spm;
pub mod tekken;
pub mod tokenizer;
pub mod types;
