//! `infer run`: one prompt in, streamed text (or one JSON object) out.

use std::io::Write;

use anyhow::{bail, Result};
use clap::Args;
use infer_core::{GenerateConfig, Message, Registry};

use super::shared::{note_chat_template, ConstraintArgs, ModelArgs, SamplingArgs};

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt text.
    #[arg(long, short, conflicts_with = "prompt_tokens")]
    pub prompt: Option<String>,
    /// The prompt as token ids, e.g. 1,2,3.
    #[arg(long, value_delimiter = ',')]
    pub prompt_tokens: Option<Vec<u32>>,
    /// Wrap the prompt as a user message in the checkpoint's chat template.
    #[arg(long)]
    pub chat: bool,
    /// A Jinja chat template file for --chat, replacing the checkpoint's (or the built-in format
    /// used when it has none).
    #[arg(long, requires = "chat")]
    pub chat_template: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub constraint: ConstraintArgs,
    /// Stop when the output contains this text (repeatable).
    #[arg(long = "stop")]
    pub stop_strings: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object {"tokens", "text", "metrics"} instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(registry: &Registry, args: RunArgs) -> Result<()> {
    if args.prompt.is_none() && args.prompt_tokens.is_none() {
        bail!("give a prompt with --prompt TEXT or --prompt-tokens 1,2,3");
    }
    let model = args.model.load_with_chat_template(registry, args.chat_template.clone())?;
    let cfg = GenerateConfig {
        max_tokens: args.max_tokens,
        stop_strings: args.stop_strings.clone(),
        ignore_eos: args.ignore_eos,
        constraint: args.constraint.constraint()?,
        ..args.sampling.config(&model.sampling_defaults())
    };
    if args.chat && args.prompt.is_some() {
        note_chat_template(model.as_ref(), &args.model.model_path()?);
    }
    let stream = match (&args.prompt, &args.prompt_tokens) {
        (_, Some(ids)) => model.generate_ids(ids, &cfg)?,
        (Some(p), None) if args.chat => model.chat(&[Message::user(p.clone())], &cfg)?,
        (Some(p), None) => model.generate(p, &cfg)?,
        (None, None) => unreachable!("checked above"),
    };
    let mut ids = Vec::new();
    let mut text = String::new();
    let mut out = std::io::stdout().lock();
    for tok in stream {
        let tok = tok?;
        if !args.json {
            out.write_all(tok.text.as_bytes())?;
            out.flush()?;
        }
        ids.push(tok.id);
        text.push_str(&tok.text);
    }
    let metrics = model.metrics();
    if args.json {
        let v = serde_json::json!({ "tokens": ids, "text": text, "metrics": metrics });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out)?;
        let masks = match metrics.constraint_duration.as_secs_f64() * 1e3 {
            0.0 => String::new(),
            ms => format!(", constraint {:.2} ms/token", ms / metrics.generated_tokens.max(1) as f64),
        };
        eprintln!(
            "[{} prompt tokens, {} generated; prefill {:.1} tok/s, decode {:.1} tok/s, ttft {:.0} ms{masks}]",
            metrics.prompt_tokens,
            metrics.generated_tokens,
            metrics.prefill_tokens_per_sec,
            metrics.decode_tokens_per_sec,
            metrics.time_to_first_token.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
