//! Text -> codec frames: the talker emits each frame's first code, the code predictor the rest,
//! and the frame's summed codec embeddings (plus the next trailing text embedding) feed the next
//! talker step. Sampling follows qwen-tts / transformers: repetition penalty on the first codes
//! generated so far, the top 1024 talker ids suppressed except EOS, EOS barred for the first two
//! steps, then temperature / top-k / top-p; the code predictor samples with its own settings.

use infer_core::text::TokenizerConventions;
use infer_layers::text_formats::PRE_TOKENIZERS;
use std::path::Path;
use std::time::{Duration, Instant};

use infer_core::audio::{CodebookSampling, SpeechOptions};
use infer_core::text::sampling::Sampler;
use infer_core::{Backend, CancelToken, DType, Error, GenerateConfig, HfTokenizer, Result, Tokenizer, Weights};

use crate::code_predictor::CodePredictor;
use crate::config::Qwen3TtsConfig;
use crate::prompt::{self, InContext, PromptParts, SpeakerPrompt};
use crate::talker::Talker;

/// The talker ids at the top of the vocabulary reserved for control codes.
const CONTROL_IDS: usize = 1024;
/// transformers' `min_new_tokens` in qwen-tts: EOS is barred for the first steps.
const MIN_NEW_TOKENS: usize = 2;

pub struct CodeGenerator {
    pub cfg: Qwen3TtsConfig,
    pub tokenizer: HfTokenizer,
    pub talker: Talker,
    pub predictor: CodePredictor,
}

/// What to say and how.
pub struct CodeRequest<'a> {
    pub text: &'a str,
    /// `None` or "auto": the model decides.
    pub language: Option<&'a str>,
    pub speaker: SpeakerPrompt,
    /// Reference transcript and codes, for in-context cloning.
    pub in_context: Option<(&'a str, Vec<Vec<u32>>)>,
    /// The whole text in the prompt instead of one token per step.
    pub non_streaming: bool,
}

impl CodeGenerator {
    /// Loads the talker and code predictor, their linear weights quantized to `quant` when given
    /// (the matvecs of every frame then read a quarter (q8_0) of the f32 bytes).
    pub fn load(dir: &Path, backend: &Backend, dtype: DType, quant: Option<DType>) -> Result<Self> {
        let cfg = Qwen3TtsConfig::from_dir(dir)?;
        // Qwen's vocab.json + merges.txt: split as its tokenizer_class (Qwen2Tokenizer) says.
        let conventions = TokenizerConventions { pre_tokenizers: PRE_TOKENIZERS, ..Default::default() };
        let tokenizer = HfTokenizer::from_dir_with(dir, &conventions)?;
        let w = Weights::from_dir(dir, backend, dtype)?.with_linear_quant(quant)?;
        let t = w.prefixed("talker");
        Ok(CodeGenerator {
            talker: Talker::load(&t, &cfg.talker_config)?,
            predictor: CodePredictor::load(&t.prefixed("code_predictor"), &cfg.talker_config)?,
            cfg,
            tokenizer,
        })
    }

    pub fn num_codebooks(&self) -> usize {
        self.cfg.talker_config.num_code_groups
    }

    /// Languages the checkpoint names (dialects are chosen through speakers).
    pub fn languages(&self) -> Vec<String> {
        let mut l = vec!["auto".to_string()];
        l.extend(self.cfg.talker_config.codec_language_id.keys().filter(|k| !k.contains("dialect")).cloned());
        l
    }

    fn language_id(&self, language: Option<&str>) -> Result<Option<u32>> {
        match language.map(str::to_lowercase) {
            None => Ok(None),
            Some(l) if l == "auto" => Ok(None),
            Some(l) => self.cfg.talker_config.codec_language_id.get(&l).copied().map(Some).ok_or_else(|| {
                Error::invalid(format!("unknown language `{l}` (known: {})", self.languages().join(", ")))
            }),
        }
    }

    pub fn text_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(&format!("<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"), false)
    }

    /// Generates up to `options.max_frames` frames (`[codebook]` each). `on_frame` sees each frame
    /// as it is made; returning `false` (or cancelling) stops with [`Error::Cancelled`].
    pub fn generate(
        &self,
        req: &CodeRequest<'_>,
        options: &SpeechOptions,
        cancel: &CancelToken,
        on_frame: &mut dyn FnMut(&[u32]) -> bool,
    ) -> Result<Vec<Vec<u32>>> {
        if req.text.trim().is_empty() {
            return Err(Error::invalid("the text to speak is empty"));
        }
        let t = &self.cfg.talker_config;
        let text_ids = self.text_ids(req.text)?;
        let in_context = match &req.in_context {
            Some((transcript, codes)) => {
                self.check_codes(codes)?;
                let ref_ids =
                    self.tokenizer.encode(&format!("<|im_start|>assistant\n{transcript}<|im_end|>\n"), false)?;
                Some(InContext { ref_ids, ref_codes: codes.clone() })
            }
            None => None,
        };
        let started = Instant::now();
        let prompt = prompt::build(
            &self.cfg,
            &self.talker,
            &self.predictor,
            &PromptParts {
                text_ids: &text_ids,
                language_id: self.language_id(req.language)?,
                speaker: &req.speaker,
                in_context: in_context.as_ref(),
                non_streaming: req.non_streaming,
            },
        )?;

        let mut talker_sampler = Sampler::new(&GenerateConfig {
            temperature: options.temperature,
            top_k: options.top_k,
            top_p: options.top_p,
            repeat_penalty: options.repeat_penalty,
            seed: options.seed.into(),
            ..GenerateConfig::default()
        });
        let sub = options.codebook_sampling.unwrap_or(CodebookSampling {
            temperature: options.temperature,
            top_k: options.top_k,
            top_p: options.top_p,
        });
        let mut sub_sampler = Sampler::new(&GenerateConfig {
            temperature: sub.temperature,
            top_k: sub.top_k,
            top_p: sub.top_p,
            repeat_penalty: 1.0,
            seed: options.seed.map(|s| s.wrapping_add(1)).into(),
            ..GenerateConfig::default()
        });

        let eos = t.codec_eos_token_id;
        let vocab = self.talker.vocab;
        let suppressed = vocab.saturating_sub(CONTROL_IDS)..vocab;
        // The last first-code drawn is never expanded into a frame, as in qwen-tts.
        let max_tokens = options.max_frames + 1;

        let mut cache = self.talker.new_cache();
        let mut predictor_cache = self.predictor.new_cache();
        let (mut hidden, mut logits) = self.talker.forward(&prompt.prefill, &mut cache)?;
        // Where the time goes, for `INFER_LOG=infer_qwen3_tts=debug` (bench/tts_compare.sh).
        let prefill_time = started.elapsed();
        let (mut talker_time, mut predictor_time, mut callback_time) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let mut history: Vec<u32> = Vec::new();
        let mut frames: Vec<Vec<u32>> = Vec::new();
        loop {
            for (i, l) in logits.iter_mut().enumerate() {
                let barred_eos = i as u32 == eos && history.len() < MIN_NEW_TOKENS;
                if (suppressed.contains(&i) && i as u32 != eos) || barred_eos {
                    *l = f32::NEG_INFINITY;
                }
            }
            let first = talker_sampler.sample(&mut logits, &history);
            history.push(first);
            if first == eos || history.len() >= max_tokens {
                break;
            }
            let t0 = Instant::now();
            let first_embed = self.talker.codec_embed(&[first])?;
            let rest = self
                .predictor
                .predict(&hidden, &first_embed, &mut predictor_cache, &mut |_, l| sub_sampler.sample(l, &[]))?;
            let mut frame = Vec::with_capacity(rest.len() + 1);
            frame.push(first);
            frame.extend_from_slice(&rest);
            let t1 = Instant::now();
            predictor_time += t1 - t0;
            if frames.is_empty() {
                // The first frame's share of the time to first audio (bench/tts_ttfa.sh).
                tracing::debug!(
                    prefill_s = prefill_time.as_secs_f64(),
                    predictor_s = (t1 - t0).as_secs_f64(),
                    "qwen3-tts first frame"
                );
            }
            if !on_frame(&frame) || cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
            let t2 = Instant::now();
            callback_time += t2 - t1;

            let mut x = first_embed;
            for (g, &code) in rest.iter().enumerate() {
                x = x.add(&self.predictor.embed(g, &[code])?)?;
            }
            let step = frames.len();
            let text =
                if step < prompt.trailing.dim(1) { prompt.trailing.narrow(1, step, 1)? } else { prompt.pad.clone() };
            frames.push(frame);
            (hidden, logits) = self.talker.forward(&x.add(&text)?, &mut cache)?;
            talker_time += t2.elapsed();
        }
        tracing::debug!(
            frames = frames.len(),
            prompt_tokens = prompt.prefill.dim(1),
            prefill_s = prefill_time.as_secs_f64(),
            talker_steps_s = talker_time.as_secs_f64(),
            code_predictor_s = predictor_time.as_secs_f64(),
            on_frame_s = callback_time.as_secs_f64(),
            "qwen3-tts generation timing"
        );
        Ok(frames)
    }

    fn check_codes(&self, codes: &[Vec<u32>]) -> Result<()> {
        let n = self.num_codebooks();
        for (i, f) in codes.iter().enumerate() {
            if f.len() != n {
                return Err(Error::invalid(format!("reference frame {i} has {} codes, expected {n}", f.len())));
            }
            if f[0] as usize >= self.talker.vocab || f[1..].iter().any(|&c| c as usize >= self.predictor.vocab) {
                return Err(Error::invalid(format!("reference frame {i} has a code out of range")));
            }
        }
        Ok(())
    }
}
