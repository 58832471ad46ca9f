//! `config.json` of a Qwen3-TTS checkpoint (`model_type = "qwen3_tts"`), as qwen-tts writes it.

use std::collections::BTreeMap;
use std::path::Path;

use infer_core::{Error, Result};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct Qwen3TtsConfig {
    pub talker_config: TalkerConfig,
    #[serde(default)]
    pub speaker_encoder_config: Option<serde_json::Value>,
    /// `base` (voice cloning), `custom_voice` (named speakers) or `voice_design`.
    #[serde(default)]
    pub tts_model_type: Option<String>,
    pub im_start_token_id: u32,
    pub im_end_token_id: u32,
    pub tts_pad_token_id: u32,
    pub tts_bos_token_id: u32,
    pub tts_eos_token_id: u32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DecoderDims {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub num_code_groups: Option<usize>,
}

impl DecoderDims {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size.checked_div(self.num_attention_heads).unwrap_or(0))
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct TalkerConfig {
    #[serde(flatten)]
    pub dims: DecoderDims,
    pub code_predictor_config: DecoderDims,
    pub num_code_groups: usize,
    pub text_hidden_size: usize,
    pub text_vocab_size: usize,
    pub codec_eos_token_id: u32,
    pub codec_think_id: u32,
    pub codec_nothink_id: u32,
    pub codec_think_bos_id: u32,
    pub codec_think_eos_id: u32,
    pub codec_pad_id: u32,
    pub codec_bos_id: u32,
    #[serde(default)]
    pub codec_language_id: BTreeMap<String, u32>,
    /// Named speakers of CustomVoice checkpoints (a codec id each).
    #[serde(default)]
    pub spk_id: Option<BTreeMap<String, u32>>,
    /// Dialect language of a named speaker (`false` when none).
    #[serde(default)]
    pub spk_is_dialect: Option<BTreeMap<String, serde_json::Value>>,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    10000.0
}
fn default_act() -> String {
    "silu".into()
}

impl Qwen3TtsConfig {
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let cfg: Qwen3TtsConfig = serde_json::from_str(&text).map_err(|e| Error::config(&path, e.to_string()))?;
        let t = &cfg.talker_config;
        for (what, act) in [("talker", &t.dims.hidden_act), ("code predictor", &t.code_predictor_config.hidden_act)] {
            if act != "silu" {
                return Err(Error::config(&path, format!("{what} hidden_act `{act}` is not supported (silu is)")));
            }
        }
        if t.num_code_groups < 2 {
            return Err(Error::config(&path, "talker_config.num_code_groups must be at least 2"));
        }
        Ok(cfg)
    }
}
