//! The talker: a Qwen3 decoder over the sum of text and codec embeddings that emits the first
//! codebook of each 12 Hz frame.
//!
//! ```text
//! text ids  -> text_embedding -> fc2(silu(fc1(.)))  ┐
//!                                                   + -> decoder -> codec_head -> codebook-0 logits
//! codec ids -> codec_embedding ---------------------┘
//! ```

use infer_core::{DType, KvCache, Result, Tensor, Weights};
use infer_layers::Linear;

use crate::config::TalkerConfig;
use crate::embed_decoder::EmbedDecoder;

pub struct Talker {
    /// Kept in its stored float type when that is narrower than the compute type (the 151,936 x
    /// 2048 table is a third of the 0.6B checkpoint, and only a few rows a request are read);
    /// looked-up rows are converted, which is exact for a widening conversion.
    text_embedding: Tensor,
    dtype: DType,
    text_fc1: Linear,
    text_fc2: Linear,
    codec_embedding: Tensor,
    decoder: EmbedDecoder,
    codec_head: Linear,
    pub hidden: usize,
    pub vocab: usize,
}

impl Talker {
    /// `w` is rooted at `talker`.
    pub fn load(w: &Weights, cfg: &TalkerConfig) -> Result<Self> {
        let d = &cfg.dims;
        let (th, h) = (cfg.text_hidden_size, d.hidden_size);
        let proj = w.prefixed("text_projection");
        Ok(Talker {
            // A third of the checkpoint, of which a prompt reads a few rows: left in the file's
            // pages where the backend can, in its stored dtype (rows widened after lookup).
            text_embedding: w.get_table("model.text_embedding.weight", &[cfg.text_vocab_size, th])?,
            dtype: w.dtype(),
            text_fc1: Linear::load(&proj.prefixed("linear_fc1"), th, th, true)?,
            text_fc2: Linear::load(&proj.prefixed("linear_fc2"), h, th, true)?,
            codec_embedding: w.get_shaped("model.codec_embedding.weight", &[d.vocab_size, h])?,
            decoder: EmbedDecoder::load(&w.prefixed("model"), d)?,
            codec_head: Linear::load(&w.prefixed("codec_head"), d.vocab_size, h, false)?,
            hidden: h,
            vocab: d.vocab_size,
        })
    }

    /// Projected text embeddings of `ids`: (1, n, hidden).
    pub fn text_embed(&self, ids: &[u32]) -> Result<Tensor> {
        let ids = Tensor::from_u32(self.text_embedding.backend(), ids, &[1, ids.len()])?;
        let x = ids.embedding(&self.text_embedding)?.to_dtype(self.dtype)?;
        self.text_fc2.forward(&self.text_fc1.forward(&x)?.silu()?)
    }

    /// Codec embeddings of `ids`: (1, n, hidden).
    pub fn codec_embed(&self, ids: &[u32]) -> Result<Tensor> {
        let ids = Tensor::from_u32(self.codec_embedding.backend(), ids, &[1, ids.len()])?;
        ids.embedding(&self.codec_embedding)
    }

    pub fn new_cache(&self) -> KvCache {
        self.decoder.new_cache()
    }

    /// Runs `x` (1, t, hidden); returns the last position's hidden state (1, 1, hidden) and its
    /// codebook-0 logits.
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache) -> Result<(Tensor, Vec<f32>)> {
        let h = self.decoder.forward(x, cache)?;
        let last = h.narrow(1, h.dim(1) - 1, 1)?;
        let logits = self.codec_head.forward(&last)?.to_dtype(DType::F32)?.to_vec_f32()?;
        Ok((last, logits))
    }
}
