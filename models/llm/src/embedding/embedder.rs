//! A decoder as a [`TextEmbedder`]: each text (its prompt prefixed) is tokenized with the
//! tokenizer's post-processor (Qwen3-Embedding's appends `<|endoftext|>`, the row last-token
//! pooling reads), a batch runs packed through one forward (each text against its own fresh
//! cache, so no padding), and the final hidden states are pooled and normalised.

use infer_core::embed::{EmbedOptions, Embeddings, TextEmbedder};
use infer_core::text::HfTokenizer;
use infer_core::{Backend, Error, Result, Tensor};
use infer_layers::CausalDecoder;

use super::pooling::{l2_normalize, truncate};
use super::SentenceConfig;

/// Rows per packed forward: bounds the activations a large batch holds at once.
const ROWS_PER_FORWARD: usize = 8192;

pub struct DecoderEmbedder {
    pub architecture: String,
    pub decoder: CausalDecoder,
    pub tokenizer: HfTokenizer,
    pub backend: Backend,
    pub config: SentenceConfig,
    /// Hidden size: the length of a full vector.
    pub hidden: usize,
    /// The longest input in tokens.
    pub max_tokens: usize,
}

impl DecoderEmbedder {
    /// The ids of `input`, special tokens as the tokenizer's post-processor adds them.
    fn encode(&self, input: &str) -> Result<Vec<u32>> {
        let ids = infer_core::catch_panic("the tokenizers crate panicked", || {
            let enc = self.tokenizer.inner().encode(input, true).map_err(|e| Error::Tokenizer(e.to_string()))?;
            Ok(enc.get_ids().to_vec())
        })?;
        if ids.is_empty() {
            return Err(Error::unsupported("a text tokenized to no tokens: there is nothing to pool"));
        }
        if ids.len() > self.max_tokens {
            return Err(Error::unsupported(format!(
                "a text is {} tokens; this model reads at most {}",
                ids.len(),
                self.max_tokens
            )));
        }
        Ok(ids)
    }

    /// Pooled vectors of `seqs` (one packed forward), appended to `out`.
    fn pool_batch(&self, seqs: &[Vec<u32>], out: &mut Vec<f32>) -> Result<()> {
        let lens: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let flat: Vec<u32> = seqs.concat();
        let tokens = Tensor::from_u32(&self.backend, &flat, &[1, flat.len()])?;
        let mut caches = self.decoder.fresh_caches(seqs.len());
        let rows = self.decoder.hidden_states_packed(&tokens, &lens, &mut caches)?.to_vec_f32()?;
        let mut start = 0;
        for len in lens {
            let first = out.len();
            self.config.pooling.pool(&rows[start * self.hidden..(start + len) * self.hidden], self.hidden, out);
            if self.config.normalize {
                l2_normalize(&mut out[first..]);
            }
            start += len;
        }
        Ok(())
    }
}

impl TextEmbedder for DecoderEmbedder {
    fn architecture(&self) -> String {
        self.architecture.clone()
    }

    fn dimension(&self) -> usize {
        self.hidden
    }

    fn prompt_names(&self) -> Vec<String> {
        self.config.prompts.keys().cloned().collect()
    }

    fn embed(&self, texts: &[&str], options: &EmbedOptions) -> Result<Embeddings> {
        if texts.is_empty() {
            return Err(Error::unsupported("no texts to embed"));
        }
        let keep = match options.dimensions {
            0 => self.hidden,
            d if d <= self.hidden => d,
            d => {
                return Err(Error::unsupported(format!(
                    "{d} dimensions asked; this model's vectors have {}",
                    self.hidden
                )))
            }
        };
        let prefix = self.config.prompt(options.prompt_name())?;
        if !prefix.is_empty() && !self.config.include_prompt && self.config.pooling != super::Pooling::LastToken {
            return Err(Error::unsupported("pooling that leaves out the prompt's tokens is not supported"));
        }
        let seqs = texts.iter().map(|t| self.encode(&format!("{prefix}{t}"))).collect::<Result<Vec<_>>>()?;
        let prompt_tokens = seqs.iter().map(Vec::len).sum();
        let mut values = Vec::with_capacity(texts.len() * self.hidden);
        let mut batch_start = 0;
        while batch_start < seqs.len() {
            // At least one sequence per forward, then as many as fit the row budget.
            let mut end = batch_start + 1;
            let mut rows = seqs[batch_start].len();
            while end < seqs.len() && rows + seqs[end].len() <= ROWS_PER_FORWARD {
                rows += seqs[end].len();
                end += 1;
            }
            self.pool_batch(&seqs[batch_start..end], &mut values)?;
            batch_start = end;
        }
        if keep < self.hidden {
            values = truncate(&values, self.hidden, keep);
            if self.config.normalize {
                values.chunks_mut(keep).for_each(l2_normalize);
            }
        }
        Ok(Embeddings { values: values.into(), dimension: keep, prompt_tokens })
    }
}
