//! One transcription: audio in, text out, offline or streaming (the same code).
//!
//! The decoder reads two streams at once. Position `p` gets the audio embedding of the `p`-th
//! 80 ms of the padded audio plus the embedding of a text token: the prompt
//! (`<s>` + `[STREAMING_PAD]` × (32 left-pad + delay tokens)) for the first positions, then the
//! token the decoder chose at `p - 1`. So the decoder runs one step per 80 ms of audio, `delay`
//! tokens behind it, and each step commits one token (a control token or text).
//!
//! A session starts from its delay's [`Primed`] state: the left padding's tokens already encoded
//! and their prompt positions in the decoder's cache. Pushed audio becomes log-mel frames as
//! soon as their samples are in, frames become audio embeddings a token (8 frames) at a time,
//! and each new embedding runs one decoder step (the rest of the prompt's audio is encoded in
//! one batch once it is all in); at most [`CHUNK_TOKENS`] tokens
//! (or the prompt's, if more) are in flight, so a push of an hour of audio runs in bounded memory,
//! and the caches hold a sliding window, so a session runs for an hour at constant memory.
//! `finish` appends the reference's right padding. Like transformers' `generate`, the decoder stops
//! at `</s>` and never runs the last position (the sequence is as long as the padded audio).

use std::sync::Arc;
use std::time::Instant;

use infer_core::audio::{RecognitionMetrics, RecognitionSession, TranscriptDelta};
use infer_core::text::sampling::argmax;
use infer_core::{Error, KvCache, Result, Tensor};

use crate::encoder::EncoderState;
use crate::frontend::LogMelStream;
use crate::model::VoxtralModel;
use crate::primed::{prompt, Primed};
use crate::text_stream::TextStream;

/// Tokens (of 80 ms) encoded per batch.
const CHUNK_TOKENS: usize = 32;

/// Intermediate values of a session, kept for parity tests.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    /// Log-mel frames, row-major `(frame, mel)`.
    pub mel: Vec<f32>,
    /// Encoder output, row-major `(frame, hidden)`.
    pub encoder: Vec<f32>,
    /// Audio embeddings, row-major `(token, hidden)`.
    pub projector: Vec<f32>,
    /// Logits of every decoder step that chose a token.
    pub logits: Vec<Vec<f32>>,
}

pub struct Session {
    model: Arc<VoxtralModel>,
    mel: LogMelStream,
    /// Frames not yet encoded, row-major `(frame, mel)`.
    pending_mel: Vec<f32>,
    encoder: EncoderState,
    cache: KvCache,
    ada_scales: Vec<Tensor>,
    prompt: Vec<u32>,
    delay_tokens: usize,
    /// The padding's share, done before the session (its first `tokens` prompt positions).
    primed: Arc<Primed>,
    /// Audio embeddings of the prompt positions after the primed ones, until the prompt is
    /// complete.
    prefill: Vec<Tensor>,
    /// Audio positions produced so far.
    audio_pos: usize,
    last_token: Option<u32>,
    tokens: Vec<u32>,
    text: TextStream,
    max_tokens: usize,
    /// Samples pushed (before padding).
    samples_in: usize,
    /// Length of the padded sequence, known once the audio has ended.
    total_positions: Option<usize>,
    /// No more tokens: `</s>`, the token bound, or the end of the audio.
    done: bool,
    finished: bool,
    metrics: RecognitionMetrics,
    trace: Option<Trace>,
}

impl Session {
    pub(crate) fn new(model: Arc<VoxtralModel>, delay_ms: f64, max_tokens: usize) -> Result<Self> {
        let s = &model.stream;
        let delay_tokens = s.delay_tokens(delay_ms);
        let primed = model.primed(delay_tokens)?;
        // The padding's frames: those the primed state has encoded are done, the rest wait.
        let mut mel = LogMelStream::new(s, model.params.log_mel_max)?;
        let pending_mel = mel.ready_frames(None)?.split_off(primed.mel.len());
        Ok(Session {
            mel,
            pending_mel,
            encoder: primed.encoder.detached()?,
            cache: primed.cache.detached()?,
            ada_scales: model.decoder.ada_scales(&model.backend, model.dtype, delay_tokens)?,
            prompt: prompt(&model, delay_tokens),
            delay_tokens,
            audio_pos: primed.tokens,
            primed,
            prefill: Vec::new(),
            last_token: None,
            tokens: Vec::new(),
            text: TextStream::default(),
            max_tokens,
            samples_in: 0,
            total_positions: None,
            done: false,
            finished: false,
            metrics: RecognitionMetrics::default(),
            trace: None,
            model,
        })
    }

    /// Keeps the log-mel, encoder and projector outputs and every step's logits (call it before
    /// the first push).
    pub fn with_trace(mut self) -> Self {
        let p = &self.primed;
        self.trace = Some(Trace {
            mel: [&p.mel[..], &self.pending_mel].concat(),
            encoder: p.encoder_out.clone(),
            projector: p.projector.clone(),
            logits: Vec::new(),
        });
        self
    }

    pub fn trace(&self) -> Option<&Trace> {
        self.trace.as_ref()
    }

    /// The prompt the decoder is fed first.
    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    pub fn delay_tokens(&self) -> usize {
        self.delay_tokens
    }

    /// Every token generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Encodes the ready mel frames (up to `limit` in total) and decodes their positions.
    fn advance(&mut self, limit: Option<usize>, out: &mut TranscriptDelta) -> Result<()> {
        let frames = self.mel.ready_frames(limit)?;
        if let Some(t) = &mut self.trace {
            t.mel.extend_from_slice(&frames);
        }
        self.pending_mel.extend(frames);
        let n_mels = self.mel.n_mels();
        let per_token = self.model.stream.mels_per_token() * n_mels;
        // No token can be chosen before the prompt's last position has its audio: encoding each
        // push on its own until then would read the encoder's weights once per 80 ms for nothing
        // (a streamed first token took 7 encoder passes). Wait for the prompt's audio, or the end
        // of the stream, and encode it in one batch.
        let prompt_left = self.prompt.len().saturating_sub(self.audio_pos);
        if limit.is_none() && self.pending_mel.len() / per_token < prompt_left {
            return Ok(());
        }
        while self.pending_mel.len() >= per_token && !self.done {
            let batch = CHUNK_TOKENS.max(self.prompt.len().saturating_sub(self.audio_pos));
            let tokens = (self.pending_mel.len() / per_token).min(batch);
            let frames = tokens * per_token / n_mels;
            let started = Instant::now();
            let m = &self.model;
            let mel = Tensor::from_f32(&m.backend, &self.pending_mel[..tokens * per_token], &[1, frames, n_mels])?
                .to_dtype(m.dtype)?
                .transpose(1, 2)?
                .contiguous()?;
            self.pending_mel.drain(..tokens * per_token);
            let encoded = m.encoder.forward(&mut self.encoder, &mel)?;
            let audio = m.projector.forward(&encoded)?;
            if let Some(t) = &mut self.trace {
                t.encoder.extend(encoded.to_dtype(infer_core::DType::F32)?.to_vec_f32()?);
                t.projector.extend(audio.to_dtype(infer_core::DType::F32)?.to_vec_f32()?);
            }
            self.metrics.encoder_seconds += started.elapsed().as_secs_f64();
            let started = Instant::now();
            for j in 0..tokens {
                self.decode_position(&audio.narrow(1, j, 1)?, out)?;
                if self.done {
                    break;
                }
            }
            self.metrics.decoder_seconds += started.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Feeds one audio position to the decoder (the whole prompt once its last position is in).
    fn decode_position(&mut self, audio: &Tensor, out: &mut TranscriptDelta) -> Result<()> {
        let p = self.audio_pos;
        self.audio_pos += 1;
        // The sequence is as long as the padded audio: its last position is never fed.
        if self.total_positions.is_some_and(|n| p + 1 >= n) {
            self.done = true;
            return Ok(());
        }
        let m = self.model.clone();
        let prompt_len = self.prompt.len();
        if p + 1 < prompt_len {
            self.prefill.push(audio.clone());
            return Ok(());
        }
        let x = if p + 1 == prompt_len {
            self.prefill.push(audio.clone());
            let parts: Vec<&Tensor> = self.prefill.iter().collect();
            let audio = Tensor::concat(&parts, 1)?;
            self.prefill.clear();
            audio.add(&m.decoder.embed(&self.prompt[self.primed.tokens..])?)?
        } else {
            let last = self.last_token.ok_or_else(|| Error::backend("decoder step without a previous token"))?;
            audio.add(&m.decoder.embed(&[last])?)?
        };
        let logits = m.decoder.forward(&x, &mut self.cache, &self.ada_scales)?;
        let token = argmax(&logits);
        if let Some(t) = &mut self.trace {
            t.logits.push(logits);
        }
        self.tokens.push(token);
        self.last_token = Some(token);
        out.tokens.push(token);
        out.text.push_str(&self.text.push(&m.tekken, token));
        if token == m.eos || (self.max_tokens > 0 && self.tokens.len() >= self.max_tokens) {
            self.done = true;
        }
        Ok(())
    }

    fn finish_metrics(&mut self, started: Instant) {
        let wall = started.elapsed().as_secs_f64();
        let m = &mut self.metrics;
        m.wall_seconds += wall;
        m.max_chunk_seconds = m.max_chunk_seconds.max(wall);
        m.audio_seconds = self.samples_in as f64 / self.model.stream.sample_rate as f64;
        m.real_time_factor = if m.audio_seconds > 0.0 { m.wall_seconds / m.audio_seconds } else { 0.0 };
        m.tokens = self.tokens.len();
        m.peak_memory_bytes = m.peak_memory_bytes.max(self.model.backend.memory().peak_bytes);
    }
}

impl RecognitionSession for Session {
    fn push_audio(&mut self, samples: &[f32]) -> Result<TranscriptDelta> {
        if self.finished {
            return Err(Error::invalid("push_audio after finish: start a new session"));
        }
        if let Some(i) = samples.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(format!("audio sample {i} of this chunk is not a finite number")));
        }
        let started = Instant::now();
        let mut out = TranscriptDelta::default();
        self.samples_in += samples.len();
        if !self.done {
            // Bounded work per step, however much audio arrives at once.
            let step = CHUNK_TOKENS * self.model.stream.samples_per_token;
            for piece in samples.chunks(step) {
                self.mel.push(piece);
                self.advance(None, &mut out)?;
            }
        }
        self.finish_metrics(started);
        Ok(out)
    }

    fn finish(&mut self) -> Result<TranscriptDelta> {
        let mut out = TranscriptDelta::default();
        if self.finished {
            return Ok(out);
        }
        self.finished = true;
        if self.samples_in == 0 {
            return Ok(out);
        }
        let started = Instant::now();
        let s = self.model.stream.clone();
        let right = s.right_pad(self.samples_in, self.delay_tokens);
        let padded = s.left_pad() + self.samples_in + right;
        let total_frames = padded / s.hop;
        self.total_positions = Some(total_frames / s.mels_per_token());
        let zeros = vec![0f32; right + s.window / 2];
        if !self.done {
            for piece in zeros.chunks(CHUNK_TOKENS * s.samples_per_token) {
                self.mel.push(piece);
                self.advance(Some(total_frames), &mut out)?;
            }
        }
        out.text.push_str(&self.text.flush());
        self.done = true;
        self.finish_metrics(started);
        Ok(out)
    }

    fn metrics(&self) -> RecognitionMetrics {
        self.metrics
    }
}
