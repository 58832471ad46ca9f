//! infer-text: the text runtime. The generation engine that turns a plugin's
//! [`CausalLm`](infer_sdk::CausalLm) into a [`TextModel`](infer_sdk::TextModel) (sampling,
//! stopping, streaming, continuous batching), the tokenizers (Hugging Face `tokenizer.json`,
//! GGUF vocabularies, SentencePiece, Mistral Tekken) and Jinja chat templates.

pub(crate) mod byte_bpe;
pub mod conventions;
pub mod engine;
pub mod gguf_tokenizer;
pub mod grammar;
pub mod hf_tokenizer;
pub mod jinja_template;
pub mod piece_table;
mod py_json;
pub mod sampling;
pub mod spm;
pub mod tekken;
mod token_bytes;

pub use conventions::TokenizerConventions;
pub use hf_tokenizer::HfTokenizer;
pub use jinja_template::JinjaTemplate;
