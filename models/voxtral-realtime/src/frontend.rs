//! The audio front end: the processor's padding rules and the log-mel spectrogram, computed
//! incrementally so that a stream of pushed samples gives exactly the frames of the whole padded
//! recording.
//!
//! What the reference does (mistral-common 1.13.1 `AudioEncoder.pad` + transformers
//! `VoxtralRealtimeFeatureExtractor`): the audio is padded with `32 × 1280` zeros on the left
//! (`streaming_n_left_pad_tokens`), then on the right up to a whole 80 ms token plus
//! `delay + 1 + 10` tokens of zeros; the STFT (n_fft 400, hop 160, periodic Hann) is centred
//! (reflect padding of 200) and its last frame dropped, so the log-mel has 8 frames per token. The
//! mel is `log10(max(mel, 1e-10))`, floored at `global_log_mel_max - 8`, then `(x + 4) / 4`.
//!
//! Both ends of the padded signal are zeros (32 tokens on the left, at least 17 on the right), so
//! the centring's reflection is zeros too: a frame is its 400 samples with zeros outside the
//! signal, and a frame can be computed as soon as its last sample has arrived (2.5 ms after its
//! token's 80 ms).

use infer_core::dsp::{LogCompression, MelConfig, MelNorm, MelScale, MelSpectrogram, Padding};
use infer_core::text::tekken::Tekken;
use infer_core::{Error, Result};
use serde::Deserialize;

/// Extra tokens of right padding beyond the delay (mistral-common's
/// `OFFLINE_STREAMING_BUFFER_TOKENS`): room for the last word.
const BUFFER_TOKENS: usize = 10;

/// The streaming contract from tekken.json's `audio` section.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamParams {
    pub sample_rate: u32,
    pub num_mel_bins: usize,
    pub hop: usize,
    pub window: usize,
    /// Audio samples per decoder step (sample_rate / frame_rate: 1280, 80 ms).
    pub samples_per_token: usize,
    pub left_pad_tokens: usize,
    pub default_delay_ms: f64,
}

#[derive(Deserialize)]
struct AudioSection {
    sampling_rate: u32,
    frame_rate: f64,
    audio_encoding_config: EncodingConfig,
    #[serde(default)]
    transcription_format: Option<String>,
    transcription_delay_ms: Option<f64>,
    streaming_n_left_pad_tokens: Option<usize>,
}

#[derive(Deserialize)]
struct EncodingConfig {
    num_mel_bins: usize,
    hop_length: usize,
    window_size: usize,
}

impl StreamParams {
    pub fn from_tekken(tekken: &Tekken) -> Result<Self> {
        let bad = |m: String| Error::Tokenizer(format!("tekken.json audio section: {m}"));
        let section = tekken.audio_section().ok_or_else(|| {
            Error::Tokenizer("tekken.json has no `audio` section: not a Voxtral Realtime tokenizer".into())
        })?;
        let a: AudioSection = serde_json::from_value(section.clone()).map_err(|e| bad(e.to_string()))?;
        if a.transcription_format.as_deref() != Some("streaming") {
            return Err(bad(format!(
                "transcription_format is {:?}, Voxtral Realtime needs \"streaming\"",
                a.transcription_format
            )));
        }
        let e = &a.audio_encoding_config;
        if a.sampling_rate == 0 || a.frame_rate <= 0.0 || e.hop_length == 0 || e.window_size == 0 {
            return Err(bad("sampling_rate, frame_rate, hop_length and window_size must be positive".into()));
        }
        let samples_per_token = (a.sampling_rate as f64 / a.frame_rate) as usize;
        if !samples_per_token.is_multiple_of(e.hop_length) {
            return Err(bad(format!(
                "{samples_per_token} samples per token is not a multiple of hop {}",
                e.hop_length
            )));
        }
        Ok(StreamParams {
            sample_rate: a.sampling_rate,
            num_mel_bins: e.num_mel_bins,
            hop: e.hop_length,
            window: e.window_size,
            samples_per_token,
            left_pad_tokens: a
                .streaming_n_left_pad_tokens
                .ok_or_else(|| bad("missing streaming_n_left_pad_tokens".into()))?,
            default_delay_ms: a.transcription_delay_ms.ok_or_else(|| bad("missing transcription_delay_ms".into()))?,
        })
    }

    /// Mel frames per decoder step (8).
    pub fn mels_per_token(&self) -> usize {
        self.samples_per_token / self.hop
    }

    /// Tokens covering `samples` (mistral-common `AudioConfig.num_audio_tokens`).
    fn audio_tokens(&self, samples: usize) -> usize {
        let frames = if !samples.is_multiple_of(self.hop) {
            (samples as f64 / self.hop as f64 - 1.0).ceil() as usize
        } else {
            samples / self.hop
        };
        frames.div_ceil(self.mels_per_token())
    }

    /// Delay tokens for a transcription delay (`get_num_delay_tokens`): 480 ms -> 6.
    pub fn delay_tokens(&self, delay_ms: f64) -> usize {
        self.audio_tokens((delay_ms / 1000.0 * self.sample_rate as f64) as usize)
    }

    /// Zeros appended after `samples` of audio: up to a whole token, then `delay + 1 + 10`
    /// tokens.
    pub fn right_pad(&self, samples: usize, delay_tokens: usize) -> usize {
        let align = (self.samples_per_token - samples % self.samples_per_token) % self.samples_per_token;
        align + (delay_tokens + 1 + BUFFER_TOKENS) * self.samples_per_token
    }

    pub fn left_pad(&self) -> usize {
        self.left_pad_tokens * self.samples_per_token
    }

    fn mel_config(&self) -> MelConfig {
        MelConfig {
            sample_rate: self.sample_rate,
            n_fft: self.window,
            hop_length: self.hop,
            win_length: self.window,
            n_mels: self.num_mel_bins,
            fmin: 0.0,
            fmax: Some(self.sample_rate as f64 / 2.0),
            // Frames are cut from a buffer that already holds the centring zeros.
            padding: Padding::None,
            power: 2,
            magnitude_eps: 0.0,
            scale: MelScale::Slaney,
            norm: MelNorm::Slaney,
            log: LogCompression::Log10 { floor: 1e-10 },
        }
    }
}

/// Log-mel frames of a padded stream, as they become computable. Frames are row-major
/// `(frame, mel)`.
pub struct LogMelStream {
    mel: MelSpectrogram,
    n_mels: usize,
    hop: usize,
    window: usize,
    floor: f32,
    /// Samples from absolute (centred) index `start`: frame `t` covers `[t*hop, t*hop+window)`.
    buf: Vec<f32>,
    start: usize,
    next_frame: usize,
}

impl LogMelStream {
    /// A stream whose first samples are the centring zeros and the left padding.
    pub fn new(p: &StreamParams, log_mel_max: f64) -> Result<Self> {
        let mel = MelSpectrogram::new(p.mel_config())?;
        let buf = vec![0.0; p.window / 2 + p.left_pad()];
        Ok(LogMelStream {
            mel,
            n_mels: p.num_mel_bins,
            hop: p.hop,
            window: p.window,
            floor: (log_mel_max - 8.0) as f32,
            buf,
            start: 0,
            next_frame: 0,
        })
    }

    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// Frames emitted so far.
    pub fn frames(&self) -> usize {
        self.next_frame
    }

    /// Appends samples (or padding) to the signal.
    pub fn push(&mut self, samples: &[f32]) {
        self.buf.extend_from_slice(samples);
    }

    /// Every frame whose samples have all arrived, up to `limit` frames in total.
    pub fn ready_frames(&mut self, limit: Option<usize>) -> Result<Vec<f32>> {
        let end = self.start + self.buf.len();
        let mut last = if end >= self.window { (end - self.window) / self.hop + 1 } else { 0 };
        if let Some(l) = limit {
            last = last.min(l);
        }
        if last <= self.next_frame {
            return Ok(Vec::new());
        }
        let from = self.next_frame * self.hop - self.start;
        let to = (last - 1) * self.hop + self.window - self.start;
        let m = self.mel.compute(&self.buf[from..to])?;
        debug_assert_eq!(m.frames, last - self.next_frame);
        let mut out = vec![0f32; m.frames * self.n_mels];
        for (mel, row) in m.data.chunks_exact(m.frames).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                out[t * self.n_mels + mel] = (v.max(self.floor) + 4.0) / 4.0;
            }
        }
        self.next_frame = last;
        // Keep only what later frames need.
        let keep_from = self.next_frame * self.hop;
        self.buf.drain(..keep_from - self.start);
        self.start = keep_from;
        Ok(out)
    }
}
