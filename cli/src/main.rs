//! `infer`: run models, list plugins, inspect checkpoints.

mod allocator;
mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use infer_core::BackendNeed;

// Built-in plugins register themselves through `inventory`; referencing the crates links them.
use infer_backend_candle as _;
#[cfg(feature = "tch")]
use infer_backend_tch as _;
use infer_llm as _;
use infer_qwen3_tts as _;
use infer_voxtral_realtime as _;
use infer_voxtral_tts as _;

#[derive(Parser)]
#[command(name = "infer", version, about = "Run LLMs and speech models on pluggable backends")]
struct Cli {
    /// Plugin configuration. Default: $INFER_CONFIG, else ~/.config/infer/plugins.toml
    /// ($XDG_CONFIG_HOME), else plugins.toml beside the executable, each read only when you or
    /// root own it and nobody else may write it (`infer plugins` shows which). A plugins.toml in
    /// the working directory is read only when named here. Give it before the command
    /// (`infer --config FILE run ...`): `serve --config` is the server's.
    #[arg(long, env = "INFER_CONFIG")]
    config: Option<PathBuf>,
    /// Say on stderr which configuration was read and every plugin library loaded.
    #[arg(short, long, global = true)]
    verbose: bool,
    /// CPU threads for the compute backends (candle, libtorch). Default: every core, or
    /// $CANDLE_NUM_THREADS / $RAYON_NUM_THREADS / $INFER_TCH_THREADS where set; this flag
    /// overrides them.
    #[arg(long, global = true)]
    threads: Option<usize>,
    /// Read weights files into memory instead of mapping them (sets INFER_NO_MMAP=1, which plugin
    /// libraries read too): a mapped file overwritten in place (`cp new old`) changes under a
    /// running model, and one truncated crashes it (SIGBUS). Costs the whole file in memory.
    #[arg(long, global = true)]
    no_mmap: bool,
    #[command(subcommand)]
    command: Command,
}

const SPEECH_MODEL_HELP: &str =
    "Speech checkpoint folder (Qwen3-TTS: config.json, model.safetensors, ...). Required: there is no default speech model";

const EMBEDDING_MODEL_HELP: &str = "Text-embedding checkpoint folder (a sentence-transformers folder: Qwen3-Embedding). Required: there is no default embedding model";

const RECOGNIZER_MODEL_HELP: &str = "Speech recognition checkpoint folder (Voxtral Realtime: config.json, model.safetensors and tekken.json, or params.json, consolidated.safetensors and tekken.json). Required: there is no default speech model";

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
    #[command(mut_arg("model", |a| a.help(SPEECH_MODEL_HELP)))]
    Speak(commands::speak::SpeakArgs),
    /// Make or list the named voice presets of a speech model.
    #[command(mut_arg("model", |a| a.help(SPEECH_MODEL_HELP)))]
    Voice(commands::voice::VoiceArgs),
    /// Transcribe speech from an audio file or the microphone, offline or streaming.
    #[command(mut_arg("model", |a| a.help(RECOGNIZER_MODEL_HELP)))]
    Transcribe(commands::transcribe::TranscribeArgs),
    /// Embed texts as vectors (JSON) with a text-embedding model.
    #[command(mut_arg("model", |a| a.help(EMBEDDING_MODEL_HELP)))]
    Embed(commands::embed::EmbedArgs),
    /// Serve models over an OpenAI-compatible HTTP API, with continuous batching.
    Serve(commands::serve::ServeArgs),
    /// Write a copy of a speech model's checkpoint with its linear weights quantized (q8_0,
    /// q4_k), which loads without quantizing again.
    Quantize(commands::quantize::QuantizeArgs),
}

impl Command {
    /// The backend this command runs on: plugin libraries that declare only other backends
    /// stay unloaded (a candle run does not map libtorch).
    fn backend_need(&self) -> BackendNeed<'_> {
        let model = match self {
            Command::Run(a) => &a.model,
            Command::Chat(a) => &a.model,
            Command::Bench(a) => &a.model,
            Command::Info(a) => &a.model,
            Command::Speak(a) => &a.model,
            Command::Voice(a) => &a.model,
            Command::Transcribe(a) => &a.model,
            Command::Embed(a) => &a.model,
            // One --model: its --backend; a server.toml may name any backend.
            Command::Serve(a) if a.config.is_none() => {
                return a.backend.as_deref().map_or(BackendNeed::Default, BackendNeed::Named)
            }
            Command::Quantize(a) => return a.backend.as_deref().map_or(BackendNeed::Default, BackendNeed::Named),
            #[allow(unreachable_patterns)] // commands without a model list or pick plugins themselves
            _ => return BackendNeed::Any,
        };
        model.backend.as_deref().map_or(BackendNeed::Default, BackendNeed::Named)
    }
}

/// Every backend reads its thread count from the environment when its pool starts (plugin
/// libraries carry their own copy of candle, so an in-process setter would miss them): set the
/// variables each reads, before any pool or plugin exists.
fn set_thread_count(n: usize) {
    for var in ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS", "INFER_TCH_THREADS"] {
        std::env::set_var(var, n.to_string());
    }
}

/// `-v`: the configuration file, a working-directory one left unread, and each library loaded.
fn say_what_was_loaded(registry: &infer_core::Registry) {
    let source = registry.config().source.as_deref();
    match source {
        Some(p) => eprintln!("infer: config {}", p.display()),
        None => eprintln!("infer: no config file: built-in plugins only"),
    }
    if let Some(local) = infer_core::PluginConfig::working_dir_config().filter(|l| Some(l.as_path()) != source) {
        eprintln!(
            "infer: not read: {} (a working directory's plugins.toml is read only with --config)",
            local.display()
        );
    }
    for lib in registry.libraries() {
        eprintln!("infer: loaded plugin library {}", lib.display());
    }
    for skipped in registry.skipped_libraries() {
        eprintln!("infer: skipped optional plugin library: {skipped}");
    }
}

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`infer plugins | head`) as other command-line tools do,
    // instead of panicking in println!.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
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
    // Audio models allocate and free activations of tens of MB per op: keep freed memory for
    // reuse from the start. Text models apply it once loaded (`ModelArgs::load`): their load
    // scratch would only raise peak RSS.
    if matches!(cli.command, Command::Speak(_) | Command::Voice(_) | Command::Transcribe(_) | Command::Quantize(_)) {
        allocator::keep_freed_memory_for_reuse();
    }
    let result = (|| {
        if let Some(n) = cli.threads {
            anyhow::ensure!(n > 0, "--threads 0: expected at least one thread");
            set_thread_count(n);
        }
        if cli.no_mmap {
            // Before any weights are opened (core reads it once) or a plugin library is loaded.
            std::env::set_var("INFER_NO_MMAP", "1");
        }
        let registry = infer_core::Registry::discover_for(cli.config.as_deref(), cli.command.backend_need())?;
        if cli.verbose {
            say_what_was_loaded(&registry);
        }
        match cli.command {
            Command::Run(args) => commands::run::run(&registry, args),
            Command::Chat(args) => commands::chat::run(&registry, args),
            Command::Bench(args) => commands::bench::run(&registry, args),
            Command::Plugins(args) => commands::plugins::run(&registry, args),
            Command::Info(args) => commands::info::run(&registry, args),
            Command::Speak(args) => commands::speak::run(&registry, args),
            Command::Voice(args) => commands::voice::run(&registry, args),
            Command::Transcribe(args) => commands::transcribe::run(&registry, args),
            Command::Embed(args) => commands::embed::run(&registry, args),
            Command::Serve(args) => commands::serve::run(&registry, args),
            Command::Quantize(args) => commands::quantize::run(&registry, args),
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
