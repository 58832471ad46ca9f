//! Split residual vector quantisation: codebook 0 ("semantic") and codebooks 1.. ("acoustic")
//! each have their own RVQ with 1x1-conv projections in and out.
//!
//! A codebook's entries are `embedding_sum / max(cluster_usage, 1e-5)` (EMA statistics, as both
//! the decoder's `EuclideanCodebook` and Mimi's `MimiEuclideanCodebook` store them), computed
//! once at load.

use infer_core::{DType, Error, Result, Tensor, Weights};

const USAGE_EPS: f64 = 1e-5;

/// Codebook entries `(bins, dim)` from `{prefix}.{sum_name}` and `{prefix}.cluster_usage`.
fn codebook(w: &Weights, sum_name: &str, bins: usize, dim: usize) -> Result<Tensor> {
    let sum = w.get_shaped(sum_name, &[bins, dim])?;
    let usage = w.get_shaped("cluster_usage", &[bins])?;
    sum.div(&usage.clamp(USAGE_EPS, f32::MAX as f64)?.reshape(&[bins, 1])?)
}

/// A 1x1 conv without bias, `(out, in, 1)`, kept as a linear `(out, in)` weight.
fn projection(w: &Weights, out_dim: usize, in_dim: usize) -> Result<Tensor> {
    w.get_shaped("weight", &[out_dim, in_dim, 1])?.reshape(&[out_dim, in_dim])
}

/// One RVQ of the decoder: summed codebook rows, then the output projection.
struct RvqDecode {
    codebooks: Vec<Tensor>,
    output_proj: Tensor,
}

impl RvqDecode {
    fn load(w: &Weights, layers: usize, bins: usize, dim: usize, out_dim: usize) -> Result<Self> {
        let codebooks = (0..layers)
            .map(|i| codebook(&w.prefixed(format!("vq.layers.{i}._codebook")), "embedding_sum", bins, dim))
            .collect::<Result<_>>()?;
        Ok(RvqDecode { codebooks, output_proj: projection(&w.prefixed("output_proj"), out_dim, dim)? })
    }

    /// `ids[q]` are the `(t,)` codes of codebook `q`; gives `(t, out_dim)`.
    fn decode(&self, ids: &[Tensor]) -> Result<Tensor> {
        let mut sum: Option<Tensor> = None;
        for (ids, table) in ids.iter().zip(&self.codebooks) {
            let rows = ids.embedding(table)?;
            sum = Some(match sum {
                Some(s) => s.add(&rows)?,
                None => rows,
            });
        }
        let sum = sum.ok_or_else(|| Error::invalid("no codebooks to decode"))?;
        sum.linear(&self.output_proj, None)
    }
}

/// The decoder's quantizer (`decoder.quantizer`): codes -> `(1, codebook_dim, t)`.
pub struct SplitRvqDecoder {
    first: RvqDecode,
    rest: RvqDecode,
}

impl SplitRvqDecoder {
    /// Codebooks are `codebook_dim / 2` wide (the reference's `dimension=codebook_dim // 2`).
    pub fn load(w: &Weights, num_quantizers: usize, bins: usize, codebook_dim: usize) -> Result<Self> {
        let dim = codebook_dim / 2;
        Ok(SplitRvqDecoder {
            first: RvqDecode::load(&w.prefixed("rvq_first"), 1, bins, dim, codebook_dim)?,
            rest: RvqDecode::load(&w.prefixed("rvq_rest"), num_quantizers - 1, bins, dim, codebook_dim)?,
        })
    }

    /// `ids[q]`: `(t,)` u32 codes of codebook `q`, all codebooks present.
    pub fn decode(&self, ids: &[Tensor]) -> Result<Tensor> {
        let x = self.first.decode(&ids[..1])?.add(&self.rest.decode(&ids[1..])?)?;
        let (t, dim) = (x.dim(0), x.dim(1));
        x.transpose(0, 1)?.contiguous()?.reshape(&[1, dim, t])
    }
}

/// One RVQ of the encoder: input projection, then greedy residual nearest-codebook search.
struct RvqEncode {
    input_proj: Tensor,
    /// Per codebook: entries `(bins, dim)` and their augmented form `[e, 1, |e|²]` `(bins, dim+2)`.
    codebooks: Vec<(Tensor, Tensor)>,
}

impl RvqEncode {
    fn load(w: &Weights, layers: usize, bins: usize, dim: usize, hidden: usize) -> Result<Self> {
        let codebooks = (0..layers)
            .map(|i| {
                let e = codebook(&w.prefixed(format!("layers.{i}.codebook")), "embed_sum", bins, dim)?
                    .to_dtype(DType::F32)?;
                let ones = Tensor::full(e.backend(), 1.0, DType::F32, &[bins, 1])?;
                let norms = e.sqr()?.sum_keepdim(1)?;
                let aug = Tensor::concat(&[&e, &ones, &norms], 1)?;
                Ok((e, aug))
            })
            .collect::<Result<_>>()?;
        Ok(RvqEncode {
            input_proj: projection(&w.prefixed("input_proj"), dim, hidden)?.to_dtype(DType::F32)?,
            codebooks,
        })
    }

    /// `x`: `(t, hidden)` f32. Codes of the first `n` codebooks, each `(t,)`.
    ///
    /// Distances as `torch.cdist` computes them for large inputs (one matmul of augmented vectors:
    /// `[-2x, |x|², 1] · [e, 1, |e|²]`), so near-ties break the same way as far as summation
    /// order allows; the first minimum wins, as `argmin`.
    fn encode(&self, x: &Tensor, n: usize) -> Result<Vec<Vec<u32>>> {
        let mut residual = x.linear(&self.input_proj, None)?;
        let t = residual.dim(0);
        let mut out = Vec::with_capacity(n);
        for (entries, aug) in self.codebooks.iter().take(n) {
            let norms = residual.sqr()?.sum_keepdim(1)?;
            let ones = Tensor::full(residual.backend(), 1.0, DType::F32, &[t, 1])?;
            let query = Tensor::concat(&[&residual.scale(-2.0)?, &norms, &ones], 1)?;
            let dist = query.linear(aug, None)?;
            let ids = dist.reduce(infer_core::ReduceOp::ArgMin, 1, false)?;
            residual = residual.sub(&ids.embedding(entries)?)?;
            out.push(ids.to_vec_u32()?);
        }
        Ok(out)
    }
}

/// The encoder's quantizer (`encoder.quantizer`): semantic and acoustic RVQs both quantise the
/// same embeddings (Mimi's split RVQ), giving codebook 0 and codebooks 1.. respectively.
pub struct SplitRvqEncoder {
    semantic: RvqEncode,
    acoustic: RvqEncode,
}

impl SplitRvqEncoder {
    /// Loads the first `valid` codebooks (the ones the codec keeps) of both RVQs.
    pub fn load(w: &Weights, valid: usize, bins: usize, dim: usize, hidden: usize) -> Result<Self> {
        Ok(SplitRvqEncoder {
            semantic: RvqEncode::load(&w.prefixed("semantic_residual_vector_quantizer"), 1, bins, dim, hidden)?,
            acoustic: RvqEncode::load(&w.prefixed("acoustic_residual_vector_quantizer"), valid - 1, bins, dim, hidden)?,
        })
    }

    /// `x`: `(1, hidden, t)`. Codes as `[frame][codebook]`, `valid` codebooks each.
    pub fn encode(&self, x: &Tensor, valid: usize) -> Result<Vec<Vec<u32>>> {
        let (hidden, t) = (x.dim(1), x.dim(2));
        let x = x.reshape(&[hidden, t])?.transpose(0, 1)?.contiguous()?.to_dtype(DType::F32)?;
        let mut per_book = self.semantic.encode(&x, 1)?;
        per_book.extend(self.acoustic.encode(&x, valid - 1)?);
        let frames = x.dim(0);
        Ok((0..frames).map(|f| per_book.iter().map(|b| b[f]).collect()).collect())
    }
}
