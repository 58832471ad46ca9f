//! `params.json` of a Voxtral-4B-TTS checkpoint, in Mistral's format: the backbone's arguments at
//! the top level, `multimodal.audio_model_args` (codebooks, special ids, the acoustic transformer)
//! and `multimodal.audio_tokenizer_args` (the codec, whose per-stage lists are comma-separated
//! strings such as `"decoder_convs_kernels_str": "3,4,4,4"`).
//!
//! Defaults follow mlx-audio 0.6.2 (`ModelConfig.from_dict`, `AudioTokenizerArgs`), which fills in
//! what the file leaves out.

use std::collections::BTreeMap;
use std::path::Path;

use infer_core::{Error, Result};
use serde::Deserialize;

/// Special codes at the front of every codebook: 0 = EMPTY_AUDIO, 1 = END_AUDIO.
pub const N_SPECIAL_CODES: usize = 2;
pub const END_AUDIO: u32 = 1;

#[derive(Debug, Clone, Deserialize)]
pub struct VoxtralTtsConfig {
    pub dim: usize,
    pub n_layers: usize,
    pub head_dim: usize,
    pub hidden_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub vocab_size: usize,
    #[serde(default = "default_backbone_theta")]
    pub rope_theta: f64,
    #[serde(default = "default_norm_eps")]
    pub norm_eps: f64,
    #[serde(default = "default_true")]
    pub tied_embeddings: bool,
    #[serde(default)]
    pub use_biases: bool,
    pub multimodal: Multimodal,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Multimodal {
    #[serde(default = "default_bos")]
    pub bos_token_id: u32,
    pub audio_model_args: AudioModelArgs,
    pub audio_tokenizer_args: CodecArgs,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AudioModelArgs {
    pub semantic_codebook_size: usize,
    pub acoustic_codebook_size: usize,
    pub n_acoustic_codebook: usize,
    #[serde(default = "default_audio_token")]
    pub audio_token_id: u32,
    #[serde(default = "default_begin_audio_token")]
    pub begin_audio_token_id: u32,
    pub acoustic_transformer_args: AcousticArgs,
}

#[derive(Debug, Clone, Deserialize)]
pub struct AcousticArgs {
    pub dim: usize,
    pub n_layers: usize,
    pub head_dim: usize,
    pub hidden_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    #[serde(default)]
    pub use_biases: bool,
    #[serde(default = "default_sigma_max")]
    pub sigma_max: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CodecArgs {
    #[serde(default = "default_sampling_rate")]
    pub sampling_rate: u32,
    pub pretransform_patch_size: usize,
    #[serde(default = "default_patch_kernel")]
    pub patch_proj_kernel_size: usize,
    pub semantic_codebook_size: usize,
    pub semantic_dim: usize,
    pub acoustic_codebook_size: usize,
    pub acoustic_dim: usize,
    pub dim: usize,
    pub hidden_dim: usize,
    pub head_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    #[serde(default = "default_qk_norm_eps")]
    pub qk_norm_eps: f64,
    #[serde(default = "default_true")]
    pub qk_norm: bool,
    #[serde(default = "default_codec_norm_eps")]
    pub norm_eps: f64,
    #[serde(default = "default_true")]
    pub layer_scale: bool,
    #[serde(default)]
    pub use_biases: bool,
    pub decoder_transformer_lengths_str: String,
    pub decoder_convs_kernels_str: String,
    pub decoder_convs_strides_str: String,
    /// Voice name -> index (the names of `voice_embedding/<name>.pt`).
    #[serde(default)]
    pub voice: BTreeMap<String, usize>,
}

/// One upsampling stage of the codec decoder: a (transposed) convolution, then transformer layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecStage {
    pub kernel: usize,
    pub stride: usize,
    pub layers: usize,
    /// Keys each query sees besides itself (mlx-audio 0.6.2 hard-codes 2, 4, 8, 16 per stage
    /// rather than deriving them from `attn_sliding_window_size`).
    pub window: usize,
}

fn default_backbone_theta() -> f64 {
    1e6
}
fn default_norm_eps() -> f64 {
    1e-5
}
fn default_true() -> bool {
    true
}
fn default_bos() -> u32 {
    1
}
fn default_audio_token() -> u32 {
    24
}
fn default_begin_audio_token() -> u32 {
    25
}
fn default_sigma_max() -> f64 {
    1.0
}
fn default_sampling_rate() -> u32 {
    24000
}
fn default_patch_kernel() -> usize {
    7
}
fn default_qk_norm_eps() -> f64 {
    1e-6
}
fn default_codec_norm_eps() -> f64 {
    0.01
}

/// The decoder's attention windows per stage in mlx-audio 0.6.2 (`window_sizes = [2, 4, 8, 16]`,
/// 16 for any later stage).
const STAGE_WINDOWS: [usize; 4] = [2, 4, 8, 16];

impl VoxtralTtsConfig {
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("params.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        Self::from_json(&text).map_err(|e| match e {
            Error::Config { message, .. } => Error::config(&path, message),
            other => other,
        })
    }

    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: VoxtralTtsConfig = serde_json::from_str(text).map_err(|e| {
            // serde says "missing field `dim` at line 3 column 1": keep the what.
            let msg = e.to_string();
            Error::config(Path::new("params.json"), msg.split(" at line ").next().unwrap_or(&msg).replace('`', ""))
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::config(Path::new("params.json"), m));
        let a = &self.multimodal.audio_model_args;
        let c = &self.multimodal.audio_tokenizer_args;
        self.codec_stages()?;
        if self.use_biases || a.acoustic_transformer_args.use_biases || c.use_biases {
            return bad("use_biases: true is not supported (Voxtral TTS has no biases)".into());
        }
        if !self.tied_embeddings {
            return bad("tied_embeddings: false is not supported (Voxtral TTS reads no output weight)".into());
        }
        if c.acoustic_dim != a.n_acoustic_codebook {
            return bad(format!(
                "audio_tokenizer_args.acoustic_dim {} differs from audio_model_args.n_acoustic_codebook {}",
                c.acoustic_dim, a.n_acoustic_codebook
            ));
        }
        if c.semantic_codebook_size != a.semantic_codebook_size || c.acoustic_codebook_size != a.acoustic_codebook_size
        {
            return bad("audio_tokenizer_args and audio_model_args disagree on the codebook sizes".into());
        }
        if a.acoustic_codebook_size < 2 {
            return bad("audio_model_args.acoustic_codebook_size must be at least 2 (FSQ levels)".into());
        }
        for (what, heads, kv) in [
            ("", self.n_heads, self.n_kv_heads),
            ("acoustic_transformer_args.", a.acoustic_transformer_args.n_heads, a.acoustic_transformer_args.n_kv_heads),
            ("audio_tokenizer_args.", c.n_heads, c.n_kv_heads),
        ] {
            if kv == 0 || heads % kv != 0 {
                return bad(format!("{what}n_heads {heads} is not a multiple of {what}n_kv_heads {kv}"));
            }
        }
        Ok(())
    }

    /// The codec decoder's stages, from the comma-separated `decoder_*_str` fields.
    pub fn codec_stages(&self) -> Result<Vec<CodecStage>> {
        let c = &self.multimodal.audio_tokenizer_args;
        let kernels = csv("decoder_convs_kernels_str", &c.decoder_convs_kernels_str)?;
        let strides = csv("decoder_convs_strides_str", &c.decoder_convs_strides_str)?;
        let layers = csv("decoder_transformer_lengths_str", &c.decoder_transformer_lengths_str)?;
        if kernels.len() != strides.len() || kernels.len() != layers.len() {
            return Err(Error::config(
                Path::new("params.json"),
                format!(
                    "audio_tokenizer_args: decoder_convs_kernels_str, decoder_convs_strides_str and decoder_transformer_lengths_str list {}, {} and {} stages",
                    kernels.len(),
                    strides.len(),
                    layers.len()
                ),
            ));
        }
        if let Some(i) = (0..kernels.len()).find(|&i| strides[i] == 0 || kernels[i] < strides[i]) {
            return Err(Error::config(
                Path::new("params.json"),
                format!("audio_tokenizer_args: stage {i} has kernel {} < stride {}", kernels[i], strides[i]),
            ));
        }
        Ok((0..kernels.len())
            .map(|i| CodecStage {
                kernel: kernels[i],
                stride: strides[i],
                layers: layers[i],
                window: STAGE_WINDOWS.get(i).copied().unwrap_or(16),
            })
            .collect())
    }

    pub fn audio(&self) -> &AudioModelArgs {
        &self.multimodal.audio_model_args
    }

    pub fn codec(&self) -> &CodecArgs {
        &self.multimodal.audio_tokenizer_args
    }

    /// Codes per frame: the semantic code, then one per acoustic codebook.
    pub fn codes_per_frame(&self) -> usize {
        1 + self.audio().n_acoustic_codebook
    }

    /// Rows of the semantic head: the codebook plus its special codes, padded up to a multiple of 128.
    pub fn semantic_head_rows(&self) -> usize {
        (self.audio().semantic_codebook_size / 128 + 1) * 128
    }

    /// Rows of the backbone's audio codebook embedding table: the padded semantic block, then the
    /// acoustic codebooks padded to a multiple of 128.
    pub fn audio_embedding_rows(&self) -> usize {
        let a = self.audio();
        self.semantic_head_rows() + (a.acoustic_codebook_size * a.n_acoustic_codebook).div_ceil(128) * 128
    }

    /// Output samples per frame: the patch size times every stage's upsampling.
    pub fn samples_per_frame(&self) -> Result<usize> {
        Ok(self.codec().pretransform_patch_size * self.codec_stages()?.iter().map(|s| s.stride).product::<usize>())
    }
}

fn csv(field: &str, s: &str) -> Result<Vec<usize>> {
    s.split(',').map(|p| p.trim().parse::<usize>()).collect::<std::result::Result<Vec<_>, _>>().map_err(|_| {
        Error::config(
            Path::new("params.json"),
            format!("audio_tokenizer_args.{field}: `{s}` is not a comma-separated list of integers"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kernels: &str) -> String {
        format!(
            r#"{{"dim": 8, "n_layers": 1, "head_dim": 4, "hidden_dim": 16, "n_heads": 2, "n_kv_heads": 1,
               "vocab_size": 100,
               "multimodal": {{
                 "audio_model_args": {{"semantic_codebook_size": 200, "acoustic_codebook_size": 21,
                   "n_acoustic_codebook": 3,
                   "acoustic_transformer_args": {{"dim": 8, "n_layers": 1, "head_dim": 4, "hidden_dim": 16,
                     "n_heads": 2, "n_kv_heads": 2}}}},
                 "audio_tokenizer_args": {{"pretransform_patch_size": 240, "semantic_codebook_size": 200,
                   "semantic_dim": 4, "acoustic_codebook_size": 21, "acoustic_dim": 3, "dim": 8, "hidden_dim": 16,
                   "head_dim": 4, "n_heads": 2, "n_kv_heads": 2, "decoder_transformer_lengths_str": "2,2,2,2",
                   "decoder_convs_kernels_str": "{kernels}", "decoder_convs_strides_str": "1,2,2,2"}}}}}}"#
        )
    }

    #[test]
    fn comma_separated_stages_and_derived_sizes() {
        let c = VoxtralTtsConfig::from_json(&params("3,4,4,4")).unwrap();
        let stages = c.codec_stages().unwrap();
        assert_eq!(
            stages.iter().map(|s| (s.kernel, s.stride, s.layers, s.window)).collect::<Vec<_>>(),
            [(3, 1, 2, 2), (4, 2, 2, 4), (4, 2, 2, 8), (4, 2, 2, 16)]
        );
        assert_eq!(c.samples_per_frame().unwrap(), 1920);
        assert_eq!(c.semantic_head_rows(), 256);
        assert_eq!(c.audio_embedding_rows(), 256 + 128);
        assert_eq!(c.codes_per_frame(), 4);
    }

    #[test]
    fn bad_fields_are_named() {
        let e = VoxtralTtsConfig::from_json(&params("3,4,x,4")).unwrap_err().to_string();
        assert!(e.contains("decoder_convs_kernels_str") && e.contains("3,4,x,4"), "{e}");
        let e = VoxtralTtsConfig::from_json(&params("3,4,4")).unwrap_err().to_string();
        assert!(e.contains("stages"), "{e}");
        let e = VoxtralTtsConfig::from_json(r#"{"dim": 8}"#).unwrap_err().to_string();
        assert!(e.contains("missing field"), "{e}");
    }
}
