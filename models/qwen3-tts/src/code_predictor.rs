//! The code predictor ("sub-talker"): a small Qwen3 decoder that, given the talker's hidden state
//! and the frame's first code, emits the remaining codebooks one at a time, each with its own
//! embedding table and head.
//!
//! ```text
//! [talker hidden, emb0(c0)] -> proj -> decoder -> head_1 -> c1
//! emb_1(c1)                 -> proj -> decoder -> head_2 -> c2   ... up to c15
//! ```
//! The embedding tables live in the talker's width; `proj` (`small_to_mtp_projection`) maps them
//! to the predictor's width when the two differ (1.7B) and is the identity otherwise (0.6B).

use infer_core::{DType, KvCache, Result, Tensor, Weights};
use infer_layers::Linear;

use crate::config::TalkerConfig;
use crate::embed_decoder::EmbedDecoder;

pub struct CodePredictor {
    proj: Option<Linear>,
    /// Embedding tables of codebooks 1.., in the talker's width.
    embeddings: Vec<Tensor>,
    decoder: EmbedDecoder,
    heads: Vec<Linear>,
    pub vocab: usize,
}

impl CodePredictor {
    /// `w` is rooted at `talker.code_predictor`.
    pub fn load(w: &Weights, cfg: &TalkerConfig) -> Result<Self> {
        let d = &cfg.code_predictor_config;
        let (talker_h, h) = (cfg.dims.hidden_size, d.hidden_size);
        let groups = cfg.num_code_groups - 1;
        let proj = if w.contains("small_to_mtp_projection.weight") || talker_h != h {
            Some(Linear::load(&w.prefixed("small_to_mtp_projection"), h, talker_h, true)?)
        } else {
            None
        };
        let embeddings = (0..groups)
            .map(|i| w.get_shaped(&format!("model.codec_embedding.{i}.weight"), &[d.vocab_size, talker_h]))
            .collect::<Result<Vec<_>>>()?;
        let heads = (0..groups)
            .map(|i| Linear::load(&w.prefixed(format!("lm_head.{i}")), d.vocab_size, h, false))
            .collect::<Result<Vec<_>>>()?;
        Ok(CodePredictor {
            proj,
            embeddings,
            // A frame is one sequence: the talker's hidden state, then one position per code.
            decoder: EmbedDecoder::load(&w.prefixed("model"), d)?.with_angle_table(w.backend(), groups + 1)?,
            heads,
            vocab: d.vocab_size,
        })
    }

    /// Number of codebooks it predicts (all but the first).
    pub fn groups(&self) -> usize {
        self.heads.len()
    }

    /// Embeddings of `codes` in codebook `group + 1`: (1, n, talker hidden).
    pub fn embed(&self, group: usize, codes: &[u32]) -> Result<Tensor> {
        let table = &self.embeddings[group];
        Tensor::from_u32(table.backend(), codes, &[1, codes.len()])?.embedding(table)
    }

    /// A cache for [`CodePredictor::predict`], reused across frames: its buffers (room for a
    /// frame's 16 positions) are allocated on the first frame only.
    pub fn new_cache(&self) -> KvCache {
        self.decoder.new_cache()
    }

    /// Predicts codebooks 1.. of one frame. `pick(group, logits)` chooses each code. `cache`
    /// (from [`CodePredictor::new_cache`]) is emptied first: each frame is its own sequence.
    pub fn predict(
        &self,
        talker_hidden: &Tensor,
        first_code_embed: &Tensor,
        cache: &mut KvCache,
        pick: &mut dyn FnMut(usize, &mut [f32]) -> u32,
    ) -> Result<Vec<u32>> {
        cache.clear();
        let mut x = Tensor::concat(&[talker_hidden, first_code_embed], 1)?;
        let mut codes = Vec::with_capacity(self.groups());
        for g in 0..self.groups() {
            if g > 0 {
                x = self.embed(g - 1, &codes[g - 1..g])?;
            }
            let input = match &self.proj {
                Some(p) => p.forward(&x)?,
                None => x.clone(),
            };
            let h = self.decoder.forward(&input, cache)?;
            let last = h.narrow(1, h.dim(1) - 1, 1)?;
            let mut logits = self.heads[g].forward(&last)?.to_dtype(DType::F32)?.to_vec_f32()?;
            codes.push(pick(g, &mut logits));
        }
        Ok(codes)
    }
}
