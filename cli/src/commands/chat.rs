//! `infer chat`: an interactive multi-turn conversation using the checkpoint's chat template.

use std::io::{BufRead, Write};

use anyhow::Result;
use clap::Args;
use infer_core::{GenerateConfig, Message, Registry};

use super::shared::{note_chat_template, ConstraintArgs, ModelArgs, SamplingArgs};

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A system prompt for the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// A Jinja chat template file replacing the checkpoint's (or the built-in format used when
    /// it has none).
    #[arg(long)]
    pub chat_template: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub constraint: ConstraintArgs,
}

pub fn run(registry: &Registry, args: ChatArgs) -> Result<()> {
    let model = args.model.load_with_chat_template(registry, args.chat_template.clone())?;
    note_chat_template(model.as_ref(), &args.model.model_path()?);
    let cfg = GenerateConfig {
        max_tokens: args.max_tokens,
        constraint: args.constraint.constraint()?,
        ..args.sampling.config(&model.sampling_defaults())
    };
    let mut history: Vec<Message> = args.system.iter().map(|s| Message::system(s.clone())).collect();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    eprintln!(
        "chatting with {} ({}); /reset clears the conversation, /exit or Ctrl-D quits",
        model.model_type(),
        model.info().architecture.as_str()
    );
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            writeln!(out)?;
            return Ok(());
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                history.retain(|m| m.role == "system");
                continue;
            }
            _ => {}
        }
        history.push(Message::user(line));
        let mut reply = String::new();
        for tok in model.chat(&history, &cfg)? {
            let tok = tok?;
            write!(out, "{}", tok.text)?;
            out.flush()?;
            reply.push_str(&tok.text);
        }
        writeln!(out)?;
        let m = model.metrics();
        eprintln!("[{} tokens, {:.1} tok/s]", m.generated_tokens, m.decode_tokens_per_sec);
        history.push(Message::assistant(reply.trim().to_string()));
    }
}
