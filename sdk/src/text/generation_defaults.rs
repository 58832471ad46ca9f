//! The sampling a checkpoint asks for when the caller sets none: `generation_config.json` for
//! a Hugging Face directory, the `general.sampling.*` metadata of a GGUF, else llama.cpp's
//! defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).

use std::path::Path;

use serde::Serialize;

use crate::text::types::GenerateConfig;
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SamplingDefaults {
    /// 0 is greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    /// Where these came from: `generation_config.json`, `gguf metadata` or `built-in`.
    pub source: &'static str,
}

impl SamplingDefaults {
    /// What a checkpoint that says nothing gets (llama.cpp's defaults).
    pub const BUILT_IN: SamplingDefaults = SamplingDefaults {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.0,
        source: "built-in",
    };

    /// `generation_config.json` read as transformers reads it: `do_sample: false` is greedy,
    /// `do_sample: true` samples with the file's values (transformers' defaults for the rest).
    /// A file that does not say `do_sample` gets the built-in defaults.
    pub fn from_generation_config(path: &Path) -> Result<Self> {
        if !path.is_file() {
            return Ok(Self::BUILT_IN);
        }
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::config(path, format!("invalid JSON: {e}")))?;
        let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
        let source = "generation_config.json";
        Ok(match v.get("do_sample").and_then(serde_json::Value::as_bool) {
            None => Self::BUILT_IN,
            Some(false) => {
                SamplingDefaults { temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, ..Self::hf(&num, source) }
            }
            Some(true) => Self::hf(&num, source),
        })
    }

    fn hf(num: &dyn Fn(&str) -> Option<f64>, source: &'static str) -> Self {
        SamplingDefaults {
            temperature: num("temperature").unwrap_or(1.0) as f32,
            top_k: num("top_k").map_or(50, |k| k.max(0.0) as usize),
            top_p: num("top_p").unwrap_or(1.0) as f32,
            min_p: num("min_p").unwrap_or(0.0) as f32,
            repeat_penalty: num("repetition_penalty").unwrap_or(1.0) as f32,
            source,
        }
    }

    /// A generation config that samples like this (stopping options default).
    pub fn generate_config(&self) -> GenerateConfig {
        GenerateConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SamplingDefaults;

    fn from_json(text: &str) -> SamplingDefaults {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("generation_config.json");
        std::fs::write(&p, text).unwrap();
        SamplingDefaults::from_generation_config(&p).unwrap()
    }

    #[test]
    fn generation_config_is_read_as_transformers_reads_it() {
        let s = from_json(r#"{"do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 20}"#);
        assert_eq!((s.temperature, s.top_k, s.top_p, s.source), (0.6, 20, 0.9, "generation_config.json"));
        assert_eq!(from_json(r#"{"do_sample": false, "temperature": 0.6}"#).temperature, 0.0);
        assert_eq!(from_json(r#"{"bos_token_id": 1}"#), SamplingDefaults::BUILT_IN);
        assert!(SamplingDefaults::from_generation_config(std::path::Path::new("/nonexistent/g.json")).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("generation_config.json");
        std::fs::write(&p, "{").unwrap();
        assert!(SamplingDefaults::from_generation_config(&p).is_err());
    }
}
