//! `infer info`: the facts of a model, loaded on a backend.

use anyhow::Result;
use clap::Args;
use infer_core::Registry;

use super::shared::ModelArgs;

#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
}

pub fn run(registry: &Registry, args: InfoArgs) -> Result<()> {
    let model = args.model.load(registry)?;
    let i = model.info();
    let v = serde_json::json!({
        "model_type": model.model_type(),
        "architecture": i.architecture.as_str(),
        "vocab_size": i.vocab_size,
        "num_layers": i.num_layers,
        "hidden_size": i.hidden_size,
        "num_heads": i.num_heads,
        "num_kv_heads": i.num_kv_heads,
        "head_dim": i.head_dim,
        "max_position_embeddings": i.max_position_embeddings,
        "quant_bits": i.quant_bits,
        "quant_group": i.quant_group,
        "dtype": i.dtype.as_str(),
        "tokenizer_vocab": model.tokenizer().vocab_size(),
        "eos_ids": model.tokenizer().eos_ids(),
        "chat_template": model.tokenizer().chat_template().is_some(),
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}
