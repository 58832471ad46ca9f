//! `TextModel`: what a host application calls (mirrors go-inference's TextModel).

use crate::text::chat_prompt::{chat_prompt_ids, conversation_prompt, ChatPrompt};
use crate::text::chat_template::ChatTemplate;
use crate::text::conversation::Conversation;
use crate::text::generation_defaults::SamplingDefaults;
use crate::text::sequence_batch::SequenceBatch;
use crate::text::tokenizer::Tokenizer;
use crate::text::types::{
    BatchResult, CancelToken, ChatTemplateOrigin, ClassifyResult, GenerateConfig, GenerateMetrics, Message, ModelInfo,
    Token,
};
use crate::{Error, Result};

pub trait TextModel: Send + Sync {
    /// Streams the continuation of `prompt` (encoded with the model's BOS convention).
    fn generate(&self, prompt: &str, cfg: &GenerateConfig) -> Result<TokenStream<'_>>;
    /// Streams the continuation of already-tokenized input.
    fn generate_ids(&self, prompt: &[u32], cfg: &GenerateConfig) -> Result<TokenStream<'_>>;
    /// Formats `messages` with the model's chat template and streams the assistant's reply.
    /// Message content is literal text: special-token strings in it are not control tokens.
    fn chat(&self, messages: &[Message], cfg: &GenerateConfig) -> Result<TokenStream<'_>>;
    /// One batched prefill; samples (per `cfg`) the next token of each prompt.
    fn classify(&self, prompts: &[&str], cfg: &GenerateConfig, return_logits: bool) -> Result<Vec<ClassifyResult>>;
    /// Generates for several prompts at once, one forward per step for the whole batch.
    fn batch_generate(&self, prompts: &[&str], cfg: &GenerateConfig) -> Result<Vec<BatchResult>>;
    /// Teacher-forced next-token logits: entry `i` is the (f32, vocab-sized) distribution the
    /// model predicts for `continuation[i]` after `prompt` and `continuation[..i]`. For
    /// evaluation: perplexity, or comparing decisions with another implementation step by step.
    fn continuation_logits(&self, prompt: &[u32], continuation: &[u32]) -> Result<Vec<Vec<f32>>>;
    /// Metrics of the most recent completed operation.
    fn metrics(&self) -> GenerateMetrics;
    fn info(&self) -> ModelInfo;
    /// The checkpoint's architecture name, e.g. `qwen3`.
    fn model_type(&self) -> &str;
    fn tokenizer(&self) -> &dyn Tokenizer;
    /// The sampling the checkpoint asks for when a caller sets none (`GenerateConfig::default()`
    /// itself is greedy).
    fn sampling_defaults(&self) -> SamplingDefaults;
    /// Where the template `chat` uses came from.
    fn chat_template_origin(&self) -> ChatTemplateOrigin;
    /// Releases weights and caches now rather than at drop.
    fn close(&mut self);

    /// The template `chat` renders with: the tokenizer's (the checkpoint's) unless the model
    /// was given another (a caller's file, or the architecture's built-in format).
    fn chat_template(&self) -> Option<&dyn ChatTemplate> {
        self.tokenizer().chat_template()
    }

    /// The prompt ids [`TextModel::chat`] generates from: `messages` in the model's chat
    /// template, ending with the assistant's turn opener; message content read as literal text.
    fn chat_ids(&self, messages: &[Message]) -> Result<Vec<u32>> {
        chat_prompt_ids(self.tokenizer(), self.required_chat_template()?, messages)
    }

    /// [`TextModel::chat_ids`] for a conversation with tools, tool calls and results, or
    /// template switches, with the rendered text.
    fn conversation_prompt(&self, conversation: &Conversation) -> Result<ChatPrompt> {
        conversation_prompt(self.tokenizer(), self.required_chat_template()?, conversation)
    }

    /// [`TextModel::chat_template`], or the error saying there is none.
    fn required_chat_template(&self) -> Result<&dyn ChatTemplate> {
        self.chat_template().ok_or_else(|| {
            Error::unsupported(
                "this checkpoint has no chat template and its architecture no built-in format: give one with --chat-template FILE",
            )
        })
    }

    /// Independent sequences decoded together, one forward per step (continuous batching, for
    /// servers). Models that cannot batch say so.
    fn sequence_batch(&self) -> Result<Box<dyn SequenceBatch + '_>> {
        Err(Error::unsupported(format!("{} cannot batch sequences", self.model_type())))
    }
}

/// A stream of generated tokens. Dropping it stops generation; so does its [`CancelToken`],
/// from any thread. After the stream ends, `error()` tells why it ended early, if it did.
pub struct TokenStream<'a> {
    inner: Box<dyn Iterator<Item = Result<Token>> + Send + 'a>,
    cancel: CancelToken,
}

impl<'a> TokenStream<'a> {
    pub fn new(inner: Box<dyn Iterator<Item = Result<Token>> + Send + 'a>, cancel: CancelToken) -> Self {
        TokenStream { inner, cancel }
    }

    pub fn cancel_token(&self) -> CancelToken {
        self.cancel.clone()
    }

    /// Drains the stream into its tokens.
    pub fn collect_tokens(self) -> Result<Vec<Token>> {
        self.collect()
    }

    /// Drains the stream into the generated text.
    pub fn collect_text(self) -> Result<String> {
        let mut s = String::new();
        for t in self {
            s.push_str(&t?.text);
        }
        Ok(s)
    }
}

impl Iterator for TokenStream<'_> {
    type Item = Result<Token>;
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next()
    }
}
