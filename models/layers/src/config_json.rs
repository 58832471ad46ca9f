//! Reading a checkpoint's `config.json` into a model's config struct, with errors that name the
//! file and the field.

use std::path::Path;

use infer_sdk::{Error, Result};
use serde::de::DeserializeOwned;

/// Parses `dir/config.json` as `T`.
pub fn read_config<T: DeserializeOwned>(dir: &Path) -> Result<T> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_str(&text).map_err(|e| {
        // serde says "missing field `head_dim` at line 3 column 1": keep the what, drop the where.
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).replace('`', "");
        Error::config(&path, msg)
    })
}

/// The RoPE base: top-level `rope_theta` (transformers 4.x) or `rope_parameters.rope_theta` (5.x).
pub fn rope_theta(top_level: Option<f64>, parameters: Option<&serde_json::Value>, default: f64) -> f64 {
    top_level.or_else(|| parameters.and_then(|p| p.get("rope_theta")).and_then(|v| v.as_f64())).unwrap_or(default)
}
