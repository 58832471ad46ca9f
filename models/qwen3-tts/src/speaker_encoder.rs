//! ECAPA-TDNN speaker encoder: reference audio -> 24 kHz -> 128-bin log-mel -> x-vector
//! (`enc_dim` values, 1024 in 0.6B-Base, 2048 in 1.7B-Base), as qwen-tts 0.1.1
//! (`Qwen3TTSSpeakerEncoder`, `extract_speaker_embedding`) computes it.
//!
//! Every convolution of the reference is `nn.Conv1d(padding="same", padding_mode="reflect")`:
//! the input is reflect-padded by `dilation * (kernel - 1)` split left `total / 2`, right the rest
//! (PyTorch's rule), then convolved without padding. Reflect padding is one `index_select` along
//! time. Weights: the checkpoint's `speaker_encoder.*` tensors, names as in the reference module.

use std::path::Path;

use infer_core::audio::Audio;
use infer_core::audio_io::{check_audio, resample, AudioLimits};
use infer_core::dsp::{LogCompression, Mel, MelConfig, MelNorm, MelScale, MelSpectrogram, Padding};
use infer_core::{Backend, Conv1dParams, DType, Error, Result, Tensor, Weights};
use serde::Deserialize;

/// The front end of the Qwen3-TTS speaker encoder (qwen-tts `mel_spectrogram` as called by
/// `extract_speaker_embedding`): 24 kHz, n_fft 1024, hop 256, Hann window 1024, 128 Slaney mels
/// (Slaney norm) over 0–12 kHz; the signal is reflect-padded by (n_fft - hop) / 2 = 384 on each
/// side and framed without centring; magnitude `sqrt(|X|² + 1e-9)`; `ln(max(x, 1e-5))`.
pub fn speaker_mel_config() -> MelConfig {
    MelConfig {
        sample_rate: 24_000,
        n_fft: 1024,
        hop_length: 256,
        win_length: 1024,
        n_mels: 128,
        fmin: 0.0,
        fmax: Some(12_000.0),
        padding: Padding::Reflect { left: 384, right: 384 },
        power: 1,
        magnitude_eps: 1e-9,
        scale: MelScale::Slaney,
        norm: MelNorm::Slaney,
        log: LogCompression::Ln { floor: 1e-5 },
    }
}

/// `speaker_encoder_config` of a Qwen3-TTS config.json (`Qwen3TTSSpeakerEncoderConfig`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct SpeakerEncoderConfig {
    pub mel_dim: usize,
    pub enc_dim: usize,
    pub enc_channels: Vec<usize>,
    pub enc_kernel_sizes: Vec<usize>,
    pub enc_dilations: Vec<usize>,
    pub enc_attention_channels: usize,
    pub enc_res2net_scale: usize,
    pub enc_se_channels: usize,
    pub sample_rate: u32,
}

impl Default for SpeakerEncoderConfig {
    fn default() -> Self {
        SpeakerEncoderConfig {
            mel_dim: 128,
            enc_dim: 1024,
            enc_channels: vec![512, 512, 512, 512, 1536],
            enc_kernel_sizes: vec![5, 3, 3, 3, 1],
            enc_dilations: vec![1, 2, 3, 4, 1],
            enc_attention_channels: 128,
            enc_res2net_scale: 8,
            enc_se_channels: 128,
            sample_rate: 24_000,
        }
    }
}

impl SpeakerEncoderConfig {
    /// The `speaker_encoder_config` object of `<dir>/config.json`.
    pub fn from_model_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::config(&path, format!("invalid JSON: {e}")))?;
        let section = v
            .get("speaker_encoder_config")
            .ok_or_else(|| Error::config(&path, "missing `speaker_encoder_config` (not a Base model?)"))?;
        let cfg: Self = serde_json::from_value(section.clone())
            .map_err(|e| Error::config(&path, format!("speaker_encoder_config: {e}")))?;
        cfg.validate().map_err(|m| Error::config(&path, format!("speaker_encoder_config: {m}")))?;
        Ok(cfg)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let n = self.enc_channels.len();
        if n < 3 || self.enc_kernel_sizes.len() != n || self.enc_dilations.len() != n {
            return Err("enc_channels, enc_kernel_sizes and enc_dilations need the same length (>= 3)".into());
        }
        if self.mel_dim != 128 || self.sample_rate != 24_000 {
            return Err(format!(
                "the reference front end is 128 mels at 24 kHz; got mel_dim {} at {} Hz",
                self.mel_dim, self.sample_rate
            ));
        }
        let c = &self.enc_channels;
        if c[1..n - 1].iter().any(|&ch| ch != c[0] || ch % self.enc_res2net_scale != 0) {
            return Err(format!("SE-Res2Net blocks need equal channels divisible by the scale: {c:?}"));
        }
        if c[1..n - 1].iter().sum::<usize>() != c[n - 1] {
            return Err(format!("the MFA input ({}) must equal enc_channels[-1] ({})", c[0] * (n - 2), c[n - 1]));
        }
        Ok(())
    }
}

/// `nn.Conv1d(padding="same", padding_mode="reflect")`.
struct ReflectConv {
    weight: Tensor,
    bias: Tensor,
    dilation: usize,
    left: usize,
    right: usize,
}

impl ReflectConv {
    fn load(w: &Weights, cin: usize, cout: usize, kernel: usize, dilation: usize) -> Result<Self> {
        let total = dilation * (kernel - 1);
        Ok(ReflectConv {
            weight: w.get_shaped("weight", &[cout, cin, kernel])?,
            bias: w.get_shaped("bias", &[cout])?,
            dilation,
            left: total / 2,
            right: total - total / 2,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = reflect_pad_time(x, self.left, self.right)?;
        x.conv1d(&self.weight, Some(&self.bias), Conv1dParams { dilation: self.dilation, ..Default::default() })
    }
}

/// Mirrors `x` (b, c, t) along time without repeating the edge frame (`F.pad(mode="reflect")`).
fn reflect_pad_time(x: &Tensor, left: usize, right: usize) -> Result<Tensor> {
    if left == 0 && right == 0 {
        return Ok(x.clone());
    }
    let t = x.dim(2);
    if left >= t || right >= t {
        return Err(Error::invalid(format!(
            "speaker encoder: {t} mel frames cannot be reflect-padded by {}; the reference audio is too short",
            left.max(right)
        )));
    }
    let t = t as i64;
    let ids: Vec<u32> = (-(left as i64)..t + right as i64)
        .map(|i| if i < 0 { -i } else if i >= t { 2 * (t - 1) - i } else { i } as u32)
        .collect();
    let ids = Tensor::from_u32(x.backend(), &ids, &[ids.len()])?;
    x.index_select(&ids, 2)
}

/// Conv + ReLU (`TimeDelayNetBlock`).
struct Tdnn(ReflectConv);

impl Tdnn {
    fn load(w: &Weights, cin: usize, cout: usize, kernel: usize, dilation: usize) -> Result<Self> {
        Ok(Tdnn(ReflectConv::load(&w.prefixed("conv"), cin, cout, kernel, dilation)?))
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.0.forward(x)?.relu()
    }
}

/// Res2Net: channel groups, each group after the first convolved with the previous group's output
/// added (the first passes through).
struct Res2Net {
    blocks: Vec<Tdnn>,
    width: usize,
}

impl Res2Net {
    fn load(w: &Weights, channels: usize, scale: usize, kernel: usize, dilation: usize) -> Result<Self> {
        let width = channels / scale;
        let blocks = (0..scale - 1)
            .map(|i| Tdnn::load(&w.prefixed(format!("blocks.{i}")), width, width, kernel, dilation))
            .collect::<Result<_>>()?;
        Ok(Res2Net { blocks, width })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut outs = vec![x.narrow(1, 0, self.width)?];
        for (i, block) in self.blocks.iter().enumerate() {
            let part = x.narrow(1, (i + 1) * self.width, self.width)?;
            let input = if i == 0 { part } else { part.add(&outs[i])? };
            outs.push(block.forward(&input)?);
        }
        Tensor::concat(&outs.iter().collect::<Vec<_>>(), 1)
    }
}

/// Channel gates from the time-averaged activations.
struct SqueezeExcitation {
    conv1: ReflectConv,
    conv2: ReflectConv,
}

impl SqueezeExcitation {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = self.conv1.forward(&x.mean_keepdim(2)?)?.relu()?;
        let s = self.conv2.forward(&s)?.sigmoid()?;
        x.mul(&s)
    }
}

/// TDNN (1x1) -> Res2Net -> TDNN (1x1) -> squeeze-excitation, plus the input.
struct SeRes2NetBlock {
    tdnn1: Tdnn,
    res2net: Res2Net,
    tdnn2: Tdnn,
    se: SqueezeExcitation,
}

impl SeRes2NetBlock {
    fn load(w: &Weights, cfg: &SpeakerEncoderConfig, i: usize) -> Result<Self> {
        let (cin, c) = (cfg.enc_channels[i - 1], cfg.enc_channels[i]);
        let se = cfg.enc_se_channels;
        Ok(SeRes2NetBlock {
            tdnn1: Tdnn::load(&w.prefixed("tdnn1"), cin, c, 1, 1)?,
            res2net: Res2Net::load(
                &w.prefixed("res2net_block"),
                c,
                cfg.enc_res2net_scale,
                cfg.enc_kernel_sizes[i],
                cfg.enc_dilations[i],
            )?,
            tdnn2: Tdnn::load(&w.prefixed("tdnn2"), c, c, 1, 1)?,
            se: SqueezeExcitation {
                conv1: ReflectConv::load(&w.prefixed("se_block.conv1"), c, se, 1, 1)?,
                conv2: ReflectConv::load(&w.prefixed("se_block.conv2"), se, c, 1, 1)?,
            },
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.tdnn2.forward(&self.res2net.forward(&self.tdnn1.forward(x)?)?)?;
        self.se.forward(&h)?.add(x)
    }
}

/// Attentive statistics pooling: attention over time conditioned on the utterance's mean and std,
/// then the attention-weighted mean and std per channel.
struct AttentiveStatsPooling {
    tdnn: Tdnn,
    conv: ReflectConv,
}

/// The reference clamps variances at this before the square root.
const STD_EPS: f64 = 1e-12;

/// Mean and std over time of `x` (b, c, t), weighted by `w` (summing to 1 over time) or uniform;
/// `sub` broadcasts the (b, c, 1) mean.
fn weighted_stats(x: &Tensor, w: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
    let (mean, var) = match w {
        None => {
            let mean = x.mean_keepdim(2)?;
            let var = x.sub(&mean)?.sqr()?.mean_keepdim(2)?;
            (mean, var)
        }
        Some(w) => {
            let mean = x.mul(w)?.sum_keepdim(2)?;
            let var = x.sub(&mean)?.sqr()?.mul(w)?.sum_keepdim(2)?;
            (mean, var)
        }
    };
    Ok((mean, var.clamp(STD_EPS, f32::MAX as f64)?.sqrt()?))
}

impl AttentiveStatsPooling {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let (mean, std) = weighted_stats(x, None)?;
        let ctx = Tensor::concat(&[x, &mean.broadcast_to(&dims)?, &std.broadcast_to(&dims)?], 1)?;
        let scores = self.conv.forward(&self.tdnn.forward(&ctx)?.tanh()?)?;
        let attn = scores.softmax_last()?;
        let (mean, std) = weighted_stats(x, Some(&attn))?;
        Tensor::concat(&[&mean, &std], 1)
    }
}

/// The Qwen3-TTS speaker encoder.
pub struct SpeakerEncoder {
    config: SpeakerEncoderConfig,
    initial: Tdnn,
    blocks: Vec<SeRes2NetBlock>,
    mfa: Tdnn,
    asp: AttentiveStatsPooling,
    fc: ReflectConv,
    mel: MelSpectrogram,
    backend: Backend,
    dtype: DType,
    /// Fewest mel frames every reflect padding accepts.
    min_frames: usize,
}

impl SpeakerEncoder {
    /// Loads from checkpoint weights holding `speaker_encoder.*` (the root `Weights` of a
    /// Qwen3-TTS checkpoint).
    pub fn load(weights: &Weights, config: &SpeakerEncoderConfig) -> Result<Self> {
        config.validate().map_err(|m| Error::invalid(format!("speaker_encoder_config: {m}")))?;
        let w = weights.prefixed("speaker_encoder");
        let c = &config.enc_channels;
        let n = c.len();
        let initial = Tdnn::load(
            &w.prefixed("blocks.0"),
            config.mel_dim,
            c[0],
            config.enc_kernel_sizes[0],
            config.enc_dilations[0],
        )?;
        let blocks = (1..n - 1)
            .map(|i| SeRes2NetBlock::load(&w.prefixed(format!("blocks.{i}")), config, i))
            .collect::<Result<_>>()?;
        let last = c[n - 1];
        let mfa =
            Tdnn::load(&w.prefixed("mfa"), last, last, config.enc_kernel_sizes[n - 1], config.enc_dilations[n - 1])?;
        let att = config.enc_attention_channels;
        let asp = AttentiveStatsPooling {
            tdnn: Tdnn::load(&w.prefixed("asp.tdnn"), last * 3, att, 1, 1)?,
            conv: ReflectConv::load(&w.prefixed("asp.conv"), att, last, 1, 1)?,
        };
        let fc = ReflectConv::load(&w.prefixed("fc"), last * 2, config.enc_dim, 1, 1)?;
        let min_frames = (0..n).map(|i| config.enc_dilations[i] * (config.enc_kernel_sizes[i] - 1) / 2 + 1).max();
        Ok(SpeakerEncoder {
            config: config.clone(),
            initial,
            blocks,
            mfa,
            asp,
            fc,
            mel: MelSpectrogram::new(speaker_mel_config())?,
            backend: weights.backend().clone(),
            dtype: weights.dtype(),
            min_frames: min_frames.unwrap_or(1),
        })
    }

    /// Loads from a checkpoint directory (config.json + safetensors).
    pub fn from_dir(dir: &Path, backend: &Backend, dtype: DType) -> Result<Self> {
        let config = SpeakerEncoderConfig::from_model_dir(dir)?;
        Self::load(&Weights::from_dir(dir, backend, dtype)?, &config)
    }

    pub fn config(&self) -> &SpeakerEncoderConfig {
        &self.config
    }

    /// The rate the encoder's front end runs at (24 kHz).
    pub fn sample_rate(&self) -> u32 {
        self.mel.config().sample_rate
    }

    /// Length of the x-vector.
    pub fn dim(&self) -> usize {
        self.config.enc_dim
    }

    /// Shortest audio (seconds at any rate) the encoder accepts: enough frames for its widest
    /// reflect padding.
    pub fn min_seconds(&self) -> f64 {
        let hop = self.mel.config().hop_length;
        // frames = 1 + (n + 2 * 384 - 1024) / hop  =>  n >= 256 + (min_frames - 1) * hop.
        (256 + (self.min_frames - 1) * hop + 1) as f64 / self.sample_rate() as f64
    }

    /// The encoder's log-mel features of `audio` (resampled to 24 kHz first if needed).
    pub fn mel(&self, audio: &Audio) -> Result<Mel> {
        let limits = AudioLimits { min_seconds: self.min_seconds(), max_seconds: None, silence_peak_dbfs: f32::MIN };
        check_audio(audio, &limits, "speaker encoder input")?;
        let audio = resample(audio, self.sample_rate())?;
        self.mel.compute(&audio.samples)
    }

    /// The x-vector of `audio` (mono, any rate; resampled to 24 kHz as qwen-tts does with librosa).
    /// Silence and length checks with user-facing thresholds belong to the caller
    /// ([`infer_core::audio_io::check_audio`]); this only rejects audio too short to compute on.
    pub fn embed(&self, audio: &Audio) -> Result<Vec<f32>> {
        self.embed_mel(&self.mel(audio)?)
    }

    /// The x-vector of precomputed features (`mel.n_mels` must be 128).
    pub fn embed_mel(&self, mel: &Mel) -> Result<Vec<f32>> {
        if mel.n_mels != self.config.mel_dim {
            return Err(Error::invalid(format!(
                "speaker encoder: {} mel bins, expected {}",
                mel.n_mels, self.config.mel_dim
            )));
        }
        if mel.frames < self.min_frames {
            return Err(Error::invalid(format!(
                "reference audio too short for the speaker encoder: {} mel frames, at least {} needed ({:.2} s)",
                mel.frames,
                self.min_frames,
                self.min_seconds()
            )));
        }
        let x = Tensor::from_f32(&self.backend, &mel.data, &[1, mel.n_mels, mel.frames])?.to_dtype(self.dtype)?;
        self.forward(&x)?.to_vec_f32()
    }

    /// `mel` (b, 128, t) -> x-vectors (b, enc_dim).
    pub fn forward(&self, mel: &Tensor) -> Result<Tensor> {
        let mut h = self.initial.forward(mel)?;
        let mut outs = Vec::with_capacity(self.blocks.len());
        for block in &self.blocks {
            h = block.forward(&h)?;
            outs.push(h.clone());
        }
        // Multi-layer feature aggregation over the SE-Res2Net outputs (not the initial TDNN's).
        let h = self.mfa.forward(&Tensor::concat(&outs.iter().collect::<Vec<_>>(), 1)?)?;
        let pooled = self.asp.forward(&h)?;
        let out = self.fc.forward(&pooled)?;
        out.reshape(&[out.dim(0), self.config.enc_dim])
    }
}
