//! Hyperparameters of the Llama-like decoders, read from config.json or GGUF metadata.

#[cfg(feature = "gguf")]
use infer_gguf::GgufFile;
#[cfg(feature = "gguf")]
use infer_sdk::Result;

#[derive(Debug, Clone)]
pub struct HParams {
    pub vocab_size: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub max_positions: usize,
    pub rms_eps: f64,
    pub rope_theta: f64,
    pub tie_embeddings: bool,
}

impl HParams {
    /// From `<arch>.*` GGUF keys (llama.cpp's names).
    #[cfg(feature = "gguf")]
    pub fn from_gguf(g: &GgufFile, arch: &str) -> Result<Self> {
        let key = |k: &str| format!("{arch}.{k}");
        let hidden = g.usize(&key("embedding_length"))?;
        let heads = g.usize(&key("attention.head_count"))?;
        let vocab_size = match g.usize(&key("vocab_size")) {
            Ok(v) => v,
            Err(_) => g.array("tokenizer.ggml.tokens")?.len(),
        };
        Ok(HParams {
            vocab_size,
            hidden,
            intermediate: g.usize(&key("feed_forward_length"))?,
            layers: g.usize(&key("block_count"))?,
            heads,
            kv_heads: g.usize(&key("attention.head_count_kv")).unwrap_or(heads),
            head_dim: g.usize(&key("attention.key_length")).unwrap_or(hidden.checked_div(heads).unwrap_or(0)),
            max_positions: g.usize(&key("context_length"))?,
            rms_eps: g.f64(&key("attention.layer_norm_rms_epsilon"))?,
            rope_theta: g.f64(&key("rope.freq_base")).unwrap_or(10_000.0),
            tie_embeddings: !g.tensor_names().any(|n| n == "output.weight"),
        })
    }
}
