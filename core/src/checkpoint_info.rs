//! Recognising a checkpoint on disk: its format and the architecture it declares.

use std::path::{Path, PathBuf};

use crate::plugin::Architecture;
use crate::text::TokenizerConventions;

use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointFormat {
    /// A Hugging Face directory: config.json + safetensors.
    Safetensors,
    /// A single GGUF file.
    Gguf,
    /// Mistral's own layout: params.json + consolidated.safetensors + tekken.json.
    Mistral,
}

#[derive(Debug, Clone)]
pub struct CheckpointInfo {
    pub path: PathBuf,
    pub format: CheckpointFormat,
    /// config.json's `model_type` (or GGUF `general.architecture`).
    pub model_type: String,
}

impl CheckpointInfo {
    /// The tokenizer the checkpoint ships: GGUF metadata or the directory's tokenizer.json, with
    /// the conventions of the built-in plugin that claims its architecture.
    pub fn tokenizer(&self) -> Result<Box<dyn crate::Tokenizer>> {
        let plugins: Vec<_> = crate::plugin::builtin_models().collect();
        let architecture = plugins.iter().find_map(|p| p.architecture(&self.model_type));
        self.tokenizer_with(&TokenizerConventions::of(architecture))
    }

    /// The tokenizer the checkpoint ships, read with the claiming plugin's `conventions`.
    pub fn tokenizer_with(&self, conventions: &TokenizerConventions<'_>) -> Result<Box<dyn crate::Tokenizer>> {
        match self.format {
            CheckpointFormat::Gguf => {
                crate::text::gguf_tokenizer::tokenizer_from_gguf(&crate::gguf::GgufFile::open(&self.path)?, conventions)
            }
            CheckpointFormat::Safetensors => Ok(Box::new(crate::HfTokenizer::from_dir_with(&self.path, conventions)?)),
            CheckpointFormat::Mistral => {
                Ok(Box::new(crate::text::tekken::Tekken::from_file(&self.path.join("tekken.json"))?))
            }
        }
    }

    /// [`CheckpointInfo::tokenizer`] and [`CheckpointInfo::sampling_defaults`] with one parse of a
    /// GGUF file's metadata (its vocabulary is most of it) instead of one each.
    pub fn tokenizer_and_sampling(
        &self,
        conventions: &TokenizerConventions<'_>,
    ) -> Result<(Box<dyn crate::Tokenizer>, crate::text::generation_defaults::SamplingDefaults)> {
        if self.format == CheckpointFormat::Gguf {
            let g = crate::gguf::GgufFile::open(&self.path)?;
            let tokenizer = crate::text::gguf_tokenizer::tokenizer_from_gguf(&g, conventions)?;
            return Ok((tokenizer, crate::gguf::sampling_defaults(&g)));
        }
        Ok((self.tokenizer_with(conventions)?, self.sampling_defaults()?))
    }

    /// The sampling the checkpoint asks for when the caller sets none.
    pub fn sampling_defaults(&self) -> Result<crate::text::generation_defaults::SamplingDefaults> {
        use crate::text::generation_defaults::SamplingDefaults;
        match self.format {
            CheckpointFormat::Gguf => Ok(crate::gguf::sampling_defaults(&crate::gguf::GgufFile::open(&self.path)?)),
            CheckpointFormat::Safetensors => {
                SamplingDefaults::from_generation_config(&self.path.join("generation_config.json"))
            }
            CheckpointFormat::Mistral => Ok(SamplingDefaults::BUILT_IN),
        }
    }
}

impl CheckpointInfo {
    /// What `path` holds, with the architecture rules of the plugins built into this binary
    /// ([`Registry::inspect`](crate::Registry::inspect) applies those of loaded libraries too).
    pub fn inspect(path: &Path) -> Result<Self> {
        let plugins: Vec<_> = crate::plugin::builtin_models().collect();
        let architectures: Vec<&Architecture> =
            plugins.iter().flat_map(|p| p.architectures().as_slice().iter()).collect();
        Self::inspect_with(path, &architectures)
    }

    /// What `path` holds. A config.json or params.json that names no `model_type` is matched
    /// against `architectures`' marker tensors and params.json sections.
    pub fn inspect_with(path: &Path, architectures: &[&Architecture]) -> Result<Self> {
        if !path.exists() {
            return Err(Error::config(path, "model path does not exist"));
        }
        if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            let g = crate::gguf::GgufFile::open(path)?;
            return Ok(CheckpointInfo {
                path: path.to_path_buf(),
                format: CheckpointFormat::Gguf,
                model_type: g.architecture()?,
            });
        }
        let dir =
            if path.is_dir() { path.to_path_buf() } else { path.parent().unwrap_or(Path::new(".")).to_path_buf() };
        let cfg_path = dir.join("config.json");
        let params = dir.join("params.json");
        if !cfg_path.exists() && params.exists() {
            let model_type = mistral_model_type(&params, architectures)?;
            return Ok(CheckpointInfo { path: dir, format: CheckpointFormat::Mistral, model_type });
        }
        if !cfg_path.exists() {
            return Err(Error::config(&cfg_path, "not found (a model directory needs config.json, or params.json)"));
        }
        let text = std::fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::config(&cfg_path, format!("invalid JSON: {e}")))?;
        let model_type = match v.get("model_type") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(Error::config(&cfg_path, format!("field model_type: expected a string, found {other}")))
            }
            None => from_architectures(&v).or_else(|| from_marker_tensors(&dir, architectures)).ok_or_else(|| {
                Error::config(&cfg_path, "missing field model_type (and no architectures list to infer it from)")
            })?,
        };
        Ok(CheckpointInfo { path: dir, format: CheckpointFormat::Safetensors, model_type })
    }
}

/// The architecture a Mistral-native params.json describes (it names none): an explicit
/// `model_type`, else the first architecture whose declared sections it has.
fn mistral_model_type(path: &Path, architectures: &[&Architecture]) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::config(path, format!("invalid JSON: {e}")))?;
    if let Some(t) = v.get("model_type").and_then(|t| t.as_str()) {
        return Ok(t.to_string());
    }
    let declared = architectures.iter().filter(|a| !a.params_sections.is_empty());
    if let Some(a) = declared.clone().find(|a| a.params_sections.iter().all(|p| v.pointer(p.as_str()).is_some())) {
        return Ok(a.name.to_string());
    }
    let known: Vec<&str> = declared.map(|a| a.name.as_str()).collect();
    Err(Error::config(
        path,
        format!(
            "cannot tell which model this params.json describes (no model_type, and it has the sections of none of: {})",
            if known.is_empty() { "(no plugin declares params.json sections)".to_string() } else { known.join(", ") }
        ),
    ))
}

/// `["Qwen3ForCausalLM"]` -> `qwen3`.
fn from_architectures(v: &serde_json::Value) -> Option<String> {
    let arch = v.get("architectures")?.as_array()?.first()?.as_str()?;
    let base = arch.strip_suffix("ForCausalLM").unwrap_or(arch);
    Some(base.to_ascii_lowercase())
}

/// For configs without `model_type` or `architectures`: the first architecture whose marker
/// tensors the weights hold (go-mlx's rule, as data in the plugins' descriptors).
fn from_marker_tensors(dir: &Path, architectures: &[&Architecture]) -> Option<String> {
    let marked: Vec<&&Architecture> = architectures.iter().filter(|a| !a.marker_tensors.is_empty()).collect();
    if marked.is_empty() {
        return None;
    }
    let names = tensor_names(dir)?;
    let found = |t: &str| names.iter().any(|n| n == t);
    marked.into_iter().find(|a| a.marker_tensors.iter().all(|t| found(t.as_str()))).map(|a| a.name.to_string())
}

/// Tensor names from the shard index, or from the header of `model.safetensors`.
fn tensor_names(dir: &Path) -> Option<Vec<String>> {
    use std::io::Read;
    let index = dir.join("model.safetensors.index.json");
    let header: serde_json::Value = if index.exists() {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(index).ok()?).ok()?;
        v.get("weight_map")?.clone()
    } else {
        let mut f = std::fs::File::open(dir.join("model.safetensors")).ok()?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len).ok()?;
        let len = usize::try_from(u64::from_le_bytes(len)).ok().filter(|&n| n < 100 << 20)?;
        let mut buf = vec![0u8; len];
        f.read_exact(&mut buf).ok()?;
        serde_json::from_slice(&buf).ok()?
    };
    Some(header.as_object()?.keys().cloned().collect())
}
