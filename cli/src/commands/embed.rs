//! `infer embed`: texts to vectors with a text-embedding model, printed as JSON.

use anyhow::{bail, Result};
use clap::Args;
use infer_core::embed::EmbedOptions;
use infer_core::Registry;

use super::shared::ModelArgs;

#[derive(Args, Debug)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A text to embed; repeat it for a batch (one vector per text, in order).
    #[arg(long = "text", short = 't')]
    pub texts: Vec<String>,
    /// A prompt of the model's (`query`, ...) put before every text.
    #[arg(long)]
    pub prompt_name: Option<String>,
    /// Keep the first N components of each vector, re-normalised (0: all).
    #[arg(long, default_value_t = 0)]
    pub dimensions: usize,
}

pub fn run(registry: &Registry, args: EmbedArgs) -> Result<()> {
    let Some(path) = &args.model.model else {
        bail!("no --model given: name an embedding checkpoint folder (there is no default embedding model)");
    };
    if args.texts.is_empty() {
        bail!("no --text given: name at least one text to embed");
    }
    if let Some(i) = args.texts.iter().position(String::is_empty) {
        bail!("--text number {} is empty: give a text to embed", i + 1);
    }
    let model = registry.load_embedder(path, &args.model.load_config()?)?;
    let options =
        EmbedOptions { prompt_name: args.prompt_name.clone().map(Into::into).into(), dimensions: args.dimensions };
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let out = model.embed(&texts, &options)?;
    let v = serde_json::json!({
        "architecture": model.architecture(),
        "dimension": out.dimension,
        "prompt_tokens": out.prompt_tokens,
        "embeddings": out.vectors().collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}
