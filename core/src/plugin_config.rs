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
    /// `$INFER_CONFIG`, `$XDG_CONFIG_HOME/infer/plugins.toml` (default
    /// `~/.config/infer/plugins.toml`), a `plugins.toml` beside the running executable; else
    /// built-in defaults.
    ///
    /// A configuration names libraries that are loaded, and a library's code runs as it loads,
    /// so only files the user chose or owns are read: a `plugins.toml` in the working directory
    /// is never picked up by itself (a downloaded model folder could ship one beside a library;
    /// [`working_dir_config`](Self::working_dir_config) finds it for a hint), and a discovered
    /// file is refused, with one line, unless it and its folder belong to the user (or root) and
    /// nobody else may write them, as git refuses a repository another user owns.
    pub fn discover(explicit: Option<&Path>) -> Result<Self> {
        if let Some(p) = explicit {
            return Self::from_file(p);
        }
        if let Some(p) = std::env::var_os("INFER_CONFIG").filter(|v| !v.is_empty()) {
            return Self::from_file(Path::new(&p));
        }
        match Self::search_path().into_iter().find(|c| c.is_file()) {
            Some(found) => {
                check_trusted(&found)?;
                Self::from_file(&found)
            }
            None => Ok(Self::default()),
        }
    }

    /// Where [`discover`](Self::discover) looks when neither `--config` nor `$INFER_CONFIG`
    /// names a file, in order.
    pub fn search_path() -> Vec<PathBuf> {
        let mut out = Vec::new();
        let env_dir = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(config) = env_dir("XDG_CONFIG_HOME").or_else(|| env_dir("HOME").map(|h| h.join(".config"))) {
            out.push(config.join("infer").join("plugins.toml"));
        }
        if let Some(exe_dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
            out.push(exe_dir.join("plugins.toml"));
        }
        out
    }

    /// The nearest `plugins.toml` in the working directory or its ancestors, which
    /// [`discover`](Self::discover) does not read unless it is named: for a hint that says so.
    pub fn working_dir_config() -> Option<PathBuf> {
        let cwd = std::env::current_dir().ok()?;
        cwd.ancestors().map(|d| d.join("plugins.toml")).find(|p| p.is_file())
    }
}

/// Refuses a discovered configuration that someone other than the user (or root) owns or may
/// write, or whose folder they do: either could point it at their library.
#[cfg(unix)]
pub fn check_trusted(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    for (what, p) in [("the file", path), ("its folder", folder)] {
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        let why = if meta.uid() != me && meta.uid() != 0 {
            format!("{what} is owned by uid {}, not by you (uid {me}) or root", meta.uid())
        } else if meta.mode() & 0o022 != 0 {
            format!("{what} ({}) may be written by its group or others (chmod go-w)", p.display())
        } else {
            continue;
        };
        return Err(Error::config(
            path,
            format!("not trusted, so its plugin libraries are not loaded: {why}; name it with --config or INFER_CONFIG to use it anyway"),
        ));
    }
    Ok(())
}

/// Elsewhere files carry no Unix owner and mode to check.
#[cfg(not(unix))]
pub fn check_trusted(_path: &Path) -> Result<()> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_group_or_world_writable_config_or_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("infer");
        std::fs::create_dir(&folder).unwrap();
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cfg = folder.join("plugins.toml");
        std::fs::write(&cfg, "").unwrap();
        let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        mode(&cfg, 0o644);
        check_trusted(&cfg).unwrap();
        for m in [0o664, 0o646] {
            mode(&cfg, m);
            let e = check_trusted(&cfg).unwrap_err().to_string();
            assert!(e.contains("not trusted") && e.contains("the file") && e.contains("chmod go-w"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        mode(&cfg, 0o600);
        mode(&folder, 0o777);
        let e = check_trusted(&cfg).unwrap_err().to_string();
        assert!(e.contains("its folder") && e.contains("--config"), "{e}");
        mode(&folder, 0o700);
        check_trusted(&cfg).unwrap();
    }

    #[test]
    fn a_config_another_user_owns_is_refused() {
        // Only root can give a file away; CI runs as root.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("not root: cannot make a file another user owns; ownership case not checked");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let cfg = dir.path().join("plugins.toml");
        std::fs::write(&cfg, "").unwrap();
        std::os::unix::fs::chown(&cfg, Some(65534), None).unwrap();
        let e = check_trusted(&cfg).unwrap_err().to_string();
        assert!(e.contains("owned by uid 65534, not by you (uid 0) or root"), "{e}");
    }
}
