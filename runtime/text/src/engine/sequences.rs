//! The engine's [`SequenceBatch`]: each sequence keeps its own KV cache, sampler, stop state and
//! text decoder; a step runs one forward over the new tokens of all of them.

use std::collections::VecDeque;

use crate::grammar::TokenConstraint;
use crate::sampling::{token_logprobs, Sampler};
use infer_sdk::text::kv_cache::KvCache;
use infer_sdk::text::sequence_batch::{FinishReason, SeqEvent, SeqId, SequenceBatch};
use infer_sdk::text::tokenizer::StreamDecoder;
use infer_sdk::text::types::{GenerateConfig, Token};
use infer_sdk::{Error, Result};

use super::{split_at_stop, LlmEngine};

pub(super) struct EngineBatch<'a> {
    engine: &'a LlmEngine,
    seqs: Vec<Sequence>,
    next_id: SeqId,
}

struct Sequence {
    id: SeqId,
    cfg: GenerateConfig,
    cache: KvCache,
    sampler: Sampler,
    constraint: Option<TokenConstraint>,
    stop_ids: Vec<u32>,
    history: Vec<u32>,
    prompt_len: usize,
    /// Tokens of `history` already in the cache.
    fed: usize,
    decoder: StreamDecoder,
    /// Decoded text held back because it may begin a stop string.
    held: String,
    /// Ids a resumed sequence had generated in its old batch: fed back one a step, in place of
    /// what the sampler picks, without events (the client has their text).
    replay: VecDeque<u32>,
}

impl<'a> EngineBatch<'a> {
    pub(super) fn new(engine: &'a LlmEngine) -> Self {
        EngineBatch { engine, seqs: Vec::new(), next_id: 0 }
    }

    /// Positions a sequence may reach: the model's trained context unless a context length
    /// (a rotating cache) was set.
    fn max_positions(&self) -> usize {
        match (self.engine.context_len, self.engine.info.max_position_embeddings) {
            (0, max) if max > 0 => max,
            _ => usize::MAX,
        }
    }

    /// Last-position logits of every sequence after feeding it its pending tokens.
    fn forward_all(&mut self) -> Result<Vec<Vec<f32>>> {
        let mut ids = Vec::new();
        let mut lens = Vec::with_capacity(self.seqs.len());
        for s in &self.seqs {
            ids.extend_from_slice(&s.history[s.fed..]);
            lens.push(s.history.len() - s.fed);
        }
        let mut caches: Vec<&mut KvCache> = self.seqs.iter_mut().map(|s| &mut s.cache).collect();
        let logits = self.engine.forward_packed(&ids, &lens, &mut caches)?;
        for s in &mut self.seqs {
            s.fed = s.history.len();
        }
        Ok(logits)
    }
}

impl Sequence {
    /// Samples from `logits` and advances: the event to report and whether the sequence ended.
    fn advance(&mut self, engine: &LlmEngine, mut logits: Vec<f32>, max_positions: usize) -> Result<Vec<SeqEvent>> {
        // The sampler runs on replayed steps too, so a seeded one draws what it drew before.
        self.sampler.adjust(&mut logits, &self.history, &self.history[self.prompt_len..]);
        if let Some(c) = &mut self.constraint {
            c.mask(&mut logits)?;
        }
        let sampled = self.sampler.pick(&logits);
        let replayed = self.replay.pop_front();
        let id = replayed.unwrap_or(sampled);
        if replayed.is_none() && self.stop_ids.contains(&id) {
            return Ok(vec![self.finished(FinishReason::Stop)]);
        }
        self.history.push(id);
        // Replayed ids advance the matcher too: it must stand where the old batch left it.
        let matched = match &mut self.constraint {
            Some(c) => c.accept(id)?,
            None => false,
        };
        let delta = self.decoder.push(engine.tokenizer.as_ref(), id)?;
        self.held.push_str(&delta);
        let (emit, stopped) = split_at_stop(&mut self.held, &self.cfg.stop_strings);
        if replayed.is_some() {
            // Sent from the old batch; the held-back text stays held, as it was there.
            return Ok(Vec::new());
        }
        let generated = self.history.len() - self.prompt_len;
        let ending = if stopped || matched {
            Some(FinishReason::Stop)
        } else if generated >= self.cfg.max_tokens || self.history.len() >= max_positions {
            Some(FinishReason::Length)
        } else {
            None
        };
        // A length stop, or a complete match, releases the text held back for a stop string
        // that never completed.
        let text = if matched && !stopped || ending == Some(FinishReason::Length) {
            emit + &std::mem::take(&mut self.held)
        } else {
            emit
        };
        let logprobs = self.cfg.logprobs.map(|n| token_logprobs(&logits, id, n));
        let mut events = vec![SeqEvent::Token { seq: self.id, token: Token { id, text }, logprobs }];
        events.extend(ending.map(|r| self.finished(r)));
        Ok(events)
    }

    fn finished(&self, reason: FinishReason) -> SeqEvent {
        SeqEvent::Finished {
            seq: self.id,
            reason,
            prompt_tokens: self.prompt_len,
            completion_tokens: self.history.len() - self.prompt_len,
        }
    }

    fn ended(events: &[SeqEvent]) -> bool {
        events.iter().any(|e| matches!(e, SeqEvent::Finished { .. } | SeqEvent::Failed { .. }))
    }
}

impl SequenceBatch for EngineBatch<'_> {
    fn add(&mut self, prompt: Vec<u32>, cfg: &GenerateConfig) -> Result<SeqId> {
        self.engine.check_prompt(&prompt)?;
        if cfg.max_tokens == 0 {
            return Err(Error::invalid("max_tokens must be at least 1"));
        }
        if prompt.len() >= self.max_positions() {
            return Err(Error::invalid(format!(
                "prompt of {} tokens leaves no room to generate in the model's context of {}",
                prompt.len(),
                self.max_positions()
            )));
        }
        let id = self.next_id;
        let constraint = self.engine.constraint(cfg)?;
        self.next_id += 1;
        self.seqs.push(Sequence {
            id,
            cache: self.engine.new_cache()?,
            sampler: Sampler::new(cfg),
            constraint,
            stop_ids: self.engine.stop_ids(cfg),
            prompt_len: prompt.len(),
            history: prompt,
            fed: 0,
            decoder: StreamDecoder::new(),
            held: String::new(),
            replay: VecDeque::new(),
            cfg: cfg.clone(),
        });
        Ok(id)
    }

    fn resume(&mut self, prompt: Vec<u32>, generated: &[u32], cfg: &GenerateConfig) -> Result<SeqId> {
        if generated.len() >= cfg.max_tokens {
            return Err(Error::invalid("the sequence had generated all its tokens"));
        }
        let id = self.add(prompt, cfg)?;
        let s = self.seqs.last_mut().expect("just added");
        s.replay = generated.iter().copied().collect();
        Ok(id)
    }

    fn remove(&mut self, seq: SeqId) -> bool {
        let before = self.seqs.len();
        self.seqs.retain(|s| s.id != seq);
        self.seqs.len() != before
    }

    fn len(&self) -> usize {
        self.seqs.len()
    }

    fn step(&mut self) -> Vec<SeqEvent> {
        if self.seqs.is_empty() {
            return Vec::new();
        }
        let logits = match self.forward_all() {
            Ok(l) => l,
            // A failed forward leaves every cache in an unknown state: all its sequences end.
            Err(e) => {
                let message = e.to_string();
                return self
                    .seqs
                    .drain(..)
                    .map(|s| SeqEvent::Failed { seq: s.id, error: Error::Located(message.clone()) })
                    .collect();
            }
        };
        let max_positions = self.max_positions();
        let mut events = Vec::new();
        let mut keep = Vec::with_capacity(self.seqs.len());
        for (mut s, l) in std::mem::take(&mut self.seqs).into_iter().zip(logits) {
            let produced = s
                .advance(self.engine, l, max_positions)
                .unwrap_or_else(|error| vec![SeqEvent::Failed { seq: s.id, error }]);
            if !Sequence::ended(&produced) {
                keep.push(s);
            }
            events.extend(produced);
        }
        self.seqs = keep;
        events
    }
}
