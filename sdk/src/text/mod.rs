//! Text contracts: the `TextModel` API hosts call, the `CausalLm` contract a decoder plugin
//! implements, tokenizers, chat templates and KV caches. The generation loop that turns a
//! `CausalLm` into a `TextModel` lives in the text runtime.

pub mod causal_lm;
pub mod chat_prompt;
pub mod chat_template;
pub mod conversation;
pub mod generation_defaults;
pub mod kv_cache;
pub mod model;
pub mod sequence_batch;
pub mod tokenizer;
pub mod types;
