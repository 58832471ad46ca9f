//! Codes -> the decoder's input latent: the semantic code looks up the EMA codebook
//! (`embedding_sum / max(cluster_usage, 1e-8)`, in f32), each acoustic code is an FSQ level mapped
//! to `2 i / (levels - 1) - 1`; the two are concatenated per frame (mlx-audio
//! `MistralAudioCodebook.decode`). Codes carry the +2 offset of the special codes.

use infer_core::{DType, Error, Result, Tensor, Weights};

use crate::config::{CodecArgs, N_SPECIAL_CODES};

pub struct Quantizer {
    /// `(semantic_codebook_size, semantic_dim)`, f32.
    semantic_codebook: Tensor,
    semantic_size: usize,
    acoustic_levels: usize,
    acoustic_dim: usize,
}

impl Quantizer {
    /// `w` is rooted at `audio_tokenizer.quantizer`.
    pub fn load(w: &Weights, c: &CodecArgs) -> Result<Self> {
        let s = w.prefixed("semantic_codebook");
        let sum = s.get_shaped("embedding_sum", &[c.semantic_codebook_size, c.semantic_dim])?.to_dtype(DType::F32)?;
        let usage = s.get_shaped("cluster_usage", &[c.semantic_codebook_size])?.to_dtype(DType::F32)?;
        let floor = Tensor::full(w.backend(), 1e-8, DType::F32, &[1])?;
        let usage = usage.maximum(&floor)?.reshape(&[c.semantic_codebook_size, 1])?;
        Ok(Quantizer {
            semantic_codebook: sum.div(&usage)?,
            semantic_size: c.semantic_codebook_size,
            acoustic_levels: c.acoustic_codebook_size,
            acoustic_dim: c.acoustic_dim,
        })
    }

    /// `frames` (`[semantic, acoustic...]` each) -> (1, t, semantic_dim + acoustic_dim), f32.
    pub fn decode(&self, frames: &[Vec<u32>]) -> Result<Tensor> {
        let special = N_SPECIAL_CODES as u32;
        let mut semantic = Vec::with_capacity(frames.len());
        let mut acoustic = Vec::with_capacity(frames.len() * self.acoustic_dim);
        for (i, f) in frames.iter().enumerate() {
            let bad = || Error::invalid(format!("codec frame {i}: codes {f:?} out of range"));
            if f.len() != 1 + self.acoustic_dim {
                return Err(Error::invalid(format!(
                    "codec frame {i} has {} codes, expected {}",
                    f.len(),
                    1 + self.acoustic_dim
                )));
            }
            let s = f[0].checked_sub(special).filter(|&s| (s as usize) < self.semantic_size).ok_or_else(bad)?;
            semantic.push(s);
            for &a in &f[1..] {
                let a = a.checked_sub(special).filter(|&a| (a as usize) < self.acoustic_levels).ok_or_else(bad)?;
                acoustic.push(2.0 * a as f32 / (self.acoustic_levels - 1) as f32 - 1.0);
            }
        }
        let backend = self.semantic_codebook.backend();
        let t = frames.len();
        let semantic = Tensor::from_u32(backend, &semantic, &[1, t])?.embedding(&self.semantic_codebook)?;
        let acoustic = Tensor::from_f32(backend, &acoustic, &[1, t, self.acoustic_dim])?;
        Tensor::concat(&[&semantic, &acoustic], 2)
    }
}
