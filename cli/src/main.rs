//! `infer`: run models, list plugins, inspect checkpoints.

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// Built-in plugins register themselves through `inventory`; referencing the crates links them.
use infer_backend_candle as _;
#[cfg(feature = "tch")]
use infer_backend_tch as _;
use infer_llm as _;
use infer_qwen3_tts as _;

#[derive(Parser)]
#[command(name = "infer", version, about = "Run LLMs and speech models on pluggable backends")]
struct Cli {
    /// Plugin configuration (default: $INFER_CONFIG, else the nearest plugins.toml). Give it
    /// before the command (`infer --config FILE run ...`): `serve --config` is the server's.
    #[arg(long, env = "INFER_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt.
    Run(commands::run::RunArgs),
    /// Talk to a model, turn by turn, with its chat template.
    Chat(commands::chat::ChatArgs),
    /// Measure prefill/decode throughput, time to first token and peak memory.
    Bench(commands::bench::BenchArgs),
    /// List backend and model plugins and where they come from.
    Plugins(commands::plugins::PluginsArgs),
    /// Print a model's facts.
    Info(commands::info::InfoArgs),
    /// Synthesize speech from text into an audio file.
    Speak(commands::speak::SpeakArgs),
    /// Make or list the named voice presets of a speech model.
    Voice(commands::voice::VoiceArgs),
    /// Serve models over an OpenAI-compatible HTTP API, with continuous batching.
    Serve(commands::serve::ServeArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        // Without INFER_LOG: errors only, and not symphonia's format-probe noise (its failures
        // reach the user as our own one-line error).
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("INFER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error,symphonia_core=off,symphonia=off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = (|| {
        let registry = infer_core::Registry::discover(cli.config.as_deref())?;
        match cli.command {
            Command::Run(args) => commands::run::run(&registry, args),
            Command::Chat(args) => commands::chat::run(&registry, args),
            Command::Bench(args) => commands::bench::run(&registry, args),
            Command::Plugins(args) => commands::plugins::run(&registry, args),
            Command::Info(args) => commands::info::run(&registry, args),
            Command::Speak(args) => commands::speak::run(&registry, args),
            Command::Voice(args) => commands::voice::run(&registry, args),
            Command::Serve(args) => commands::serve::run(&registry, args),
        }
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
