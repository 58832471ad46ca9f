//! What a sentence-transformers folder says about its pipeline: the pooling
//! (`1_Pooling/config.json`, in the pre-v5 boolean form or v5's `pooling_mode`), whether a
//! Normalize module follows (`modules.json`), the prompts and the longest input.

use std::collections::BTreeMap;
use std::path::Path;

use infer_core::{Error, Result};
use serde::Deserialize;
use serde_json::Value;

use super::pooling::Pooling;

/// The pipeline of a sentence-transformers folder.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceConfig {
    pub pooling: Pooling,
    /// Whether pooling covers the prompt's tokens too.
    pub include_prompt: bool,
    /// An L2 normalisation after pooling.
    pub normalize: bool,
    /// Prompt name -> the prefix it puts before a text.
    pub prompts: BTreeMap<String, String>,
    /// The prompt used when none is asked for.
    pub default_prompt: Option<String>,
    /// The longest input in tokens, when the folder bounds it.
    pub max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

#[derive(Deserialize, Default)]
struct Prompts {
    #[serde(default)]
    prompts: BTreeMap<String, String>,
    default_prompt_name: Option<String>,
}

impl SentenceConfig {
    /// Reads the folder `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        let modules_path = dir.join("modules.json");
        if !modules_path.exists() {
            return Err(Error::config(
                &modules_path,
                "not found: an embedding checkpoint is a sentence-transformers folder (modules.json names its \
                 pooling)",
            ));
        }
        let modules: Vec<Module> = read_json(&modules_path)?;
        let pooling_module = modules
            .iter()
            .find(|m| m.kind.ends_with("Pooling"))
            .ok_or_else(|| Error::config(&modules_path, "no Pooling module"))?;
        let pooling_path = dir.join(&pooling_module.path).join("config.json");
        let (pooling, include_prompt) = pooling_config(&pooling_path, &read_json(&pooling_path)?)?;
        let normalize = modules.iter().any(|m| m.kind.ends_with("Normalize"));

        let prompts_path = dir.join("config_sentence_transformers.json");
        let prompts: Prompts = if prompts_path.exists() { read_json(&prompts_path)? } else { Prompts::default() };
        if let Some(name) = &prompts.default_prompt_name {
            if !prompts.prompts.contains_key(name) {
                return Err(Error::config(&prompts_path, format!("default_prompt_name `{name}` is not a prompt")));
            }
        }
        let bert_path = dir.join("sentence_bert_config.json");
        let max_seq_length = if bert_path.exists() {
            let v: Value = read_json(&bert_path)?;
            v.get("max_seq_length").and_then(Value::as_u64).map(|n| n as usize)
        } else {
            None
        };
        Ok(SentenceConfig {
            pooling,
            include_prompt,
            normalize,
            prompts: prompts.prompts,
            default_prompt: prompts.default_prompt_name,
            max_seq_length,
        })
    }

    /// The prefix of prompt `name` (none asked: the default prompt's, else nothing).
    pub fn prompt(&self, name: Option<&str>) -> Result<&str> {
        match name.or(self.default_prompt.as_deref()) {
            None => Ok(""),
            Some(n) => self.prompts.get(n).map(String::as_str).ok_or_else(|| {
                let known: Vec<&str> = self.prompts.keys().map(String::as_str).collect();
                Error::unsupported(format!(
                    "unknown prompt name `{n}` (this model has: {})",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ))
            }),
        }
    }
}

/// The pooling of a Pooling module's config.json and its `include_prompt`.
fn pooling_config(path: &Path, v: &Value) -> Result<(Pooling, bool)> {
    let include_prompt = v.get("include_prompt").and_then(Value::as_bool).unwrap_or(true);
    // sentence-transformers v5+: one `pooling_mode` string (or a list of them).
    let modes: Vec<String> = match v.get("pooling_mode") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(String::from).collect(),
        Some(other) => return Err(Error::config(path, format!("pooling_mode {other} is not a mode name"))),
        // Before: one boolean per mode.
        None => v
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, flag)| k.starts_with("pooling_mode_") && flag.as_bool() == Some(true))
            .map(|(k, _)| k["pooling_mode_".len()..].to_string())
            .collect(),
    };
    match modes.as_slice() {
        [one] => Ok((Pooling::from_mode(one).map_err(|e| Error::config(path, e))?, include_prompt)),
        [] => Err(Error::config(path, "names no pooling mode")),
        many => Err(Error::config(
            path,
            format!("combines pooling modes ({}); only one mode is supported", many.join(", ")),
        )),
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::config(path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_pooling_formats_name_the_same_mode() {
        let p = Path::new("1_Pooling/config.json");
        let legacy = json!({"pooling_mode_cls_token": false, "pooling_mode_lasttoken": true, "include_prompt": true});
        assert_eq!(pooling_config(p, &legacy).unwrap(), (Pooling::LastToken, true));
        assert_eq!(pooling_config(p, &json!({"pooling_mode": "lasttoken"})).unwrap(), (Pooling::LastToken, true));
        let mean = json!({"pooling_mode_mean_tokens": true, "include_prompt": false});
        assert_eq!(pooling_config(p, &mean).unwrap(), (Pooling::Mean, false));
        assert_eq!(pooling_config(p, &json!({"pooling_mode": "cls"})).unwrap().0, Pooling::Cls);
    }

    #[test]
    fn unknown_combined_or_missing_modes_are_errors() {
        let p = Path::new("1_Pooling/config.json");
        let err = |v: Value| pooling_config(p, &v).unwrap_err().to_string();
        assert!(err(json!({"pooling_mode": "weightedmean"})).contains("weightedmean"));
        assert!(err(json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true})).contains("combines"));
        assert!(err(json!({"pooling_mode_cls_token": false})).contains("no pooling mode"));
    }
}
