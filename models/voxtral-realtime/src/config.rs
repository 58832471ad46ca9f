//! The model's hyper-parameters, read from either layout: Hugging Face `config.json`
//! (`VoxtralRealtimeConfig` with `audio_config` / `text_config`) or Mistral's `params.json`
//! (the decoder at the top level, the encoder under `multimodal.whisper_model_args`). Both map
//! to [`Params`]; defaults are transformers 5.23's.

use std::path::Path;

use infer_core::{Error, Result};
use infer_layers::{read_config, rope_theta};
use serde::Deserialize;

/// The causal audio encoder (Whisper-style, RoPE, sliding window).
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderParams {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub num_mel_bins: usize,
    pub rms_eps: f64,
    pub rope_theta: f64,
    /// Keys a frame attends to, itself included.
    pub window: usize,
}

/// The Mistral decoder with time-conditioned (ada) FFN norms.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderParams {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub rms_eps: f64,
    pub rope_theta: f64,
    /// 0: global attention.
    pub window: usize,
    /// Width of the ada-norm bottleneck (32 in the real model).
    pub ada_dim: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub encoder: EncoderParams,
    pub decoder: DecoderParams,
    /// Encoder frames stacked into one decoder step.
    pub downsample_factor: usize,
    /// The log-mel's fixed maximum (`global_log_mel_max`).
    pub log_mel_max: f64,
}

// --- Hugging Face config.json --------------------------------------------------------------

#[derive(Deserialize)]
struct HfConfig {
    audio_config: HfAudio,
    text_config: HfText,
    #[serde(default = "four")]
    downsample_factor: usize,
    #[serde(default = "gelu")]
    projector_hidden_act: String,
}

#[derive(Deserialize)]
struct HfAudio {
    #[serde(default = "d1280")]
    hidden_size: usize,
    #[serde(default = "d5120")]
    intermediate_size: usize,
    #[serde(default = "d32")]
    num_hidden_layers: usize,
    #[serde(default = "d32")]
    num_attention_heads: usize,
    #[serde(default = "d64")]
    head_dim: usize,
    #[serde(default = "d128")]
    num_mel_bins: usize,
    #[serde(default = "eps5")]
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<serde_json::Value>,
    #[serde(default = "d750")]
    sliding_window: usize,
    #[serde(default = "silu")]
    hidden_act: String,
}

#[derive(Deserialize)]
struct HfText {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "eps6")]
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<serde_json::Value>,
    sliding_window: Option<usize>,
    #[serde(default = "silu")]
    hidden_act: String,
}

fn four() -> usize {
    4
}
fn d32() -> usize {
    32
}
fn d64() -> usize {
    64
}
fn d128() -> usize {
    128
}
fn d750() -> usize {
    750
}
fn d1280() -> usize {
    1280
}
fn d5120() -> usize {
    5120
}
fn eps5() -> f64 {
    1e-5
}
fn eps6() -> f64 {
    1e-6
}
fn gelu() -> String {
    "gelu".into()
}
fn silu() -> String {
    "silu".into()
}

impl Params {
    /// From a Hugging Face directory's config.json (and processor_config.json's
    /// `global_log_mel_max`, when present).
    pub fn from_hf_dir(dir: &Path) -> Result<Self> {
        let c: HfConfig = read_config(dir)?;
        let path = dir.join("config.json");
        let unsupported = |what: &str, got: &str| Error::config(&path, format!("{what} `{got}` is not supported"));
        for (what, act, want) in [
            ("audio_config.hidden_act", &c.audio_config.hidden_act, "silu"),
            ("text_config.hidden_act", &c.text_config.hidden_act, "silu"),
            ("projector_hidden_act", &c.projector_hidden_act, "gelu"),
        ] {
            if act != want {
                return Err(unsupported(what, act));
            }
        }
        let (a, t) = (&c.audio_config, &c.text_config);
        let params = Params {
            encoder: EncoderParams {
                hidden: a.hidden_size,
                layers: a.num_hidden_layers,
                heads: a.num_attention_heads,
                head_dim: a.head_dim,
                intermediate: a.intermediate_size,
                num_mel_bins: a.num_mel_bins,
                rms_eps: a.rms_norm_eps,
                rope_theta: rope_theta(a.rope_theta, a.rope_parameters.as_ref(), 1e6),
                window: a.sliding_window,
            },
            decoder: DecoderParams {
                hidden: t.hidden_size,
                layers: t.num_hidden_layers,
                heads: t.num_attention_heads,
                kv_heads: t.num_key_value_heads.unwrap_or(t.num_attention_heads),
                head_dim: t.head_dim.unwrap_or(t.hidden_size / t.num_attention_heads.max(1)),
                intermediate: t.intermediate_size,
                vocab: t.vocab_size,
                rms_eps: t.rms_norm_eps,
                rope_theta: rope_theta(t.rope_theta, t.rope_parameters.as_ref(), 1e6),
                window: t.sliding_window.unwrap_or(0),
                // transformers hard-codes the bottleneck.
                ada_dim: 32,
            },
            downsample_factor: c.downsample_factor,
            log_mel_max: hf_log_mel_max(dir)?,
        };
        params.validate(&path)
    }

    /// From a Mistral-native directory's params.json.
    pub fn from_params_json(dir: &Path) -> Result<Self> {
        let path = dir.join("params.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let p: MistralParams = serde_json::from_str(&text).map_err(|e| {
            let msg = e.to_string();
            Error::config(&path, msg.split(" at line ").next().unwrap_or(&msg).replace('`', ""))
        })?;
        let w = &p.multimodal.whisper_model_args;
        let e = &w.encoder_args;
        if e.n_kv_heads.is_some_and(|kv| kv != e.n_heads) {
            return Err(Error::config(&path, "encoder_args: n_kv_heads must equal n_heads (the encoder has no GQA)"));
        }
        if !p.ada_rms_norm_t_cond {
            return Err(Error::config(&path, "ada_rms_norm_t_cond is false: not a Voxtral Realtime decoder"));
        }
        let params = Params {
            encoder: EncoderParams {
                hidden: e.dim,
                layers: e.n_layers,
                heads: e.n_heads,
                head_dim: e.head_dim,
                intermediate: e.hidden_dim,
                num_mel_bins: e.audio_encoding_args.num_mel_bins,
                rms_eps: e.norm_eps,
                rope_theta: e.rope_theta,
                window: e.sliding_window,
            },
            decoder: DecoderParams {
                hidden: p.dim,
                layers: p.n_layers,
                heads: p.n_heads,
                kv_heads: p.n_kv_heads,
                head_dim: p.head_dim,
                intermediate: p.hidden_dim,
                vocab: p.vocab_size,
                rms_eps: p.norm_eps,
                rope_theta: p.rope_theta,
                window: p.sliding_window.map(|w| w.0).unwrap_or(0),
                ada_dim: p.ada_rms_norm_t_cond_dim,
            },
            downsample_factor: w.downsample_args.downsample_factor,
            log_mel_max: e.audio_encoding_args.global_log_mel_max,
        };
        params.validate(&path)
    }

    fn validate(self, path: &Path) -> Result<Self> {
        let (e, d) = (&self.encoder, &self.decoder);
        let zero = [
            ("encoder hidden size", e.hidden),
            ("encoder heads", e.heads),
            ("encoder head_dim", e.head_dim),
            ("encoder sliding window", e.window),
            ("decoder hidden size", d.hidden),
            ("decoder heads", d.heads),
            ("decoder kv heads", d.kv_heads),
            ("decoder head_dim", d.head_dim),
            ("vocab size", d.vocab),
            ("downsample factor", self.downsample_factor),
        ];
        if let Some((what, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return Err(Error::config(path, format!("{what} is 0")));
        }
        if d.heads % d.kv_heads != 0 {
            return Err(Error::config(
                path,
                format!("{} heads are not a multiple of {} kv heads", d.heads, d.kv_heads),
            ));
        }
        if e.head_dim % 2 != 0 || d.head_dim % 2 != 0 {
            return Err(Error::config(path, "head_dim must be even (rotary embeddings)"));
        }
        Ok(self)
    }
}

/// `global_log_mel_max` from processor_config.json (or preprocessor_config.json), else 1.5.
fn hf_log_mel_max(dir: &Path) -> Result<f64> {
    for name in ["processor_config.json", "preprocessor_config.json"] {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::config(&path, format!("invalid JSON: {e}")))?;
        let fe = v.get("feature_extractor").unwrap_or(&v);
        if let Some(m) = fe.get("global_log_mel_max") {
            return m.as_f64().ok_or_else(|| Error::config(&path, "global_log_mel_max: expected a number"));
        }
    }
    Ok(1.5)
}

// --- Mistral params.json -------------------------------------------------------------------

#[derive(Deserialize)]
struct MistralParams {
    dim: usize,
    n_layers: usize,
    head_dim: usize,
    hidden_dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
    #[serde(default = "theta")]
    rope_theta: f64,
    #[serde(default = "eps5")]
    norm_eps: f64,
    vocab_size: usize,
    sliding_window: Option<Window>,
    #[serde(default)]
    ada_rms_norm_t_cond: bool,
    #[serde(default = "d32")]
    ada_rms_norm_t_cond_dim: usize,
    multimodal: Multimodal,
}

/// `sliding_window` is sometimes written as a string.
struct Window(usize);

impl<'de> Deserialize<'de> for Window {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => n.as_u64().map(|n| Window(n as usize)),
            serde_json::Value::String(s) => s.parse().ok().map(Window),
            _ => None,
        }
        .ok_or_else(|| serde::de::Error::custom("sliding_window: expected a whole number"))
    }
}

#[derive(Deserialize)]
struct Multimodal {
    whisper_model_args: WhisperArgs,
}

#[derive(Deserialize)]
struct WhisperArgs {
    encoder_args: EncoderArgs,
    downsample_args: DownsampleArgs,
}

#[derive(Deserialize)]
struct DownsampleArgs {
    downsample_factor: usize,
}

#[derive(Deserialize)]
struct EncoderArgs {
    audio_encoding_args: AudioEncodingArgs,
    dim: usize,
    n_layers: usize,
    head_dim: usize,
    hidden_dim: usize,
    n_heads: usize,
    n_kv_heads: Option<usize>,
    #[serde(default = "theta")]
    rope_theta: f64,
    #[serde(default = "eps5")]
    norm_eps: f64,
    #[serde(default = "d750")]
    sliding_window: usize,
}

#[derive(Deserialize)]
struct AudioEncodingArgs {
    #[serde(default = "d128")]
    num_mel_bins: usize,
    #[serde(default = "mel_max")]
    global_log_mel_max: f64,
}

fn theta() -> f64 {
    1e6
}
fn mel_max() -> f64 {
    1.5
}
