//! The one generation loop: serves every `CausalLm` (whatever architecture or backend) as a
//! [`TextModel`] — tokenizing, prefill/decode, sampling, stopping, streaming and metrics.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use abi_stable::std_types::{ROption, RSlice, RSliceMut};

use crate::grammar::{GrammarCompiler, TokenConstraint};
use crate::jinja_template::JinjaTemplate;
use crate::sampling::Sampler;
use infer_sdk::backend::lift;
use infer_sdk::text::causal_lm::CausalLmBox;
use infer_sdk::text::generation_defaults::SamplingDefaults;
use infer_sdk::text::kv_cache::{self, KvCache};
use infer_sdk::text::model::{TextModel, TokenStream};
use infer_sdk::text::sequence_batch::SequenceBatch;
use infer_sdk::text::tokenizer::{StreamDecoder, Tokenizer};
use infer_sdk::text::types::*;
use infer_sdk::ChatTemplate;
use infer_sdk::{Backend, DType, Error, Result, Tensor};

mod sequences;

/// Additive mask value for padding: large but finite, so fully masked rows stay NaN-free.
const MASKED: f32 = -1e30;

pub struct LlmEngine {
    lm: Option<CausalLmBox>,
    tokenizer: Arc<dyn Tokenizer>,
    backend: Backend,
    model_type: String,
    info: ModelInfo,
    context_len: usize,
    /// Storage dtype of the KV caches this engine makes (`None`: the compute dtype).
    kv_dtype: Option<DType>,
    add_bos: bool,
    /// A template replacing the tokenizer's (a caller's file, or the architecture's format).
    chat_template: Option<JinjaTemplate>,
    chat_origin: ChatTemplateOrigin,
    sampling: SamplingDefaults,
    metrics: Mutex<GenerateMetrics>,
    /// Built at the first constrained request (the vocabulary's token trie).
    grammar: OnceLock<std::result::Result<GrammarCompiler, String>>,
}

impl LlmEngine {
    pub fn new(
        lm: CausalLmBox,
        tokenizer: Arc<dyn Tokenizer>,
        backend: Backend,
        model_type: &str,
        context_len: usize,
        add_bos: bool,
    ) -> Self {
        let info = lm.info();
        let chat_origin =
            if tokenizer.chat_template().is_some() { ChatTemplateOrigin::Checkpoint } else { ChatTemplateOrigin::None };
        LlmEngine {
            lm: Some(lm),
            tokenizer,
            backend,
            model_type: model_type.to_string(),
            info,
            context_len,
            kv_dtype: None,
            add_bos,
            chat_template: None,
            chat_origin,
            sampling: SamplingDefaults::BUILT_IN,
            metrics: Mutex::new(GenerateMetrics::default()),
            grammar: OnceLock::new(),
        }
    }

    /// Uses `template` for `chat` instead of the tokenizer's own.
    pub fn with_chat_template(mut self, template: JinjaTemplate, origin: ChatTemplateOrigin) -> Self {
        self.chat_template = Some(template);
        self.chat_origin = origin;
        self
    }

    pub fn with_sampling_defaults(mut self, sampling: SamplingDefaults) -> Self {
        self.sampling = sampling;
        self
    }

    fn lm(&self) -> Result<&CausalLmBox> {
        self.lm.as_ref().ok_or_else(|| Error::invalid("model is closed"))
    }

    /// Caches keys and values as `dtype` (a float dtype; `None`: the compute dtype).
    pub fn with_kv_dtype(mut self, dtype: Option<DType>) -> Result<Self> {
        kv_cache::check_dtype(dtype)?;
        self.kv_dtype = dtype;
        Ok(self)
    }

    fn new_cache(&self) -> Result<KvCache> {
        let mut cache = lift(self.lm()?.new_cache(self.context_len))?;
        cache.set_dtype(self.kv_dtype)?;
        Ok(cache)
    }

    /// Forward of `ids` shaped (batch, seq); returns f32 logits and their shape.
    fn forward(
        &self,
        ids: &[u32],
        batch: usize,
        cache: &mut KvCache,
        mask: Option<&Tensor>,
        last_only: bool,
    ) -> Result<Tensor> {
        let seq = ids.len() / batch;
        let tokens = Tensor::from_u32(&self.backend, ids, &[batch, seq])?;
        let mask = match mask {
            Some(m) => ROption::RSome(m),
            None => ROption::RNone,
        };
        lift(self.lm()?.forward(&tokens, cache, mask, last_only))
    }

    /// One forward over several sequences packed back to back (`lens[i]` new tokens for
    /// `caches[i]`): each sequence's last-position logits.
    fn forward_packed(&self, ids: &[u32], lens: &[usize], caches: &mut [&mut KvCache]) -> Result<Vec<Vec<f32>>> {
        let tokens = Tensor::from_u32(&self.backend, ids, &[1, ids.len()])?;
        // The caches move into one slice for the call (the FFI takes a slice) and back after.
        let mut owned: Vec<KvCache> =
            caches.iter_mut().map(|c| std::mem::replace(&mut **c, KvCache::new([]))).collect();
        let result = self.lm().and_then(|lm| {
            lift(lm.forward_packed(&tokens, RSlice::from_slice(lens), RSliceMut::from_mut_slice(&mut owned)))
        });
        for (slot, cache) in caches.iter_mut().zip(owned) {
            **slot = cache;
        }
        let logits = result?;
        let vocab = logits.dim(-1);
        Ok(logits.to_vec_f32()?.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }

    fn check_prompt(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::invalid("empty prompt: nothing to condition on"));
        }
        let vocab = self.info.vocab_size;
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::invalid(format!("prompt token {bad} is outside the vocabulary (size {vocab})")));
        }
        let max = self.info.max_position_embeddings;
        if self.context_len == 0 && max > 0 && ids.len() > max {
            return Err(Error::invalid(format!(
                "prompt of {} tokens exceeds the model's context of {max} (set a context length to use a rotating cache)",
                ids.len()
            )));
        }
        Ok(())
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, self.add_bos)
    }

    fn record(&self, m: GenerateMetrics) {
        *self.metrics.lock().unwrap_or_else(|e| e.into_inner()) = m;
    }

    fn memory_metrics(&self, m: &mut GenerateMetrics) {
        let mem = self.backend.memory();
        m.peak_memory_bytes = mem.peak_bytes;
        m.active_memory_bytes = mem.active_bytes;
    }

    fn stream(&self, ids: Vec<u32>, cfg: &GenerateConfig) -> Result<TokenStream<'_>> {
        self.check_prompt(&ids)?;
        let cancel = CancelToken::new();
        let gen = Generation::new(self, ids, cfg.clone(), cancel.clone())?;
        Ok(TokenStream::new(Box::new(gen), cancel))
    }

    /// The matcher of `cfg`'s constraint, if it has one.
    fn constraint(&self, cfg: &GenerateConfig) -> Result<Option<TokenConstraint>> {
        let Some(c) = &cfg.constraint else { return Ok(None) };
        let compiler = self
            .grammar
            .get_or_init(|| {
                GrammarCompiler::new(self.tokenizer.as_ref(), self.info.vocab_size).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| Error::invalid(e.clone()))?;
        compiler.compile(c).map(Some)
    }

    fn stop_ids(&self, cfg: &GenerateConfig) -> Vec<u32> {
        let mut ids = cfg.stop_tokens.clone();
        if !cfg.ignore_eos {
            ids.extend_from_slice(self.tokenizer.eos_ids());
        }
        ids
    }
}

impl TextModel for LlmEngine {
    fn generate(&self, prompt: &str, cfg: &GenerateConfig) -> Result<TokenStream<'_>> {
        if prompt.is_empty() {
            return Err(Error::invalid("empty prompt: nothing to condition on"));
        }
        self.stream(self.encode(prompt)?, cfg)
    }

    fn generate_ids(&self, prompt: &[u32], cfg: &GenerateConfig) -> Result<TokenStream<'_>> {
        self.stream(prompt.to_vec(), cfg)
    }

    fn chat(&self, messages: &[Message], cfg: &GenerateConfig) -> Result<TokenStream<'_>> {
        self.stream(self.chat_ids(messages)?, cfg)
    }

    fn sequence_batch(&self) -> Result<Box<dyn SequenceBatch + '_>> {
        Ok(Box::new(sequences::EngineBatch::new(self)))
    }

    fn classify(&self, prompts: &[&str], cfg: &GenerateConfig, return_logits: bool) -> Result<Vec<ClassifyResult>> {
        let start = Instant::now();
        let encoded = prompts.iter().map(|p| self.encode(p)).collect::<Result<Vec<_>>>()?;
        encoded.iter().try_for_each(|ids| self.check_prompt(ids))?;
        // Right padding: under a causal mask, padding after a prompt cannot change its logits.
        let longest = encoded.iter().map(Vec::len).max().unwrap_or(0);
        let mut batch = Vec::with_capacity(encoded.len() * longest);
        for ids in &encoded {
            batch.extend_from_slice(ids);
            batch.extend(std::iter::repeat_n(0, longest - ids.len()));
        }
        let mut cache = self.new_cache()?;
        let logits = self.forward(&batch, encoded.len(), &mut cache, None, false)?;
        let vocab = logits.dim(-1);
        let all = logits.to_vec_f32()?;
        let mut sampler = Sampler::new(cfg);
        let mut out = Vec::with_capacity(encoded.len());
        for (row, ids) in encoded.iter().enumerate() {
            let at = (row * longest + ids.len() - 1) * vocab;
            let mut last = all[at..at + vocab].to_vec();
            let id = sampler.sample(&mut last.clone(), ids);
            let text = self.tokenizer.decode(&[id], false)?;
            if !return_logits {
                last = Vec::new();
            }
            out.push(ClassifyResult { token: Token { id, text }, logits: return_logits.then_some(last) });
        }
        let mut m = GenerateMetrics {
            prompt_tokens: encoded.iter().map(Vec::len).sum(),
            prefill_duration: start.elapsed(),
            total_duration: start.elapsed(),
            time_to_first_token: start.elapsed(),
            ..Default::default()
        };
        m.prefill_tokens_per_sec = per_sec(m.prompt_tokens, m.prefill_duration);
        self.memory_metrics(&mut m);
        self.record(m);
        Ok(out)
    }

    fn continuation_logits(&self, prompt: &[u32], continuation: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.check_prompt(prompt)?;
        if continuation.is_empty() {
            return Ok(Vec::new());
        }
        let mut cache = self.new_cache()?;
        let first = self.forward(prompt, 1, &mut cache, None, true)?.to_vec_f32()?;
        let vocab = first.len();
        let mut out = vec![first];
        let rest = &continuation[..continuation.len() - 1];
        if !rest.is_empty() {
            let all = self.forward(rest, 1, &mut cache, None, false)?.to_vec_f32()?;
            out.extend(all.chunks_exact(vocab).map(<[f32]>::to_vec));
        }
        Ok(out)
    }

    fn batch_generate(&self, prompts: &[&str], cfg: &GenerateConfig) -> Result<Vec<BatchResult>> {
        BatchGeneration::run(self, prompts, cfg)
    }

    fn metrics(&self) -> GenerateMetrics {
        self.metrics.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn info(&self) -> ModelInfo {
        self.info.clone()
    }

    fn model_type(&self) -> &str {
        &self.model_type
    }

    fn tokenizer(&self) -> &dyn Tokenizer {
        self.tokenizer.as_ref()
    }

    fn sampling_defaults(&self) -> SamplingDefaults {
        self.sampling.clone()
    }

    fn chat_template_origin(&self) -> ChatTemplateOrigin {
        self.chat_origin.clone()
    }

    fn chat_template(&self) -> Option<&dyn ChatTemplate> {
        self.chat_template.as_ref().map(|t| t as &dyn ChatTemplate).or_else(|| self.tokenizer.chat_template())
    }

    fn close(&mut self) {
        self.lm = None;
    }
}

fn per_sec(n: usize, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

/// One streamed generation: the iterator behind [`TokenStream`].
struct Generation<'a> {
    engine: &'a LlmEngine,
    cfg: GenerateConfig,
    cache: KvCache,
    sampler: Sampler,
    constraint: Option<TokenConstraint>,
    stop_ids: Vec<u32>,
    history: Vec<u32>,
    prompt_len: usize,
    /// Tokens of `history` already run through the model (and so in the cache).
    fed: usize,
    decoder: StreamDecoder,
    /// Text decoded but held back because it may begin a stop string.
    held: String,
    cancel: CancelToken,
    started: Instant,
    prefill: Option<Duration>,
    first_token: Option<Duration>,
    done: bool,
}

impl<'a> Generation<'a> {
    fn new(engine: &'a LlmEngine, prompt: Vec<u32>, cfg: GenerateConfig, cancel: CancelToken) -> Result<Self> {
        Ok(Generation {
            cache: engine.new_cache()?,
            sampler: Sampler::new(&cfg),
            constraint: engine.constraint(&cfg)?,
            stop_ids: engine.stop_ids(&cfg),
            prompt_len: prompt.len(),
            fed: 0,
            history: prompt,
            decoder: StreamDecoder::new(),
            held: String::new(),
            cancel,
            started: Instant::now(),
            prefill: None,
            first_token: None,
            done: false,
            engine,
            cfg,
        })
    }

    fn generated(&self) -> usize {
        self.history.len() - self.prompt_len
    }

    /// Runs the model on the tokens not yet in the cache and returns last-position logits.
    fn next_logits(&mut self) -> Result<Vec<f32>> {
        let ids = self.history[self.fed..].to_vec();
        let logits = self.engine.forward(&ids, 1, &mut self.cache, None, true)?;
        self.fed = self.history.len();
        let v = logits.to_vec_f32()?;
        if self.prefill.is_none() {
            self.prefill = Some(self.started.elapsed());
        }
        Ok(v)
    }

    fn step(&mut self) -> Result<Option<Token>> {
        if self.cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        if self.generated() >= self.cfg.max_tokens {
            return Ok(None);
        }
        let mut logits = self.next_logits()?;
        self.sampler.adjust(&mut logits, &self.history, &self.history[self.prompt_len..]);
        if let Some(c) = &mut self.constraint {
            c.mask(&mut logits)?;
        }
        let id = self.sampler.pick(&logits);
        if self.first_token.is_none() {
            self.first_token = Some(self.started.elapsed());
        }
        if self.stop_ids.contains(&id) {
            // Text held back as a possible stop-string prefix is output after all: the stop
            // token carries it (and is otherwise not emitted).
            if !self.held.is_empty() {
                self.done = true;
                return Ok(Some(Token { id, text: std::mem::take(&mut self.held) }));
            }
            return Ok(None);
        }
        self.history.push(id);
        let delta = self.decoder.push(self.engine.tokenizer.as_ref(), id)?;
        self.held.push_str(&delta);
        let (mut emit, stopped) = split_at_stop(&mut self.held, &self.cfg.stop_strings);
        let matched = match &mut self.constraint {
            Some(c) => c.accept(id)?,
            None => false,
        };
        if stopped {
            self.done = true;
        } else if matched || self.generated() >= self.cfg.max_tokens {
            // No token can follow to complete a stop string: release what was held.
            emit.push_str(&std::mem::take(&mut self.held));
            self.done |= matched;
        }
        Ok(Some(Token { id, text: emit }))
    }

    fn finish(&mut self) {
        if self.prefill.is_none() {
            return;
        }
        let total = self.started.elapsed();
        let prefill = self.prefill.unwrap_or_default();
        let generated = self.generated();
        let decode = total.saturating_sub(prefill);
        let mut m = GenerateMetrics {
            prompt_tokens: self.prompt_len,
            generated_tokens: generated,
            prefill_duration: prefill,
            decode_duration: decode,
            total_duration: total,
            time_to_first_token: self.first_token.unwrap_or(prefill),
            prefill_tokens_per_sec: per_sec(self.prompt_len, prefill),
            decode_tokens_per_sec: per_sec(generated.saturating_sub(1), decode),
            constraint_duration: self.constraint.as_ref().map_or(Duration::ZERO, TokenConstraint::spent),
            ..Default::default()
        };
        self.engine.memory_metrics(&mut m);
        self.engine.record(m);
        self.prefill = None;
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Token>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(tok)) => Some(Ok(tok)),
            Ok(None) => {
                self.done = true;
                self.finish();
                None
            }
            Err(e) => {
                self.done = true;
                self.finish();
                Some(Err(e))
            }
        }
    }
}

impl Drop for Generation<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Takes from `held` the text that can be emitted: everything before a complete stop string
/// (then `true`), or everything except a tail that could still grow into one.
fn split_at_stop(held: &mut String, stops: &[String]) -> (String, bool) {
    if let Some(pos) = stops.iter().filter(|s| !s.is_empty()).filter_map(|s| held.find(s.as_str())).min() {
        let emit = held[..pos].to_string();
        held.clear();
        return (emit, true);
    }
    let keep = stops
        .iter()
        .flat_map(|s| (1..s.len()).filter(|&n| s.is_char_boundary(n) && held.ends_with(&s[..n])))
        .max()
        .unwrap_or(0);
    let emit = held[..held.len() - keep].to_string();
    held.drain(..held.len() - keep);
    (emit, false)
}

/// Several prompts decoded together: left padding with a key mask keeps every row's relative
/// positions (and so its RoPE angles) as if it ran alone.
struct BatchGeneration;

impl BatchGeneration {
    fn run(engine: &LlmEngine, prompts: &[&str], cfg: &GenerateConfig) -> Result<Vec<BatchResult>> {
        let start = Instant::now();
        let encoded = prompts.iter().map(|p| engine.encode(p)).collect::<Result<Vec<_>>>()?;
        encoded.iter().try_for_each(|ids| engine.check_prompt(ids))?;
        let n = encoded.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let longest = encoded.iter().map(Vec::len).max().unwrap_or(0);
        let pads: Vec<usize> = encoded.iter().map(|ids| longest - ids.len()).collect();
        let mut ids = Vec::with_capacity(n * longest);
        for (row, p) in encoded.iter().enumerate() {
            ids.extend(std::iter::repeat_n(0, pads[row]));
            ids.extend_from_slice(p);
        }
        let stop_ids = engine.stop_ids(cfg);
        let mut cache = engine.new_cache()?;
        let mut samplers: Vec<Sampler> = (0..n).map(|_| Sampler::new(cfg)).collect();
        let mut constraints = (0..n).map(|_| engine.constraint(cfg)).collect::<Result<Vec<_>>>()?;
        let mut histories = encoded.clone();
        let mut outputs: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut finished = vec![false; n];
        let mut prefill = None;
        let mut step_ids = ids;
        for _ in 0..cfg.max_tokens {
            let tq = step_ids.len() / n;
            let tk = cache.offset() + tq;
            let mask = padding_mask(&engine.backend, &pads, tq, tk)?;
            let logits = engine.forward(&step_ids, n, &mut cache, Some(&mask), true)?;
            prefill.get_or_insert(start.elapsed());
            let vocab = logits.dim(-1);
            let all = logits.to_vec_f32()?;
            step_ids = Vec::with_capacity(n);
            for row in 0..n {
                let mut last = all[row * vocab..(row + 1) * vocab].to_vec();
                samplers[row].adjust(&mut last, &histories[row], &outputs[row]);
                // A finished row's constraint may allow nothing more: it only pads from here.
                if let (false, Some(c)) = (finished[row], &mut constraints[row]) {
                    c.mask(&mut last)?;
                }
                let id = samplers[row].pick(&last);
                if !finished[row] {
                    if stop_ids.contains(&id) {
                        finished[row] = true;
                    } else {
                        outputs[row].push(id);
                        histories[row].push(id);
                        if let Some(c) = &mut constraints[row] {
                            finished[row] = c.accept(id)?;
                        }
                    }
                }
                step_ids.push(id);
            }
            if finished.iter().all(|&f| f) {
                break;
            }
        }
        let results = outputs
            .into_iter()
            .map(|out| {
                let mut dec = StreamDecoder::new();
                let tokens = out
                    .into_iter()
                    .map(|id| Ok(Token { id, text: dec.push(engine.tokenizer.as_ref(), id)? }))
                    .collect::<Result<Vec<_>>>();
                match tokens {
                    Ok(tokens) => BatchResult { tokens, error: None },
                    Err(e) => BatchResult { tokens: Vec::new(), error: Some(e.to_string()) },
                }
            })
            .collect();
        let total = start.elapsed();
        let prefill = prefill.unwrap_or(total);
        let mut m = GenerateMetrics {
            prompt_tokens: encoded.iter().map(Vec::len).sum(),
            prefill_duration: prefill,
            decode_duration: total - prefill,
            total_duration: total,
            time_to_first_token: prefill,
            constraint_duration: constraints.iter().flatten().map(TokenConstraint::spent).sum(),
            ..Default::default()
        };
        m.prefill_tokens_per_sec = per_sec(m.prompt_tokens, prefill);
        engine.memory_metrics(&mut m);
        engine.record(m);
        Ok(results)
    }
}

/// Additive (batch, 1, tq, tk) mask hiding each row's left padding.
fn padding_mask(backend: &Backend, pads: &[usize], tq: usize, tk: usize) -> Result<Tensor> {
    let mut m = vec![0f32; pads.len() * tq * tk];
    for (row, &pad) in pads.iter().enumerate() {
        for q in 0..tq {
            let base = (row * tq + q) * tk;
            m[base..base + pad].fill(MASKED);
        }
    }
    Tensor::from_f32(backend, &m, &[pads.len(), 1, tq, tk])
}

#[cfg(test)]
mod tests {
    use super::split_at_stop;

    #[test]
    fn stop_strings_hold_back_prefixes() {
        let stops = vec!["END".to_string()];
        let mut held = "hello E".to_string();
        assert_eq!(split_at_stop(&mut held, &stops), ("hello ".to_string(), false));
        assert_eq!(held, "E");
        held.push_str("NDx");
        assert_eq!(split_at_stop(&mut held, &stops), (String::new(), true));
        let mut held = "no stop".to_string();
        assert_eq!(split_at_stop(&mut held, &[]), ("no stop".to_string(), false));
    }
}
