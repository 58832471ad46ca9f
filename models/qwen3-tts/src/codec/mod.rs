//! The Qwen3-TTS 12 Hz codec ("Qwen3-TTS-Tokenizer-12Hz") as an `AudioCodec`: 16 codebooks of
//! 2048 codes at 12.5 frames a second <-> 24 kHz mono audio (1920 samples a frame).
//!
//! - [`Codec12Hz::load`] reads the folder `Qwen3TTSTokenizerV2Model.save_pretrained` writes
//!   (config.json + model.safetensors); [`find_codec_dir`] finds it next to a talker checkpoint.
//! - [`Codec12Hz::decode`] / [`Codec12Hz::decode_stream`]: codes -> samples, whole or streamed.
//! - [`Codec12Hz::encode`]: samples -> codes (for in-context voice cloning).
//!
//! Reference: qwen-tts 0.1.1 `qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py`
//! and the Mimi encoder of transformers 4.57.3.

mod config;
mod decoder;
mod encoder;
mod layers;
mod quantizer;
mod state;
mod stream;
mod transformer;
mod weight_norm;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use infer_core::audio::{Audio, AudioCodec};
use infer_core::{Backend, DType, Error, Result, Tensor, Weights};

pub use config::{CodecConfig, DecoderConfig, EncoderConfig};
pub use stream::{DecodeStream, SEGMENT_CONTEXT, SEGMENT_FRAMES};

use decoder::Decoder;
use encoder::Encoder;
use state::Carry;

/// Folder name of the codec inside a Qwen3-TTS checkpoint.
pub const SUBFOLDER: &str = "speech_tokenizer";
/// Folder name of the codec as released on its own, found beside the talker checkpoint.
pub const SIBLING: &str = "Qwen3-TTS-Tokenizer-12Hz";

/// The codec folder for the talker checkpoint `model_dir`: `<model_dir>/speech_tokenizer/`, else
/// a sibling `Qwen3-TTS-Tokenizer-12Hz/`. A folder counts when it holds a config.json.
pub fn find_codec_dir(model_dir: &Path) -> Result<PathBuf> {
    let inside = model_dir.join(SUBFOLDER);
    let beside = model_dir.parent().unwrap_or(Path::new(".")).join(SIBLING);
    for dir in [&inside, &beside] {
        if dir.join("config.json").is_file() {
            return Ok(dir.clone());
        }
    }
    Err(Error::checkpoint(
        model_dir,
        format!(
            "no 12 Hz codec (Qwen3-TTS-Tokenizer-12Hz) found: looked for {} and {} (each with config.json and \
             model.safetensors)",
            inside.display(),
            beside.display()
        ),
    ))
}

/// The loaded codec. Cheap to share: decoding takes `&self`.
pub struct Codec12Hz {
    config: CodecConfig,
    decoder: Decoder,
    /// Loaded on first use: only voice cloning encodes, and the Mimi encoder is a third of the
    /// codec's weights (its tensors stay in the mapped file until then).
    encoder: OnceLock<Encoder>,
    weights: Weights,
    backend: Backend,
    dtype: DType,
}

impl Codec12Hz {
    /// Loads `dir/config.json` + safetensors, weights converted to `dtype`.
    pub fn load(dir: &Path, backend: &Backend, dtype: DType) -> Result<Self> {
        let config = CodecConfig::from_dir(dir)?;
        let w = Weights::from_dir(dir, backend, dtype)?;
        let decoder = Decoder::load(&w.prefixed("decoder"), &config.decoder_config)?;
        Ok(Codec12Hz { config, decoder, encoder: OnceLock::new(), weights: w, backend: backend.clone(), dtype })
    }

    /// The encoder, loaded on the first call.
    fn encoder(&self) -> Result<&Encoder> {
        if let Some(e) = self.encoder.get() {
            return Ok(e);
        }
        let c = &self.config;
        let loaded =
            Encoder::load(&self.weights.prefixed("encoder"), &c.encoder_config, c.encoder_valid_num_quantizers)?;
        // A concurrent first call may have won the race; either copy is the same.
        Ok(self.encoder.get_or_init(|| loaded))
    }

    /// [`find_codec_dir`] then [`Codec12Hz::load`].
    pub fn load_for_model(model_dir: &Path, backend: &Backend, dtype: DType) -> Result<Self> {
        Self::load(&find_codec_dir(model_dir)?, backend, dtype)
    }

    pub fn config(&self) -> &CodecConfig {
        &self.config
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output samples per code frame (1920).
    pub fn samples_per_frame(&self) -> usize {
        self.config.decode_upsample_rate
    }

    /// Entries per codebook; codes must be below this.
    pub fn codebook_size(&self) -> usize {
        self.config.decoder_config.codebook_size
    }

    /// A stateful decoder for codes that arrive in pieces.
    pub fn decode_stream(&self) -> DecodeStream<'_> {
        DecodeStream::new(self)
    }

    /// Codes `[frame][codebook]` -> samples (`frames * 1920`), as the reference's `decode`.
    pub fn decode_samples(&self, codes: &[Vec<u32>]) -> Result<Vec<f32>> {
        if codes.is_empty() {
            return Err(Error::invalid("codec decode: no code frames"));
        }
        let mut stream = self.decode_stream();
        let mut out = stream.push(codes)?;
        out.extend(stream.finish()?);
        Ok(out)
    }

    /// Samples at `input_sample_rate` (24 kHz) -> codes `[frame][codebook]`, `ceil(n / 1920)`
    /// frames, as the reference's `encode`.
    pub fn encode_samples(&self, samples: &[f32]) -> Result<Vec<Vec<u32>>> {
        if samples.is_empty() {
            return Err(Error::invalid("codec encode: no samples"));
        }
        if let Some(i) = samples.iter().position(|s| !s.is_finite()) {
            return Err(Error::invalid(format!("codec encode: sample {i} is {}", samples[i])));
        }
        let wav = Tensor::from_f32(&self.backend, samples, &[1, 1, samples.len()])?.to_dtype(self.dtype)?;
        let mut codes = self.encoder()?.encode(&wav, self.config.encoder_valid_num_quantizers)?;
        codes.truncate(samples.len().div_ceil(self.config.encode_downsample_rate));
        Ok(codes)
    }

    /// Checks shape and range of `frames`; `first` is the index of `frames[0]` in the utterance.
    fn check_codes(&self, frames: &[Vec<u32>], first: usize) -> Result<()> {
        let (books, size) = (self.config.decoder_config.num_quantizers, self.codebook_size());
        for (i, frame) in frames.iter().enumerate() {
            if frame.len() != books {
                return Err(Error::invalid(format!(
                    "codec decode: frame {} has {} codes, expected {books} (one per codebook)",
                    first + i,
                    frame.len()
                )));
            }
            if let Some(q) = frame.iter().position(|&c| c as usize >= size) {
                return Err(Error::invalid(format!(
                    "codec decode: frame {}, codebook {q}: code {} is out of range (codebook size {size})",
                    first + i,
                    frame[q]
                )));
            }
        }
        Ok(())
    }

    /// One decoder pass over validated frames, continuing from `carry`.
    fn decode_frames(&self, frames: &[Vec<u32>], carry: &mut Carry) -> Result<Vec<f32>> {
        if frames.is_empty() {
            return Ok(Vec::new());
        }
        self.decoder.forward(&self.code_ids(frames)?, carry)?.to_vec_f32()
    }

    /// Codes as one `(t,)` u32 tensor per codebook.
    fn code_ids(&self, frames: &[Vec<u32>]) -> Result<Vec<Tensor>> {
        (0..self.config.decoder_config.num_quantizers)
            .map(|q| {
                let ids: Vec<u32> = frames.iter().map(|f| f[q]).collect();
                Tensor::from_u32(&self.backend, &ids, &[ids.len()])
            })
            .collect()
    }

    /// Debug taps for parity tests: decoder front activations `(channels, t)` row-major.
    #[doc(hidden)]
    pub fn decoder_front(&self, codes: &[Vec<u32>]) -> Result<Vec<(&'static str, Vec<f32>)>> {
        self.check_codes(codes, 0)?;
        let taps = self.decoder.front_activations(&self.code_ids(codes)?)?;
        taps.into_iter().map(|(name, t)| Ok((name, t.to_vec_f32()?))).collect()
    }

    /// Debug tap for parity tests: the encoder's `(hidden, frames)` embeddings before quantisation.
    #[doc(hidden)]
    pub fn encoder_embeddings(&self, samples: &[f32]) -> Result<Vec<f32>> {
        let wav = Tensor::from_f32(&self.backend, samples, &[1, 1, samples.len()])?.to_dtype(self.dtype)?;
        self.encoder()?.embed(&wav)?.to_vec_f32()
    }
}

impl AudioCodec for Codec12Hz {
    fn sample_rate(&self) -> u32 {
        self.config.output_sample_rate
    }

    fn frame_rate(&self) -> f64 {
        self.config.output_sample_rate as f64 / self.config.decode_upsample_rate as f64
    }

    fn num_codebooks(&self) -> usize {
        self.config.decoder_config.num_quantizers
    }

    fn encode(&self, audio: &Audio) -> Result<Vec<Vec<u32>>> {
        let want = self.config.input_sample_rate;
        if audio.sample_rate != want {
            return Err(Error::invalid(format!(
                "codec encode: audio is {} Hz, the codec takes {want} Hz (resample first)",
                audio.sample_rate
            )));
        }
        self.encode_samples(&audio.samples)
    }

    fn decode(&self, codes: &[Vec<u32>]) -> Result<Audio> {
        Ok(Audio::new(self.decode_samples(codes)?, self.sample_rate()))
    }
}
