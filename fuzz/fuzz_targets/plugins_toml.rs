//! `plugins.toml`: parsing, library paths, backend aliases and the default order, resolved by a
//! registry of the built-in plugins (the libraries it names are not loaded).
#![no_main]

use infer_core::{PluginConfig, Registry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = infer_fuzz::scratch_file("plugins.toml", data);
    let Ok(mut cfg) = PluginConfig::from_file(&path) else { return };
    let _: Vec<_> = cfg.library_paths().collect();
    let mut names: Vec<String> = cfg.aliases.keys().cloned().collect();
    names.extend(cfg.default_backends.iter().cloned());
    names.extend(["candle", "cpu", "cuda"].map(String::from));
    for n in &names {
        let _ = cfg.backend_names_for(n);
    }
    // Loading arbitrary libraries is not this target's business: resolve against built-ins only.
    cfg.plugins.clear();
    let Ok(reg) = Registry::from_config(cfg) else { return };
    let _ = reg.default_backend();
    for n in &names {
        let _ = reg.backend(Some(n), None);
        let _ = reg.backend(Some(n), Some("cpu"));
    }
});
