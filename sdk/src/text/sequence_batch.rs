//! Continuous batching: independent sequences advanced together, one step at a time.
//!
//! A [`SequenceBatch`] holds the sequences a server is decoding. Each has its own KV cache
//! (and so its own positions), sampling settings and stop conditions; the batch runs one forward
//! per [`SequenceBatch::step`] for all of them, so a new sequence joins at the next step boundary
//! and a finished or removed one frees its place at once. Greedy output does not depend on what
//! else is in the batch: rows never see each other (attention is per sequence) and the row-wise
//! ops compute a row the same way whatever the row count.

use crate::text::types::{GenerateConfig, Token};
use crate::{Error, Result};

/// Names a sequence inside its batch.
pub type SeqId = u64;

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence id or a stop string.
    Stop,
    /// `max_tokens` generated, or the context is full.
    Length,
}

impl FinishReason {
    /// The OpenAI API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// Log-probabilities at one step: the log-softmax of the logits the token was drawn from, after
/// the repeat, presence and frequency penalties and the logit bias, before temperature and
/// truncation (top-k/p, min-p), so they do not depend on the temperature.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// The generated id's.
    pub logprob: f32,
    /// The most likely ids and theirs, most likely first (as many as the config asked for).
    pub top: Vec<(u32, f32)>,
}

/// What one step produced for one sequence.
#[derive(Debug)]
pub enum SeqEvent {
    /// A generated token; its text may be empty (a partial character, or text held back because
    /// it may begin a stop string).
    /// `logprobs` when the sequence's config asked for them.
    Token { seq: SeqId, token: Token, logprobs: Option<TokenLogprobs> },
    /// The sequence ended and left the batch.
    Finished { seq: SeqId, reason: FinishReason, prompt_tokens: usize, completion_tokens: usize },
    /// The sequence failed and left the batch.
    Failed { seq: SeqId, error: Error },
}

pub trait SequenceBatch: Send {
    /// Adds a sequence with these prompt ids; it is prefilled at the next step.
    fn add(&mut self, prompt: Vec<u32>, cfg: &GenerateConfig) -> Result<SeqId>;
    /// Drops a sequence (client gone) and frees its cache; `false` when it was not there.
    fn remove(&mut self, seq: SeqId) -> bool;
    /// Sequences in the batch.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// One forward for every sequence in the batch: a token (or its end) for each.
    fn step(&mut self) -> Vec<SeqEvent>;
    /// Puts back a sequence that was running in another batch (one whose step failed): its
    /// `prompt`, the ids it had `generated` and its original `cfg`. The batch recomputes them as
    /// they were first computed (the prompt as a prefill, then each generated id as one decode
    /// step, reporting nothing for them), so the sequence goes on with the tokens, the sampler
    /// state and the held-back text it would have had. Batches that cannot replay say so.
    fn resume(&mut self, prompt: Vec<u32>, generated: &[u32], cfg: &GenerateConfig) -> Result<SeqId> {
        let _ = (prompt, generated, cfg);
        Err(Error::unsupported("this batch cannot resume sequences"))
    }
}
