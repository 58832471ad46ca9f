//! The Voxtral codec's decoder (mlx-audio `VoxtralTTSAudioTokenizer.decode`): codes -> 24 kHz audio.
//!
//! ```text
//! codes -> quantizer -> latent (semantic_dim + acoustic_dim)
//!   -> [conv (stride 1, replicate pad) | transposed conv (stride s)] -> transformer layers   per stage
//!   -> output_proj conv (reflect pad) -> (t', patch) -> samples, frame-major
//! ```
//! Stages come from params.json's comma-separated `decoder_*_str` fields (`decoder_blocks.{2i}` the
//! conv, `decoder_blocks.{2i+1}` the layers). Everything is causal, so a prefix of the codes decodes
//! to a prefix of the audio: [`Codec::decode_stream`] re-decodes a context of earlier frames at least
//! as long as the decoder's receptive field and keeps only the new samples.

pub mod conv;
pub mod quantizer;
pub mod transformer;

use infer_core::{Result, Tensor, Weights};

use crate::config::{CodecStage, VoxtralTtsConfig};
use conv::{CausalConv, CausalConvTranspose, Pad};
use quantizer::Quantizer;
use transformer::TransformerBlock;

enum StageConv {
    Conv(CausalConv),
    Transpose(CausalConvTranspose),
}

struct Stage {
    conv: StageConv,
    transformer: TransformerBlock,
}

pub struct Codec {
    quantizer: Quantizer,
    stages: Vec<Stage>,
    output_proj: CausalConv,
    patch: usize,
    samples_per_frame: usize,
    context_frames: usize,
    pub sample_rate: u32,
}

impl Codec {
    /// `w` is the whole checkpoint; the codec lives under `audio_tokenizer`.
    pub fn load(w: &Weights, cfg: &VoxtralTtsConfig) -> Result<Self> {
        let c = cfg.codec();
        let w = w.prefixed("audio_tokenizer");
        let stage_cfgs = cfg.codec_stages()?;
        let stages = stage_cfgs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let cin = if i == 0 { c.semantic_dim + c.acoustic_dim } else { c.dim };
                let cw = w.prefixed(format!("decoder_blocks.{}.conv", 2 * i));
                // mlx-audio: a stride above 1 upsamples with a transposed conv.
                let conv = if s.stride > 1 {
                    StageConv::Transpose(CausalConvTranspose::load(&cw, cin, c.dim, s.kernel, s.stride)?)
                } else {
                    StageConv::Conv(CausalConv::load(&cw, cin, c.dim, s.kernel, 1, Pad::Replicate)?)
                };
                let transformer = TransformerBlock::load(
                    &w.prefixed(format!("decoder_blocks.{}", 2 * i + 1)),
                    c,
                    s.layers,
                    s.window,
                )?;
                Ok(Stage { conv, transformer })
            })
            .collect::<Result<Vec<_>>>()?;
        let output_proj = CausalConv::load(
            &w.prefixed("output_proj.conv"),
            c.dim,
            c.pretransform_patch_size,
            c.patch_proj_kernel_size,
            1,
            Pad::Reflect,
        )?;
        Ok(Codec {
            quantizer: Quantizer::load(&w.prefixed("quantizer"), c)?,
            stages,
            output_proj,
            patch: c.pretransform_patch_size,
            samples_per_frame: cfg.samples_per_frame()?,
            context_frames: receptive_field_frames(&stage_cfgs, c.patch_proj_kernel_size),
            sample_rate: c.sampling_rate,
        })
    }

    pub fn samples_per_frame(&self) -> usize {
        self.samples_per_frame
    }

    /// Frames of earlier context a streamed chunk needs to decode exactly as the whole would.
    pub fn context_frames(&self) -> usize {
        self.context_frames
    }

    /// The decoder's activations: the latent, then per stage the conv's and the layers' outputs
    /// (each `(1, t, channels)`), then the waveform `(samples)`.
    pub fn decode_traced(&self, frames: &[Vec<u32>]) -> Result<Vec<(String, Tensor)>> {
        let mut trace = Vec::new();
        let latent = self.quantizer.decode(frames)?;
        trace.push(("latent".to_string(), latent.clone()));
        let mut x = latent.transpose(1, 2)?;
        for (i, s) in self.stages.iter().enumerate() {
            x = match &s.conv {
                StageConv::Conv(c) => c.forward(&x)?,
                StageConv::Transpose(c) => c.forward(&x)?,
            };
            let y = x.transpose(1, 2)?.contiguous()?;
            trace.push((format!("conv{i}"), y.clone()));
            let y = s.transformer.forward(&y)?;
            trace.push((format!("stage{i}"), y.clone()));
            x = y.transpose(1, 2)?;
        }
        // (1, patch, t') -> (t', patch) -> samples: each step's patch is contiguous in time.
        let out = self.output_proj.forward(&x)?;
        let t = out.dim(2);
        trace.push(("waveform".to_string(), out.transpose(1, 2)?.contiguous()?.reshape(&[t * self.patch])?));
        Ok(trace)
    }

    /// Codes (`[semantic, acoustic...]` per frame) -> samples.
    pub fn decode(&self, frames: &[Vec<u32>]) -> Result<Vec<f32>> {
        if frames.is_empty() {
            return Ok(Vec::new());
        }
        let trace = self.decode_traced(frames)?;
        trace.last().expect("waveform is traced").1.to_vec_f32()
    }

    pub fn decode_stream(&self) -> DecodeStream<'_> {
        DecodeStream { codec: self, frames: Vec::new(), done: 0 }
    }
}

/// Incremental decoding: each push decodes the new frames with enough earlier context that the
/// samples equal those of one decode of everything.
pub struct DecodeStream<'a> {
    codec: &'a Codec,
    frames: Vec<Vec<u32>>,
    /// Frames whose samples were returned.
    done: usize,
}

impl DecodeStream<'_> {
    /// Adds frames and returns their samples.
    pub fn push(&mut self, frames: &[Vec<u32>]) -> Result<Vec<f32>> {
        if frames.is_empty() {
            return Ok(Vec::new());
        }
        self.frames.extend_from_slice(frames);
        let start = self.done.saturating_sub(self.codec.context_frames);
        let samples = self.codec.decode(&self.frames[start..])?;
        let skip = (self.done - start) * self.codec.samples_per_frame;
        self.done = self.frames.len();
        // Only the context is needed from the past.
        let keep_from = self.done.saturating_sub(self.codec.context_frames);
        if keep_from > 0 {
            self.frames.drain(..keep_from);
            self.done -= keep_from;
        }
        Ok(samples[skip..].to_vec())
    }
}

/// A bound (in frames, rounded up, plus one) on how far back any output sample depends on the
/// input, summed over the decoder: each stage's conv reach (a transposed conv of kernel k and stride
/// s reaches ceil((k - 1) / s) input steps back), `layers * window` attention steps at the stage's
/// rate, and the output conv's reach at the final rate.
fn receptive_field_frames(stages: &[CodecStage], output_kernel: usize) -> usize {
    let mut rate = 1usize;
    let mut reach = 0f64;
    for s in stages {
        reach += (s.kernel - 1).div_ceil(s.stride) as f64 / rate as f64;
        rate *= s.stride;
        reach += (s.layers * s.window) as f64 / rate as f64;
    }
    reach += (output_kernel - 1) as f64 / rate as f64;
    reach.ceil() as usize + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receptive_field_of_the_real_decoder() {
        let stages: Vec<CodecStage> = [(3, 1, 2), (4, 2, 4), (4, 2, 8), (4, 2, 16)]
            .iter()
            .map(|&(kernel, stride, window)| CodecStage { kernel, stride, layers: 2, window })
            .collect();
        // (2 + 4) + (2 + 4) + (1 + 4) + (0.5 + 4) + 0.75 = 22.25 -> 23 + 1.
        assert_eq!(receptive_field_frames(&stages, 7), 24);
    }
}
