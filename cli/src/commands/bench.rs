//! `infer bench`: prefill and decode throughput, time to first token and peak memory, as the
//! median over several runs.

use anyhow::{bail, Result};
use clap::Args;
use infer_core::{GenerateConfig, Registry};

use super::shared::ModelArgs;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt length in tokens (a fixed pattern of ordinary token ids). Decode then runs at this
    /// depth: `--prompt-tokens 2048` measures a long-context prefill and decode after it.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens to decode per run.
    #[arg(long, default_value_t = 64)]
    pub gen_tokens: usize,
    /// Timed runs (one warm-up run is added).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The middle value, or the mean of the two middle values of an even count (as Python's
/// `statistics.median`, which the peers' bench scripts use): taking the upper one would report
/// the faster run's throughput beside the slower run's time to first token.
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let half = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[half - 1] + v[half]) / 2.0
    } else {
        v[half]
    }
}

pub fn run(registry: &Registry, args: BenchArgs) -> Result<()> {
    if args.runs == 0 || args.prompt_tokens == 0 {
        bail!("--runs and --prompt-tokens must be at least 1");
    }
    let load_start = std::time::Instant::now();
    let model = args.model.load(registry)?;
    let load_secs = load_start.elapsed().as_secs_f64();
    // Ordinary ids from the middle of the vocabulary: no special tokens, no early EOS matters
    // since EOS is ignored. Kept inside the vocabulary of tiny test checkpoints too.
    let max_positions = model.info().max_position_embeddings;
    let context = args.prompt_tokens + args.gen_tokens;
    if max_positions > 0 && context > max_positions {
        bail!(
            "--prompt-tokens {} + --gen-tokens {} = {context} exceeds the model's context of {max_positions} positions",
            args.prompt_tokens,
            args.gen_tokens
        );
    }
    if args.model.context_len > 0 && context > args.model.context_len {
        bail!("--prompt-tokens + --gen-tokens = {context} exceeds --context-len {}", args.model.context_len);
    }
    let vocab = model.info().vocab_size as u32;
    let (first, span) = (1000.min(vocab / 2), 500.min(vocab - vocab / 2).max(1));
    let prompt: Vec<u32> = (0..args.prompt_tokens as u32).map(|i| first + (i * 7) % span).collect();
    let cfg = GenerateConfig { max_tokens: args.gen_tokens, ignore_eos: true, ..Default::default() };
    let (mut prefill, mut decode, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
    let mut peak = 0;
    for run in 0..=args.runs {
        let n = model.generate_ids(&prompt, &cfg)?.try_fold(0usize, |n, t| t.map(|_| n + 1))?;
        let m = model.metrics();
        if n != args.gen_tokens {
            bail!("generated {n} tokens, expected {}", args.gen_tokens);
        }
        peak = peak.max(m.peak_memory_bytes);
        if run == 0 {
            continue; // warm-up: first touches, kernel repacking
        }
        prefill.push(m.prefill_tokens_per_sec);
        decode.push(m.decode_tokens_per_sec);
        ttft.push(m.time_to_first_token.as_secs_f64());
    }
    let info = model.info();
    // What ran it, thread count included ("cpu (2 threads, avx2 fma f16c)"): a result without
    // it cannot be compared with another.
    let device = registry
        .backend(args.model.backend.as_deref(), args.model.device.as_deref())
        .map(|b| b.device().description.to_string())
        .unwrap_or_default();
    let result = serde_json::json!({
        "model": args.model.model_path()?.display().to_string(),
        "architecture": info.architecture.as_str(),
        "backend": args.model.backend.clone().unwrap_or_else(|| "default".into()),
        "device": device,
        "dtype": info.dtype.as_str(),
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "runs": args.runs,
        "load_seconds": load_secs,
        "prefill_tok_s": median(&prefill),
        "decode_tok_s": median(&decode),
        "ttft_ms": median(&ttft) * 1e3,
        "peak_rss_mb": peak as f64 / 1e6,
        // Every timed run, in order (the spread says how noisy the box was).
        "all_prefill_tok_s": prefill,
        "all_decode_tok_s": decode,
        "all_ttft_ms": ttft.iter().map(|s| s * 1e3).collect::<Vec<_>>(),
        // The model's context limit (0: none stated); decode ran at depths prompt_tokens ..
        // prompt_tokens + gen_tokens.
        "max_positions": max_positions,
        "kv_dtype": args.model.kv_dtype.clone().unwrap_or_else(|| info.dtype.as_str().to_string()),
    });
    if args.json {
        println!("{result}");
    } else {
        println!(
            "{} ({}, kv {}), {} prompt tokens: prefill {:.1} tok/s, decode {:.1} tok/s, ttft {:.0} ms, peak RSS {:.0} MB (median of {} runs, load {:.2} s)",
            info.architecture.as_str(),
            info.dtype.as_str(),
            result["kv_dtype"].as_str().unwrap_or("?"),
            args.prompt_tokens,
            result["prefill_tok_s"].as_f64().unwrap_or(0.0),
            result["decode_tok_s"].as_f64().unwrap_or(0.0),
            result["ttft_ms"].as_f64().unwrap_or(0.0),
            result["peak_rss_mb"].as_f64().unwrap_or(0.0),
            args.runs,
            load_secs
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_even_count_is_the_mean_of_the_middle_pair() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0]), 2.5);
        assert_eq!(median(&[1.0, 9.0, 2.0, 3.0]), 2.5);
    }
}
