//! Causal attention, the fused op on the thread pool against the op-by-op path (batched
//! products on gemm's threads, softmax on the pool, the rest on the calling thread), side by
//! side in one run: a whole prompt (prefill) and one query against a cache of that depth
//! (decode), at 128 and 2048 tokens, on two real models' head shapes; decode also with an f16
//! cache (read in place by both paths).
//!
//! `cargo bench -p infer-backend-candle --bench attention [-- NAME...]`; threads:
//! `CANDLE_NUM_THREADS` / `RAYON_NUM_THREADS` (set both). NAME: run the rows whose label
//! contains it. Prints the best milliseconds per call of each path and their ratio.

mod common;

use candle_core::DType;
use common::{best, tensor};
use infer_backend_candle::attention::{attention, attention_blocked, AttnParams, BLOCK_ELEMS};

/// (label, query heads, KV heads, head dim).
const MODELS: [(&str, usize, usize, usize); 2] = [("gemma3-270m", 4, 1, 256), ("qwen2.5-0.5b", 14, 2, 64)];

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let want = |label: &str| filter.is_empty() || filter.iter().any(|f| label.contains(f.as_str()));
    println!("threads {}", candle_core::utils::get_num_threads());
    println!("| shape | op-by-op ms | fused ms | speedup |");
    println!("| --- | ---: | ---: | ---: |");
    for (model, hq, hkv, d) in MODELS {
        for depth in [128, 2048] {
            let kbuf = tensor(&[1, hkv, depth + 256, d], 2);
            let vbuf = tensor(&[1, hkv, depth + 256, d], 3);
            for (phase, tq, cache) in
                [("prefill", depth, DType::F32), ("decode", 1, DType::F32), ("decode", 1, DType::F16)]
            {
                let label = format!("{model} {phase} {depth}{}", if cache == DType::F16 { " f16 cache" } else { "" });
                if !want(&label) {
                    continue;
                }
                // The cache as a model holds it: a narrowed view of a longer buffer.
                let view = |buf: &candle_core::Tensor| buf.to_dtype(cache).unwrap().narrow(2, 0, depth).unwrap();
                let (k, v) = (view(&kbuf), view(&vbuf));
                let q = tensor(&[1, hq, tq, d], 1);
                let p = AttnParams {
                    scale: 1.0 / (d as f32).sqrt(),
                    causal: true,
                    window: 0,
                    softcap: 0.0,
                    probs_dtype: None,
                };
                let runs = if tq > 1 { 5 } else { 50 };
                let old = best(runs, || drop(attention_blocked(&q, &k, &v, None, p, BLOCK_ELEMS).unwrap()));
                let new = best(runs, || drop(attention(&q, &k, &v, None, p).unwrap()));
                println!("| {label} | {:.3} | {:.3} | {:.2}x |", old * 1e3, new * 1e3, old / new);
            }
        }
    }
}
