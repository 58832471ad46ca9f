//! The registry: every backend and model plugin, built in or loaded from a library, behind one
//! lookup. Host applications and the CLI get theirs from [`Registry::from_config`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::audio::{AudioCodec, SpeechRecognizer, SpeechSynthesizer};
use crate::backend::lift;
use crate::checkpoint_info::CheckpointInfo;
use crate::codec_ffi::HostCodec;
use crate::embed::TextEmbedder;
use crate::embed_ffi::HostEmbedder;
use crate::plugin::{
    self, library, Architecture, AudioCodecKind, BackendPlugin, Kind, ModelKind, ModelLoadOptions, ModelPluginRef,
    SpeechRecognition, SpeechSynthesis, TextEmbedding, TextGeneration,
};
use crate::plugin_config::PluginConfig;
use crate::recognizer_ffi::HostRecognizer;
use crate::speech_ffi::HostSpeech;
use crate::text::chat_template::JinjaTemplate;
use crate::text::engine::LlmEngine;
use crate::text::model::TextModel;
use crate::text::tokenizer::Tokenizer;
use crate::text::types::{ChatTemplateOrigin, LoadConfig};
use crate::text::TokenizerConventions;
use crate::{Backend, DType, Error, Result};

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    BuiltIn,
    Library(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::BuiltIn => f.write_str("built in"),
            Origin::Library(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Which backend a process will run on, so that plugin libraries declaring other backends need
/// not be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendNeed<'a> {
    /// Any: load every library (listing plugins, or a host that decides later).
    Any,
    /// The configured default order.
    Default,
    /// A backend name, alias or device kind.
    Named(&'a str),
}

impl BackendNeed<'_> {
    fn wants(&self, config: &PluginConfig, provided: &[String]) -> bool {
        let provides = |name: &str| config.backend_names_for(name).iter().any(|b| provided.contains(b));
        match *self {
            BackendNeed::Any => true,
            BackendNeed::Named(n) => provides(n),
            BackendNeed::Default => config.default_backends.iter().any(|n| provides(n)),
        }
    }
}

#[derive(Clone)]
pub struct BackendEntry {
    pub plugin: BackendPlugin,
    pub origin: Origin,
}

#[derive(Clone)]
pub struct ModelEntry {
    pub plugin: ModelPluginRef,
    pub origin: Origin,
}

impl ModelEntry {
    /// The kinds this plugin provides, by name (`text`, `speech synthesis`; a kind this host does
    /// not know by its extension id).
    pub fn kind_names(&self) -> Vec<String> {
        self.plugin
            .extensions()
            .iter()
            .map(|e| {
                ModelKind::ALL
                    .into_iter()
                    .find(|k| k.id() == e.id.as_str())
                    .map_or_else(|| e.id.to_string(), |k| k.name().to_string())
            })
            .collect()
    }

    /// The names of the architectures it claims.
    pub fn architecture_names(&self) -> Vec<&'static str> {
        self.plugin.architectures().as_slice().iter().map(|a| a.name.as_str()).collect()
    }

    /// The vtable of kind `K`; an error naming the plugin when it does not provide it or was
    /// built against an incompatible SDK.
    pub fn extension<K: Kind>(&self) -> Result<K::Vtable> {
        let name = self.plugin.name();
        self.plugin
            .extension::<K>()
            .map_err(|e| Error::backend(format!("model plugin {name} ({}): {e}", self.origin)))?
            .ok_or_else(|| Error::unsupported(format!("model plugin {name} provides no {} models", K::NAME)))
    }
}

#[derive(Default)]
pub struct Registry {
    backends: Vec<BackendEntry>,
    models: Vec<ModelEntry>,
    config: PluginConfig,
    /// Live backend instances by (name, device), shared by every model loaded on them.
    instances: Mutex<HashMap<(String, String), Backend>>,
    /// Optional plugin libraries that exist but failed to load (e.g. their native library is
    /// missing), with the error: named when a backend lookup then fails.
    skipped: Vec<String>,
}

impl Registry {
    /// A registry with nothing in it.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The plugins linked into this binary.
    pub fn builtin() -> Result<Self> {
        let mut r = Self::empty();
        for p in plugin::builtin_backends() {
            r.register_backend(*p, Origin::BuiltIn)?;
        }
        for p in plugin::builtin_models() {
            r.register_model(p, Origin::BuiltIn)?;
        }
        Ok(r)
    }

    /// Built-in plugins plus every library `config` lists, with its aliases and defaults.
    pub fn from_config(config: PluginConfig) -> Result<Self> {
        Self::from_config_for(config, BackendNeed::Any)
    }

    /// Like [`from_config`](Self::from_config), but a library that declares its backends
    /// (`backends = [...]`) is loaded only if `need` may use one of them.
    pub fn from_config_for(config: PluginConfig, need: BackendNeed<'_>) -> Result<Self> {
        let mut r = if config.builtin_plugins { Self::builtin()? } else { Self::empty() };
        let mut deferred = Vec::new();
        for entry in &config.plugins {
            let path = config.resolve_path(&entry.path);
            if entry.backends.is_empty() || need.wants(&config, &entry.backends) {
                r.load_configured(&path, entry.optional)?;
            } else {
                deferred.push((path, entry.optional));
            }
        }
        // Nothing to run on otherwise (no built-in backend, the needed one unknown): load them all.
        let needed_is_missing = match need {
            BackendNeed::Named(n) => !config.backend_names_for(n).iter().any(|b| r.has_backend(b)),
            _ => r.backends.is_empty(),
        };
        if needed_is_missing {
            for (path, optional) in deferred {
                r.load_configured(&path, optional)?;
            }
        }
        r.config = config;
        Ok(r)
    }

    fn load_configured(&mut self, path: &Path, optional: bool) -> Result<()> {
        if optional && !path.exists() {
            tracing::debug!("optional plugin library {} not present", path.display());
            return Ok(());
        }
        match self.load_library(path) {
            Ok(()) => Ok(()),
            // An optional library that cannot load (say, libtorch is missing) must not take
            // the rest of infer down with it: skip it, and say why when its backend is asked for.
            Err(e) if optional => {
                tracing::warn!("skipping optional plugin: {e}");
                self.skipped.push(e.to_string());
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn has_backend(&self, name: &str) -> bool {
        self.backends.iter().any(|e| e.plugin.name == name || e.plugin.devices.iter().any(|d| d.as_str() == name))
    }

    /// [`Registry::from_config`] with the configuration found by [`PluginConfig::discover`].
    pub fn discover(config_path: Option<&Path>) -> Result<Self> {
        Self::from_config(PluginConfig::discover(config_path)?)
    }

    /// [`Registry::from_config_for`] with the configuration found by [`PluginConfig::discover`].
    pub fn discover_for(config_path: Option<&Path>, need: BackendNeed<'_>) -> Result<Self> {
        Self::from_config_for(PluginConfig::discover(config_path)?, need)
    }

    pub fn config(&self) -> &PluginConfig {
        &self.config
    }

    pub fn register_backend(&mut self, plugin: BackendPlugin, origin: Origin) -> Result<()> {
        if let Some(prev) = self.backends.iter().find(|e| e.plugin.name == plugin.name) {
            return Err(duplicate("backend", plugin.name.as_str(), &prev.origin, &origin));
        }
        self.backends.push(BackendEntry { plugin, origin });
        Ok(())
    }

    pub fn register_model(&mut self, plugin: ModelPluginRef, origin: Origin) -> Result<()> {
        if let Some(prev) = self.models.iter().find(|e| e.plugin.name() == plugin.name()) {
            return Err(duplicate("model plugin", plugin.name().as_str(), &prev.origin, &origin));
        }
        self.models.push(ModelEntry { plugin, origin });
        Ok(())
    }

    /// Loads a plugin library and registers everything it exports.
    pub fn load_library(&mut self, path: &Path) -> Result<()> {
        let lib = library::load_library(path)?;
        let origin = Origin::Library(path.to_path_buf());
        for b in lib.backends {
            self.register_backend(b, origin.clone()).map_err(|e| Error::plugin(path, e.to_string()))?;
        }
        for m in lib.models {
            self.register_model(m, origin.clone()).map_err(|e| Error::plugin(path, e.to_string()))?;
        }
        Ok(())
    }

    pub fn backends(&self) -> &[BackendEntry] {
        &self.backends
    }

    pub fn models(&self) -> &[ModelEntry] {
        &self.models
    }

    /// The plugin libraries that registered a plugin, each once.
    pub fn libraries(&self) -> Vec<&Path> {
        let origins = self.backends.iter().map(|b| &b.origin).chain(self.models.iter().map(|m| &m.origin));
        let mut out: Vec<&Path> = Vec::new();
        for o in origins {
            if let Origin::Library(p) = o {
                if !out.contains(&p.as_path()) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Optional plugin libraries that failed to load, with their errors.
    pub fn skipped_libraries(&self) -> &[String] {
        &self.skipped
    }

    fn backend_names(&self) -> String {
        let mut names: Vec<String> = self.backends.iter().map(|b| b.plugin.name.to_string()).collect();
        names.extend(self.config.aliases.keys().cloned());
        // Device kinds are names too, but only those an available backend drives.
        for e in self.backends.iter().filter(|e| (e.plugin.available)()) {
            names.extend(e.plugin.devices.iter().filter(|d| DEVICE_KINDS.contains(&d.as_str())).map(|d| d.to_string()));
        }
        names.sort();
        names.dedup();
        let mut s = names.join(", ");
        for e in &self.skipped {
            s.push_str(&format!("; skipped {e}"));
        }
        s
    }

    /// Resolves a backend name or alias to (plugin, device).
    fn resolve(&self, name: &str) -> Result<(&BackendEntry, Option<String>)> {
        if let Some(e) = self.backends.iter().find(|e| e.plugin.name == name) {
            return Ok((e, None));
        }
        if let Some(alias) = self.config.aliases.get(name) {
            let e = self.backends.iter().find(|e| e.plugin.name == alias.backend()).ok_or_else(|| {
                Error::UnknownBackend {
                    name: format!("{} (alias {name})", alias.backend()),
                    known: format!("{}; load its plugin library in plugins.toml", self.backend_names()),
                }
            })?;
            return Ok((e, alias.device().map(String::from)));
        }
        // A device kind names the first available backend that drives it.
        if let Some(e) =
            self.backends.iter().find(|e| e.plugin.devices.iter().any(|d| d.as_str() == name) && (e.plugin.available)())
        {
            return Ok((e, Some(name.to_string())));
        }
        if DEVICE_KINDS.contains(&name) {
            return Err(Error::unsupported(no_backend_drives(name)));
        }
        Err(Error::UnknownBackend { name: name.to_string(), known: self.backend_names() })
    }

    /// A backend instance by name or alias (`None`: the default), on `device` (`None`: the
    /// alias's device or the backend's default).
    pub fn backend(&self, name: Option<&str>, device: Option<&str>) -> Result<Backend> {
        let (entry, alias_device) = match name {
            Some(n) => self.resolve(n)?,
            None => (self.default_entry()?, None),
        };
        let device = device.map(String::from).or(alias_device).unwrap_or_default();
        let key = (entry.plugin.name.to_string(), device.clone());
        let mut instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = instances.get(&key) {
            return Ok(b.clone());
        }
        if !(entry.plugin.available)() {
            return Err(Error::backend(format!(
                "backend `{}` ({}) is not available on this machine",
                entry.plugin.name, entry.origin
            )));
        }
        let obj = lift((entry.plugin.create)(device.as_str().into()))?;
        let b = Backend::new(obj);
        instances.insert(key, b.clone());
        Ok(b)
    }

    /// Shorthand for `backend(Some(name), None)`.
    pub fn get(&self, name: &str) -> Result<Backend> {
        self.backend(Some(name), None)
    }

    /// The first available backend in the configured order (else registration order).
    pub fn default_backend(&self) -> Result<Backend> {
        self.backend(None, None)
    }

    fn default_entry(&self) -> Result<&BackendEntry> {
        let ordered = self.config.default_backends.iter().filter_map(|n| self.resolve(n).ok().map(|(e, _)| e));
        ordered
            .chain(self.backends.iter())
            .find(|e| (e.plugin.available)())
            .ok_or_else(|| Error::backend("no backend is available (none built in, none loaded)"))
    }

    /// What `path` holds, with the architecture rules of every registered plugin (a config.json
    /// without `model_type`, a Mistral params.json) applied.
    pub fn inspect(&self, path: &Path) -> Result<CheckpointInfo> {
        let architectures: Vec<&Architecture> =
            self.models.iter().flat_map(|m| m.plugin.architectures().as_slice().iter()).collect();
        CheckpointInfo::inspect_with(path, &architectures)
    }

    /// The model plugin that loads `model_type` as a model of `kind`.
    pub fn model_plugin(&self, kind: ModelKind, model_type: &str) -> Result<&ModelEntry> {
        self.model_plugin_for(kind.id(), model_type)
    }

    /// [`Registry::model_plugin`] for a kind named by its extension id (kinds this host does
    /// not enumerate in [`ModelKind`] included).
    pub fn model_plugin_for(&self, kind_id: &str, model_type: &str) -> Result<&ModelEntry> {
        self.models
            .iter()
            .filter(|m| m.plugin.provides(kind_id))
            .find(|m| m.plugin.architecture(model_type).is_some())
            .ok_or_else(|| {
                if let Some(e) = self.other_version_of(kind_id, model_type) {
                    return e;
                }
                let mut known: Vec<&str> = self
                    .models
                    .iter()
                    .filter(|m| m.plugin.provides(kind_id))
                    .flat_map(|m| m.architecture_names())
                    .collect();
                known.sort_unstable();
                Error::UnknownModelType { model_type: model_type.to_string(), known: known.join(", ") }
            })
    }

    /// A plugin that claims `model_type` and provides the kind `kind_id` under another version
    /// of its id (built against an SDK whose layouts differ): the error that says so, not an
    /// unknown model type.
    fn other_version_of(&self, kind_id: &str, model_type: &str) -> Option<Error> {
        let stem = |id: &str| id.rsplit_once('/').map_or(id, |(s, _)| s).to_string();
        let (entry, theirs) =
            self.models.iter().filter(|m| m.plugin.architecture(model_type).is_some()).find_map(|m| {
                m.plugin
                    .extensions()
                    .iter()
                    .find(|e| stem(e.id.as_str()) == stem(kind_id))
                    .map(|e| (m, e.id.to_string()))
            })?;
        Some(Error::unsupported(format!(
            "model plugin {} ({}) provides {theirs}, this host needs {kind_id}: rebuild it against this infer-sdk",
            entry.plugin.name(),
            entry.origin
        )))
    }

    /// Loads a text model: picks the plugin from the checkpoint's `model_type`, the backend
    /// from `cfg`, and wraps the result in the shared generation loop.
    pub fn load_model(&self, path: &Path, cfg: &LoadConfig) -> Result<Box<dyn TextModel>> {
        if let Some(adapter) = &cfg.adapter_path {
            return Err(Error::unsupported(format!("LoRA adapters ({adapter}) are not supported yet")));
        }
        let ckpt = self.inspect(path)?;
        let entry = self.model_plugin(ModelKind::Text, &ckpt.model_type)?;
        let load = entry.extension::<TextGeneration>()?.load();
        let architecture = entry.plugin.architecture(&ckpt.model_type);
        // Tokenizer and sampling defaults first: their metadata parse is freed before the
        // weights load, not stacked on them at the peak.
        let (tokenizer, sampling) = ckpt.tokenizer_and_sampling(&TokenizerConventions::of(architecture))?;
        let backend = self.backend(cfg.backend.as_deref(), cfg.device.as_deref())?;
        let options = load_options(cfg);
        // The text models load GGUF files already quantized; none quantizes at load yet.
        options.refuse_quant(&ckpt.model_type)?;
        let path_str = ckpt.path.to_string_lossy();
        let lm = lift(load(path_str.as_ref().into(), &backend, &options))?;
        let add_bos = tokenizer.adds_bos();
        let chat_template = chat_template_override(cfg, architecture, tokenizer.as_ref())?;
        let mut engine = LlmEngine::new(lm, Arc::from(tokenizer), backend, &ckpt.model_type, cfg.context_len, add_bos)
            .with_kv_dtype(cfg.kv_dtype)?
            .with_sampling_defaults(sampling);
        if let Some((template, origin)) = chat_template {
            engine = engine.with_chat_template(template, origin);
        }
        crate::process_memory::release_free_heap();
        Ok(Box::new(engine))
    }
}

impl Registry {
    /// Loads a speech synthesizer (Qwen3-TTS, ...): the plugin from the checkpoint's
    /// `model_type`, the backend from `cfg`.
    pub fn load_speech_model(&self, path: &Path, cfg: &LoadConfig) -> Result<Box<dyn SpeechSynthesizer>> {
        Ok(Box::new(HostSpeech(self.load_kind::<SpeechSynthesis>(path, cfg)?)))
    }

    /// The model of kind `K` at `path`, as it crossed the plugin boundary (its FFI box): the
    /// plugin that provides `K` for the checkpoint's `model_type`, the backend from `cfg`. The
    /// typed loaders below wrap it; a host with a kind of its own calls it directly.
    pub fn load_kind<K: Kind>(&self, path: &Path, cfg: &LoadConfig) -> Result<K::Boxed> {
        let ckpt = self.inspect(path)?;
        let entry = self.model_plugin_for(K::ID, &ckpt.model_type)?;
        let load = K::load_fn(entry.extension::<K>()?);
        let backend = self.backend(cfg.backend.as_deref(), cfg.device.as_deref())?;
        let options = load_options(cfg);
        let path_str = ckpt.path.to_string_lossy();
        lift(load(path_str.as_ref().into(), &backend, &options))
    }
}

fn load_options(cfg: &LoadConfig) -> ModelLoadOptions {
    ModelLoadOptions { dtype: cfg.dtype.unwrap_or(DType::F32), context_len: cfg.context_len, quant: cfg.quant.into() }
}

/// The template `chat` should use instead of the tokenizer's: the caller's file, else (when the
/// checkpoint has none) its architecture's built-in format.
fn chat_template_override(
    cfg: &LoadConfig,
    architecture: Option<&Architecture>,
    tokenizer: &dyn Tokenizer,
) -> Result<Option<(JinjaTemplate, ChatTemplateOrigin)>> {
    let name = |id: Option<u32>| id.and_then(|i| tokenizer.id_to_token(i)).unwrap_or_default();
    let (bos, eos) = (name(tokenizer.bos_id()), name(tokenizer.eos_ids().first().copied()));
    if let Some(path) = &cfg.chat_template {
        let src = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let template = JinjaTemplate::new(src, &bos, &eos).map_err(|e| Error::config(path, e.to_string()))?;
        return Ok(Some((template, ChatTemplateOrigin::File(path.clone()))));
    }
    if tokenizer.chat_template().is_some() {
        return Ok(None);
    }
    match architecture.and_then(|a| a.chat_format.into_option()) {
        Some(f) => Ok(Some((
            JinjaTemplate::new(f.source.to_string(), &bos, &eos)?,
            ChatTemplateOrigin::BuiltIn(f.name.as_str()),
        ))),
        None => Ok(None),
    }
}

/// Device kinds users may type as a backend name: each selects the first available backend
/// that drives it.
const DEVICE_KINDS: [&str; 4] = ["cpu", "cuda", "metal", "gpu"];

/// One line for a device kind no available backend drives: what it needs and what to use here.
fn no_backend_drives(kind: &str) -> String {
    match kind {
        "metal" | "gpu" => format!(
            "no backend here drives `{kind}`: Metal needs macOS on Apple silicon (where `--backend metal` is MLX on \
             the GPU); on this machine use `--backend mlx --device cpu` (after tools/setup_mlx.sh) or `--backend candle`"
        ),
        "cuda" => "no backend here drives `cuda`: CUDA needs an NVIDIA GPU and the tch backend with libtorch's CUDA \
                   libraries (docs/backends/tch.md); on this machine use `--backend candle` or `--backend tch` on the CPU"
            .to_string(),
        other => format!("no backend here drives `{other}` (none built in, none loaded by plugins.toml)"),
    }
}

impl Registry {
    /// Loads a speech recognizer (Voxtral Realtime, ...): the plugin from the checkpoint's
    /// `model_type` (config.json or a Mistral params.json), the backend from `cfg`.
    pub fn load_recognizer(&self, path: &Path, cfg: &LoadConfig) -> Result<Box<dyn SpeechRecognizer>> {
        // The recognizer decides what `quant` means for it (Voxtral Realtime quantizes every
        // linear, its tied head at 8 bits), as speech synthesizers do.
        Ok(Box::new(HostRecognizer(self.load_kind::<SpeechRecognition>(path, cfg)?)))
    }
}

impl Registry {
    /// Loads an audio codec (waveform <-> codes): the plugin from the codec checkpoint's
    /// `model_type`, the backend from `cfg`.
    pub fn load_codec(&self, path: &Path, cfg: &LoadConfig) -> Result<Box<dyn AudioCodec>> {
        Ok(Box::new(HostCodec(self.load_kind::<AudioCodecKind>(path, cfg)?)))
    }
}

impl Registry {
    /// Loads a text embedder (Qwen3-Embedding, ...): the plugin that provides embeddings for the
    /// checkpoint's `model_type`, the backend from `cfg`.
    pub fn load_embedder(&self, path: &Path, cfg: &LoadConfig) -> Result<Box<dyn TextEmbedder>> {
        Ok(Box::new(HostEmbedder(self.load_kind::<TextEmbedding>(path, cfg)?)))
    }
}

fn duplicate(what: &str, name: &str, first: &Origin, second: &Origin) -> Error {
    Error::backend(format!("two plugins claim the {what} name `{name}`: {first} and {second}"))
}
