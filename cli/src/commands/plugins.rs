//! `infer plugins`: every backend and model plugin, its version and origin.

use anyhow::Result;
use clap::Args;
use infer_core::Registry;

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
            let archs: Vec<&str> = m.plugin.architectures.iter().map(|a| a.as_str()).collect();
            serde_json::json!({
                "kind": "model",
                "name": m.plugin.name.as_str(),
                "version": m.plugin.version.as_str(),
                "model_kind": format!("{:?}", m.plugin.kind).to_lowercase(),
                "architectures": archs,
                "origin": m.origin.to_string(),
                "description": m.plugin.description.as_str(),
            })
        })
        .collect();
    if args.json {
        println!("{}", serde_json::json!({ "backends": backends, "models": models }));
        return Ok(());
    }
    println!("{:<8} {:<14} {:<9} {:<28} ORIGIN", "KIND", "NAME", "VERSION", "HANDLES");
    for b in registry.backends() {
        let devices: Vec<&str> = b.plugin.devices.iter().map(|d| d.as_str()).collect();
        let avail = if (b.plugin.available)() { "" } else { " (unavailable)" };
        println!(
            "{:<8} {:<14} {:<9} {:<28} {}{avail}",
            "backend",
            b.plugin.name.as_str(),
            b.plugin.version.as_str(),
            devices.join(","),
            b.origin
        );
    }
    for m in registry.models() {
        let archs: Vec<&str> = m.plugin.architectures.iter().map(|a| a.as_str()).collect();
        println!(
            "{:<8} {:<14} {:<9} {:<28} {}",
            "model",
            m.plugin.name.as_str(),
            m.plugin.version.as_str(),
            archs.join(","),
            m.origin
        );
    }
    let cfg = registry.config();
    if !cfg.aliases.is_empty() {
        let aliases: Vec<String> = cfg.aliases.iter().map(|(k, v)| format!("{k}={}", v.backend())).collect();
        println!("aliases: {}", aliases.join(" "));
    }
    if !cfg.default_backends.is_empty() {
        println!("default order: {}", cfg.default_backends.join(", "));
    }
    Ok(())
}
