//! `infer plugins`: every backend and model plugin, its version and origin.

use anyhow::Result;
use clap::Args;
use infer_core::{ModelKind, Registry};

/// The configuration file is the first of: --config, $INFER_CONFIG,
/// $XDG_CONFIG_HOME/infer/plugins.toml (~/.config/infer/plugins.toml), plugins.toml beside the
/// infer executable. A plugins.toml in the working directory is read only when named.
#[derive(Args, Debug)]
pub struct PluginsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(registry: &Registry, args: PluginsArgs) -> Result<()> {
    let backends: Vec<_> = registry
        .backends()
        .iter()
        .map(|b| {
            let devices: Vec<&str> = b.plugin.devices.iter().map(|d| d.as_str()).collect();
            serde_json::json!({
                "kind": "backend",
                "name": b.plugin.name.as_str(),
                "version": b.plugin.version.as_str(),
                "available": (b.plugin.available)(),
                "devices": devices,
                "origin": b.origin.to_string(),
                "description": b.plugin.description.as_str(),
            })
        })
        .collect();
    let models: Vec<_> = registry
        .models()
        .iter()
        .map(|m| {
            let archs = m.architecture_names();
            let ids: Vec<&str> = m.plugin.extensions().iter().map(|e| e.id.as_str()).collect();
            // `model_kind` keeps its first spelling (the Debug name, lower-cased); `kinds` lists
            // every kind the plugin provides.
            let model_kind = ModelKind::ALL.into_iter().find(|k| ids.contains(&k.id())).map_or_else(
                || ids.first().copied().unwrap_or_default().to_string(),
                |k| format!("{k:?}").to_lowercase(),
            );
            serde_json::json!({
                "kind": "model",
                "name": m.plugin.name().as_str(),
                "version": m.plugin.version().as_str(),
                "model_kind": model_kind,
                "kinds": m.kind_names(),
                "extensions": ids,
                "architectures": archs,
                "origin": m.origin.to_string(),
                "description": m.plugin.description().as_str(),
            })
        })
        .collect();
    let config_file = registry.config().source.as_ref().map(|p| p.display().to_string());
    if args.json {
        println!("{}", serde_json::json!({ "config": config_file, "backends": backends, "models": models }));
        return Ok(());
    }
    // The table is printed from the same rows as the JSON, so each plugin is queried once.
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let list = |v: &serde_json::Value| {
        v.as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(",")).unwrap_or_default()
    };
    println!("{:<8} {:<14} {:<9} {:<28} ORIGIN", "KIND", "NAME", "VERSION", "HANDLES");
    for (row, handles) in backends.iter().map(|b| (b, "devices")).chain(models.iter().map(|m| (m, "architectures"))) {
        let avail = if row["available"] == false { " (unavailable)" } else { "" };
        // Models show what they do: text, tts (speech synthesis), stt (speech recognition),
        // embed (text embedding).
        let kind = match text(&row["model_kind"]).as_str() {
            "" => text(&row["kind"]),
            "speechsynthesis" => "tts".into(),
            "speechrecognition" => "stt".into(),
            "textembedding" => "embed".into(),
            other => other.into(),
        };
        println!(
            "{:<8} {:<14} {:<9} {:<28} {}{avail}",
            kind,
            text(&row["name"]),
            text(&row["version"]),
            list(&row[handles]),
            text(&row["origin"])
        );
    }
    let cfg = registry.config();
    match &config_file {
        Some(f) => println!("config: {f}"),
        None => {
            println!("config: none found (built-in defaults; see `infer plugins --help` for where it is looked for)")
        }
    }
    if !cfg.aliases.is_empty() {
        let aliases: Vec<String> = cfg.aliases.iter().map(|(k, v)| format!("{k}={}", v.backend())).collect();
        println!("aliases: {}", aliases.join(" "));
    }
    if !cfg.default_backends.is_empty() {
        println!("default order: {}", cfg.default_backends.join(", "));
    }
    Ok(())
}
