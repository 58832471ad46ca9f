//! config.json of the 12 Hz codec as `Qwen3TTSTokenizerV2Config.save_pretrained` writes it: a Mimi
//! encoder config and a Qwen3-TTS decoder config. Defaults are the reference's (qwen-tts 0.1.1,
//! transformers 4.57.3 `MimiConfig`), so a config.json that omits a field means the same here.

use std::path::Path;

use infer_core::{Error, Result};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct CodecConfig {
    #[serde(default)]
    pub model_type: Option<String>,
    #[serde(default)]
    pub encoder_config: EncoderConfig,
    pub decoder_config: DecoderConfig,
    #[serde(default = "d16")]
    pub encoder_valid_num_quantizers: usize,
    #[serde(default = "d24000")]
    pub input_sample_rate: u32,
    #[serde(default = "d24000")]
    pub output_sample_rate: u32,
    #[serde(default = "d1920")]
    pub decode_upsample_rate: usize,
    #[serde(default = "d1920")]
    pub encode_downsample_rate: usize,
}

/// The decoder ("code2wav"): RVQ lookup, pre-conv, sliding-window pre-transformer, ConvNeXt
/// upsampling and the BigVGAN-style waveform decoder.
#[derive(Debug, Clone, Deserialize)]
pub struct DecoderConfig {
    #[serde(default = "d2048")]
    pub codebook_size: usize,
    /// Width of the quantizer's input/output projections; the codebooks are half as wide.
    /// The reference has no default for it (its config class never sets it).
    pub codebook_dim: usize,
    #[serde(default = "d1024")]
    pub hidden_size: usize,
    #[serde(default = "d1024")]
    pub latent_dim: usize,
    #[serde(default = "d10000")]
    pub rope_theta: f64,
    #[serde(default = "d16")]
    pub num_attention_heads: usize,
    #[serde(default = "d16")]
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default = "d72")]
    pub sliding_window: usize,
    #[serde(default = "d3072")]
    pub intermediate_size: usize,
    #[serde(default = "silu")]
    pub hidden_act: String,
    #[serde(default = "d1e5")]
    pub rms_norm_eps: f64,
    #[serde(default = "d8")]
    pub num_hidden_layers: usize,
    #[serde(default = "d16")]
    pub num_quantizers: usize,
    #[serde(default = "upsample_rates")]
    pub upsample_rates: Vec<usize>,
    #[serde(default = "upsampling_ratios")]
    pub upsampling_ratios: Vec<usize>,
    #[serde(default = "d1536")]
    pub decoder_dim: usize,
}

impl DecoderConfig {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Output samples per code frame: the product of every upsampling stage.
    pub fn samples_per_frame(&self) -> usize {
        self.upsample_rates.iter().chain(&self.upsampling_ratios).product()
    }
}

/// The Mimi encoder (transformers `MimiConfig`); only the encoder half is used.
#[derive(Debug, Clone, Deserialize)]
pub struct EncoderConfig {
    #[serde(default = "d24000")]
    pub sampling_rate: u32,
    /// Saved as `_frame_rate` by `MimiConfig`; `frame_rate` is accepted too.
    #[serde(default, alias = "_frame_rate")]
    pub frame_rate: Option<f64>,
    #[serde(default = "d1")]
    pub audio_channels: usize,
    #[serde(default = "d512")]
    pub hidden_size: usize,
    #[serde(default = "d64")]
    pub num_filters: usize,
    #[serde(default = "d1")]
    pub num_residual_layers: usize,
    #[serde(default = "mimi_ratios")]
    pub upsampling_ratios: Vec<usize>,
    #[serde(default = "d7")]
    pub kernel_size: usize,
    #[serde(default = "d3")]
    pub last_kernel_size: usize,
    #[serde(default = "d3")]
    pub residual_kernel_size: usize,
    #[serde(default = "d2")]
    pub dilation_growth_rate: usize,
    #[serde(default = "yes")]
    pub use_causal_conv: bool,
    #[serde(default = "constant")]
    pub pad_mode: String,
    #[serde(default = "d2")]
    pub compress: usize,
    #[serde(default = "d2048")]
    pub codebook_size: usize,
    #[serde(default = "d256")]
    pub codebook_dim: usize,
    #[serde(default = "d32")]
    pub num_quantizers: usize,
    #[serde(default)]
    pub use_conv_shortcut: bool,
    #[serde(default = "d256")]
    pub vector_quantization_hidden_dimension: usize,
    #[serde(default = "d1")]
    pub num_semantic_quantizers: usize,
    #[serde(default = "d8")]
    pub num_hidden_layers: usize,
    #[serde(default = "d2048")]
    pub intermediate_size: usize,
    #[serde(default = "d8")]
    pub num_attention_heads: usize,
    #[serde(default = "d8")]
    pub num_key_value_heads: usize,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default = "gelu")]
    pub hidden_act: String,
    #[serde(default = "d1e5")]
    pub norm_eps: f64,
    #[serde(default = "d10000")]
    pub rope_theta: f64,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub use_streaming: bool,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        serde_json::from_str("{}").expect("every MimiConfig field has a default")
    }
}

impl EncoderConfig {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Samples per frame of the SEANet encoder (before the stride-2 downsample).
    pub fn hop_length(&self) -> usize {
        self.upsampling_ratios.iter().product()
    }

    /// Kernel of the downsampling conv: `2 * int(encodec_frame_rate / frame_rate)` (Mimi).
    pub fn downsample_kernel(&self) -> usize {
        let encodec_rate = (self.sampling_rate as f64 / self.hop_length().max(1) as f64).ceil();
        let frame_rate = self.frame_rate.unwrap_or(encodec_rate / 2.0);
        2 * (encodec_rate / frame_rate) as usize
    }
}

impl CodecConfig {
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let cfg: CodecConfig = serde_json::from_str(&text).map_err(|e| {
            let msg = e.to_string();
            Error::config(&path, msg.split(" at line ").next().unwrap_or(&msg).replace('`', ""))
        })?;
        cfg.validate().map_err(|m| Error::config(&path, m))?;
        Ok(cfg)
    }

    /// Rejects what this implementation does not run, naming the field.
    fn validate(&self) -> std::result::Result<(), String> {
        if let Some(t) = &self.model_type {
            if t != "qwen3_tts_tokenizer_12hz" {
                return Err(format!("model_type is {t:?}, expected \"qwen3_tts_tokenizer_12hz\""));
            }
        }
        let d = &self.decoder_config;
        if d.hidden_act != "silu" {
            return Err(format!("decoder_config.hidden_act {:?} is not supported (silu)", d.hidden_act));
        }
        if d.num_quantizers < 2 {
            return Err("decoder_config.num_quantizers must be at least 2 (1 semantic + acoustic)".into());
        }
        if d.num_key_value_heads == 0 || !d.num_attention_heads.is_multiple_of(d.num_key_value_heads) {
            return Err("decoder_config.num_attention_heads must be a multiple of num_key_value_heads".into());
        }
        if !d.codebook_dim.is_multiple_of(2) {
            return Err(format!("decoder_config.codebook_dim {} must be even", d.codebook_dim));
        }
        if d.samples_per_frame() != self.decode_upsample_rate {
            return Err(format!(
                "decode_upsample_rate {} differs from the decoder's upsampling product {}",
                self.decode_upsample_rate,
                d.samples_per_frame()
            ));
        }
        let e = &self.encoder_config;
        let unsupported = [
            (!e.use_causal_conv, "encoder_config.use_causal_conv = false"),
            (e.use_conv_shortcut, "encoder_config.use_conv_shortcut = true"),
            (e.use_streaming, "encoder_config.use_streaming = true"),
            (e.pad_mode != "constant", "encoder_config.pad_mode other than \"constant\""),
            (e.audio_channels != 1, "encoder_config.audio_channels other than 1"),
            (!matches!(e.hidden_act.as_str(), "gelu" | "gelu_python"), "encoder_config.hidden_act other than gelu"),
        ];
        if let Some((_, what)) = unsupported.iter().find(|(bad, _)| *bad) {
            return Err(format!("{what} is not supported"));
        }
        if e.codebook_dim != e.vector_quantization_hidden_dimension {
            return Err("encoder_config.codebook_dim must equal vector_quantization_hidden_dimension".into());
        }
        if e.codebook_size != d.codebook_size {
            return Err(format!(
                "encoder codebook_size {} differs from the decoder's {}",
                e.codebook_size, d.codebook_size
            ));
        }
        if self.encoder_valid_num_quantizers > e.num_quantizers || self.encoder_valid_num_quantizers != d.num_quantizers
        {
            return Err(format!(
                "encoder_valid_num_quantizers {} must equal decoder_config.num_quantizers {} and not exceed \
                 encoder_config.num_quantizers {}",
                self.encoder_valid_num_quantizers, d.num_quantizers, e.num_quantizers
            ));
        }
        if e.num_semantic_quantizers != 1 {
            return Err("encoder_config.num_semantic_quantizers other than 1 is not supported".into());
        }
        if e.hop_length() * 2 != self.encode_downsample_rate {
            return Err(format!(
                "encode_downsample_rate {} is not twice the encoder hop {}",
                self.encode_downsample_rate,
                e.hop_length()
            ));
        }
        Ok(())
    }
}

fn d1() -> usize {
    1
}
fn d2() -> usize {
    2
}
fn d3() -> usize {
    3
}
fn d7() -> usize {
    7
}
fn d8() -> usize {
    8
}
fn d16() -> usize {
    16
}
fn d32() -> usize {
    32
}
fn d64() -> usize {
    64
}
fn d72() -> usize {
    72
}
fn d256() -> usize {
    256
}
fn d512() -> usize {
    512
}
fn d1024() -> usize {
    1024
}
fn d1536() -> usize {
    1536
}
fn d1920() -> usize {
    1920
}
fn d2048() -> usize {
    2048
}
fn d3072() -> usize {
    3072
}
fn d24000() -> u32 {
    24000
}
fn d10000() -> f64 {
    10000.0
}
fn d1e5() -> f64 {
    1e-5
}
fn yes() -> bool {
    true
}
fn silu() -> String {
    "silu".into()
}
fn gelu() -> String {
    "gelu".into()
}
fn constant() -> String {
    "constant".into()
}
fn upsample_rates() -> Vec<usize> {
    vec![8, 5, 4, 3]
}
fn upsampling_ratios() -> Vec<usize> {
    vec![2, 2]
}
fn mimi_ratios() -> Vec<usize> {
    vec![8, 6, 5, 4]
}
