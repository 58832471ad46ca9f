//! A GGUF file: header, metadata, tensor table, tensor bytes (and their dequantization), the
//! hyperparameters and sampling defaults read from it, and an LLM load from it.
#![no_main]

use std::sync::Arc;

use infer_core::{DType, GgufFile};
use libfuzzer_sys::fuzz_target;

/// Tensors up to this many elements are read and dequantized (larger ones only located).
const READ_LIMIT: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let path = infer_fuzz::scratch_file("model.gguf", data);
    let Ok(g) = GgufFile::open(&path) else { return };
    let g = Arc::new(g);
    for key in ["general.architecture", "tokenizer.ggml.model", "tokenizer.chat_template"] {
        let _ = g.string(key);
    }
    for key in ["gemma3.block_count", "qwen2.context_length", "tokenizer.ggml.bos_token_id"] {
        let _ = (g.usize(key), g.f64(key), g.bool(key));
    }
    let _ = g.strings("tokenizer.ggml.tokens");
    let _ = infer_core::gguf::sampling_defaults(&g);
    let names: Vec<String> = g.tensor_names().map(String::from).collect();
    for name in &names {
        let t = g.tensor(name).expect("a listed tensor is readable");
        let elements: usize = t.shape.iter().product();
        if t.dtype.is_quantized() && elements <= READ_LIMIT {
            let _ = infer_core::gguf::dequantize_to_f32_bytes(t.dtype, &t.shape, t.bytes);
        }
    }
    if let Ok(arch) = g.architecture() {
        let _ = infer_llm::hparams::HParams::from_gguf(&g, &arch);
    }
    let _ = infer_core::text::gguf_tokenizer::tokenizer_from_gguf(&g);
    let backend = infer_backend_candle::CandleBackend::backend().expect("candle CPU backend");
    let w = infer_core::gguf::weights(g.clone(), &backend, DType::F32, Arc::new(|n: &str| n.to_string()))
        .expect("a GGUF that opened indexes");
    for name in &names {
        let t = g.tensor(name).expect("listed");
        if t.shape.iter().product::<usize>() <= READ_LIMIT {
            let _ = w.get(name);
        }
    }
    drop((w, g));
    infer_fuzz::load_and_run_llm(&path);
});
