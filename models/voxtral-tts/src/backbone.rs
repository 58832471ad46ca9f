//! The backbone: a Mistral decoder (interleaved RoPE, GQA, SwiGLU) over embeddings, which emits one
//! hidden state per audio frame. Its input is a token embedding (prompt), a voice row (the prompt's
//! `[AUDIO]` positions) or the sum of the previous frame's codebook embeddings (generation).
//!
//! ```text
//! x -> [x + attn(rms(x)) -> x + swiglu(rms(x))] x n_layers -> rms -> hidden
//! ```
//! RoPE pairs (x0, x1), (x2, x3), ... as Mistral's native checkpoints do (mlx-audio:
//! `rope_traditional=True`); the attention scale is head_dim^-0.5.

use infer_core::{DType, KvCache, Result, RopeLayout, Tensor, Weights};
use infer_layers::{AttentionConfig, BlockConfig, BlockNames, DecoderBlock, KvTarget, MlpConfig, RmsNorm, Rotary};

use crate::config::{VoxtralTtsConfig, N_SPECIAL_CODES};

pub struct Backbone {
    /// In its stored dtype, possibly left in the checkpoint's pages (only looked up).
    tok_embeddings: Tensor,
    /// The compute dtype (looked-up token rows are converted to it).
    dtype: DType,
    /// One table for all codebooks: the semantic codebook at row 0, acoustic codebook `k` at
    /// `semantic_size + k * acoustic_size` (each size including the two special codes).
    audio_embeddings: Tensor,
    codebook_offsets: Vec<u32>,
    blocks: Vec<DecoderBlock>,
    norm: RmsNorm,
    rotary: Rotary,
    pub dim: usize,
}

impl Backbone {
    /// `w` is the whole checkpoint (Mistral names, see [`crate::names`]).
    pub fn load(w: &Weights, cfg: &VoxtralTtsConfig) -> Result<Self> {
        let (dim, eps) = (cfg.dim, cfg.norm_eps);
        let attention = AttentionConfig::new(dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
        let block = BlockConfig::new(attention, MlpConfig::new(dim, cfg.hidden_dim), eps).names(BlockNames::MISTRAL);
        let blocks = DecoderBlock::load_stack(w, cfg.n_layers, |_| block.clone())?;
        let a = cfg.audio();
        let semantic = a.semantic_codebook_size + N_SPECIAL_CODES;
        let acoustic = a.acoustic_codebook_size + N_SPECIAL_CODES;
        let codebook_offsets =
            std::iter::once(0).chain((0..a.n_acoustic_codebook).map(|k| (semantic + k * acoustic) as u32)).collect();
        let mm = w.prefixed("mm_audio_embeddings");
        Ok(Backbone {
            // 131072 rows of which a prompt reads a few: a table (never a product: the backbone
            // has no text head), left in the file's pages where the backend can.
            tok_embeddings: mm.get_table("tok_embeddings.weight", &[cfg.vocab_size, dim])?,
            dtype: w.dtype(),
            audio_embeddings: mm
                .get_shaped("audio_codebook_embeddings.embeddings.weight", &[cfg.audio_embedding_rows(), dim])?,
            codebook_offsets,
            blocks,
            norm: RmsNorm::load(&w.prefixed("norm"), dim, eps)?,
            rotary: Rotary::new(cfg.head_dim, cfg.rope_theta, RopeLayout::Interleaved, w.dtype())?,
            dim,
        })
    }

    pub fn new_cache(&self) -> KvCache {
        KvCache::uniform(self.blocks.len(), 0)
    }

    /// Token embeddings of `ids`: (1, n, dim).
    pub fn embed_tokens(&self, ids: &[u32]) -> Result<Tensor> {
        Tensor::from_u32(self.tok_embeddings.backend(), ids, &[1, ids.len()])?
            .embedding(&self.tok_embeddings)?
            .to_dtype(self.dtype)
    }

    /// The next step's input for a generated frame: the sum of its codes' embeddings, each codebook
    /// at its own offset in the shared table: (1, 1, dim).
    pub fn embed_frame(&self, codes: &[u32]) -> Result<Tensor> {
        let ids: Vec<u32> = codes.iter().zip(&self.codebook_offsets).map(|(c, o)| c + o).collect();
        let rows = Tensor::from_u32(self.audio_embeddings.backend(), &ids, &[1, ids.len()])?
            .embedding(&self.audio_embeddings)?;
        rows.sum_keepdim(1)
    }

    /// `x` (1, t, dim) at the cache's next positions -> final-normed hidden states (1, t, dim).
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let angles = self.rotary.angles(x.backend(), cache.offset(), x.dim(1))?;
        let mut x = x.clone();
        for (i, b) in self.blocks.iter().enumerate() {
            x = b.forward(&x, &angles, &mut KvTarget::One { cache: cache.layer(i)?, mask: None })?;
        }
        self.norm.forward(&x)
    }
}
