//! `plugins.toml`: which plugin libraries to load, backend aliases and the default order.
//!
//! ```toml
//! builtin_plugins = true               # register the plugins linked into the binary
//! default_backends = ["candle"]        # tried in order when no backend is named
//!
//! [aliases]
//! cpu = "candle"                       # an alias names a backend...
//! cuda = { backend = "tch", device = "cuda" }   # ...and optionally a device
//!
//! [[plugin]]
//! path = "target/release/libinfer_backend_tch.so"   # relative to this file
//! optional = true                      # a missing file is skipped, not an error
//! backends = ["tch"]                   # load it only when the tch backend may be used
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{Error, Result};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Register the plugins linked into the binary (default true). A host that wants only
    /// library-loaded plugins (or to swap a built-in for its library build) sets it false.
    #[serde(default = "yes")]
    pub builtin_plugins: bool,
    #[serde(default)]
    pub default_backends: Vec<String>,
    #[serde(default)]
    pub aliases: BTreeMap<String, Alias>,
    #[serde(default, rename = "plugin")]
    pub plugins: Vec<PluginLibraryConfig>,
    /// Directory relative plugin paths are resolved against (the config file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The file this configuration was read from (`None`: built-in defaults, no file found).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            builtin_plugins: true,
            default_backends: Vec::new(),
            aliases: BTreeMap::new(),
            plugins: Vec::new(),
            base_dir: PathBuf::new(),
            source: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Alias {
    Backend(String),
    Target { backend: String, device: Option<String> },
}

impl Alias {
    pub fn backend(&self) -> &str {
        match self {
            Alias::Backend(b) | Alias::Target { backend: b, .. } => b,
        }
    }
    pub fn device(&self) -> Option<&str> {
        match self {
            Alias::Backend(_) => None,
            Alias::Target { device, .. } => device.as_deref(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginLibraryConfig {
    pub path: PathBuf,
    #[serde(default)]
    pub optional: bool,
    /// The backends the library provides. When given, the library is loaded only when one of
    /// them may be used (named, through an alias, or in the default order): a candle run then
    /// never maps libtorch (~110 MB of resident memory and its start-up time).
    #[serde(default)]
    pub backends: Vec<String>,
}

impl PluginConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut cfg: PluginConfig =
            toml::from_str(&text).map_err(|e| Error::config(path, e.to_string().trim_end().replace('\n', " ")))?;
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        cfg.source = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// The library paths, resolved against the config file's directory.
    pub fn library_paths(&self) -> impl Iterator<Item = (PathBuf, bool)> + '_ {
        self.plugins.iter().map(|p| (self.resolve_path(&p.path), p.optional))
    }

    pub fn resolve_path(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }

    /// The backend names `name` may stand for: itself, and the backend of an alias of that name.
    pub fn backend_names_for(&self, name: &str) -> Vec<String> {
        let mut out = vec![name.to_string()];
        if let Some(a) = self.aliases.get(name) {
            out.push(a.backend().to_string());
        }
        out
    }

    /// The configuration to use, from the first of: `explicit` (e.g. `--config`),
    /// `$INFER_CONFIG`, a `plugins.toml` in the current directory or its ancestors,
    /// `$XDG_CONFIG_HOME/infer/plugins.toml` (default `~/.config/infer/plugins.toml`), a
    /// `plugins.toml` beside the running executable; else built-in defaults.
    pub fn discover(explicit: Option<&Path>) -> Result<Self> {
        if let Some(p) = explicit {
            return Self::from_file(p);
        }
        if let Some(p) = std::env::var_os("INFER_CONFIG").filter(|v| !v.is_empty()) {
            return Self::from_file(Path::new(&p));
        }
        match Self::search_path().into_iter().find(|c| c.is_file()) {
            Some(found) => Self::from_file(&found),
            None => Ok(Self::default()),
        }
    }

    /// Where [`discover`](Self::discover) looks when neither `--config` nor `$INFER_CONFIG`
    /// names a file, in order.
    pub fn search_path() -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut dir = std::env::current_dir().ok();
        while let Some(d) = dir {
            out.push(d.join("plugins.toml"));
            dir = d.parent().map(Path::to_path_buf);
        }
        let env_dir = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(config) = env_dir("XDG_CONFIG_HOME").or_else(|| env_dir("HOME").map(|h| h.join(".config"))) {
            out.push(config.join("infer").join("plugins.toml"));
        }
        if let Some(exe_dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
            out.push(exe_dir.join("plugins.toml"));
        }
        out
    }
}
