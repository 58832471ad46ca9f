//! Helpers shared by the integration tests: fixture paths, golden files, plugin libraries and
//! the backend configurations every model test runs on.

pub mod cli;
pub mod serve;

use std::path::{Path, PathBuf};

use infer_core::{PluginConfig, Registry, Result};

// Link the built-in plugins (their `inventory` registrations).
use infer_backend_candle as _;
use infer_llm as _;
use infer_qwen3_tts as _;
use infer_voxtral_realtime as _;
use infer_voxtral_tts as _;

/// The checkout the tests run in. Looked up at run time (cargo test sets `CARGO_MANIFEST_DIR` to
/// the package under test; the repository root is the ancestor holding `tests/fixtures`; nested
/// workspaces such as backends/mlx have their own `Cargo.lock`): a test binary
/// that cargo reuses from another checkout sharing the target directory (CI copies the clone) must
/// not read that checkout's fixtures. The path compiled in is the fallback.
pub fn repo_root() -> PathBuf {
    let compiled = || Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf();
    std::env::var_os("CARGO_MANIFEST_DIR")
        .and_then(|dir| {
            PathBuf::from(dir).ancestors().find(|d| d.join("tests/fixtures").is_dir()).map(Path::to_path_buf)
        })
        .unwrap_or_else(compiled)
}

pub fn fixture(rel: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(rel)
}

/// Where tools/models/fetch.sh puts the real GGUF models (`$INFER_MODELS_DIR`, else
/// `~/.cache/infer/models`).
pub fn models_dir() -> PathBuf {
    match std::env::var_os("INFER_MODELS_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/infer/models"),
    }
}

/// The real model `file` in [`models_dir`]; a missing one fails the test with how to fetch it.
pub fn real_model(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(p.exists(), "{} is missing: fetch the real models with tools/models/fetch.sh", p.display());
    p
}

/// Every LLM parity fixture (tools/fixtures/make_qwen3.py, make_llm_family.py).
pub const LLM_FIXTURES: [&str; 10] = [
    "qwen3/gqa",
    "qwen3/head-dim",
    "qwen3/sharded",
    "qwen3/bf16",
    "qwen2/base",
    "qwen2/tied",
    "llama3/scaled",
    "llama3/plain",
    "gemma3/base",
    "gemma3/window-long",
];

/// Writes `model.safetensors` into `dir` from (name, dtype, shape, little-endian bytes).
pub fn write_safetensors(dir: &Path, tensors: &[(&str, safetensors::Dtype, Vec<usize>, &[u8])]) {
    let views = tensors.iter().map(|(name, dtype, shape, bytes)| {
        (*name, safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes).unwrap())
    });
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

/// Copies the files of `from` (not its subdirectories) into `to`, except those named in `skip`.
pub fn copy_dir(from: &Path, to: &Path, skip: &[&str]) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.expect("directory entry");
        if e.path().is_file() && !skip.iter().any(|s| e.file_name() == *s) {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

/// The cargo profile directory the running test was built in (target/debug, target/release).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test binary>
    exe.parent().and_then(Path::parent).expect("test binary lives in <profile>/deps").to_path_buf()
}

/// Path of a workspace cdylib, e.g. `plugin_library("infer_plugin_candle")`. The libraries are
/// built by `cargo build --workspace` (which `.ci/run` runs before the tests).
pub fn plugin_library(lib_name: &str) -> PathBuf {
    let path =
        profile_dir().join(format!("{}{lib_name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: build the plugin libraries first (`cargo build --workspace`, as .ci/run does)",
        path.display()
    );
    path
}

/// A way of reaching a backend: built in, or loaded from plugin libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// candle and the LLM plugin linked into the test binary.
    CandleBuiltIn,
    /// candle and every model plugin loaded from their cdylibs through a plugins.toml.
    CandleLibrary,
    /// tch (libtorch, CPU) and every model plugin loaded from their cdylibs through a plugins.toml.
    /// The test binaries never link libtorch: only the tch library does (found by its rpath).
    TchLibrary,
    /// tch on the first CUDA GPU (`--backend cuda`), from the same libraries as
    /// [`Setup::TchLibrary`]. Listed only with `INFER_TEST_CUDA=1`, on a GPU machine with a
    /// CUDA build of the tch library (tools/gpu_check.sh): CI's machines have no GPU.
    TchCuda,
    /// MLX (its CPU build here, Metal on a Mac) and every model plugin loaded from their cdylibs
    /// through a plugins.toml. The MLX library is built by tools/setup_mlx.sh (which tools/test.sh
    /// runs), in release, where plugins.toml finds it: [`mlx_library`].
    MlxLibrary,
}

/// The backend names `$INFER_SETUPS` may list.
pub const SETUP_BACKENDS: [&str; 4] = ["candle", "tch", "mlx", "cuda"];

impl Setup {
    /// Every setup this run covers. `$INFER_SETUPS` (backend names, comma-separated:
    /// `candle,tch,mlx,cuda`) names them, for a machine that has only some backends (the macOS
    /// workflow runs `mlx` alone: no libtorch there; tools/test.sh names every one it built), and
    /// then each named one is required: a missing or stale library, or an unknown name, fails
    /// the test instead of leaving a loop over setups empty. Without it the list is candle, tch
    /// and MLX, plus CUDA with `INFER_TEST_CUDA=1`; MLX is left out, loudly (on stderr, past the
    /// test harness's capture), only when tools/setup_mlx.sh has not built a current library and
    /// this is not CI (`CI=true` requires it).
    pub fn all() -> Vec<Setup> {
        match selection() {
            Ok(setups) => setups.clone(),
            Err(why) => panic!("{why}"),
        }
    }

    /// One setup per backend (candle built in, tch and MLX from their libraries), for the
    /// checks whose backend-specific part does not depend on how the model plugin is loaded.
    /// Narrowed and required like [`Setup::all`].
    pub fn per_backend() -> Vec<Setup> {
        Setup::all().into_iter().filter(|s| !matches!(s, Setup::CandleLibrary)).collect()
    }

    /// Whether this run covers `self`, for a test written for one setup (the MLX leg of the
    /// GGUF parity test, the `infer` binary on MLX): false only where [`Setup::all`] leaves it
    /// out, which it says.
    pub fn covered(self) -> bool {
        Setup::all().contains(&self)
    }

    pub fn registry(self) -> Result<Registry> {
        self.mark_ran();
        match self {
            Setup::CandleBuiltIn => Registry::builtin(),
            Setup::CandleLibrary => Registry::from_config(library_config(&with_models("infer_plugin_candle"))?),
            Setup::TchLibrary | Setup::TchCuda => {
                Registry::from_config(library_config(&with_models("infer_plugin_tch"))?)
            }
            Setup::MlxLibrary => {
                let mlx = mlx_library().unwrap_or_else(|why| panic!("{why}"));
                let mut cfg = library_config(MODEL_LIBRARIES)?;
                cfg.plugins.push(infer_core::plugin_config::PluginLibraryConfig {
                    path: mlx,
                    optional: false,
                    backends: Vec::new(),
                });
                Registry::from_config(cfg)
            }
        }
    }

    pub fn backend(self) -> &'static str {
        match self {
            Setup::CandleBuiltIn | Setup::CandleLibrary => "candle",
            Setup::TchLibrary => "tch",
            Setup::TchCuda => "cuda",
            Setup::MlxLibrary => "mlx",
        }
    }

    /// The setup's name in the run's report.
    pub fn name(self) -> &'static str {
        match self {
            Setup::CandleBuiltIn => "candle",
            Setup::CandleLibrary => "candle-library",
            Setup::TchLibrary => "tch-library",
            Setup::TchCuda => "cuda",
            Setup::MlxLibrary => "mlx-library",
        }
    }

    /// Records that the running test uses this setup, for tools/test.sh's summary of which
    /// setups each test binary ran: a line `binary<TAB>test<TAB>setup` appended to
    /// `$INFER_SETUP_REPORT` when that is set. [`Setup::registry`] calls it; a test that reaches
    /// a setup another way (through the `infer` binary) calls it itself.
    pub fn mark_ran(self) {
        report_line(self.name());
    }
}

/// The setups of this run (see [`Setup::all`]), decided once per test binary.
fn selection() -> &'static std::result::Result<Vec<Setup>, String> {
    static SELECTION: std::sync::OnceLock<std::result::Result<Vec<Setup>, String>> = std::sync::OnceLock::new();
    SELECTION.get_or_init(|| {
        let named = std::env::var("INFER_SETUPS").ok();
        let ci = matches!(std::env::var("CI").as_deref(), Ok("true" | "1"));
        let cuda = std::env::var("INFER_TEST_CUDA").as_deref() == Ok("1");
        let chosen = select(named.as_deref(), ci, cuda, mlx_library);
        match &chosen {
            Ok((setups, skipped)) => {
                let names: Vec<&str> = setups.iter().map(|s| s.name()).collect();
                for why in skipped {
                    loud(&format!("SKIPPING A SETUP: {why}"));
                    report_line(&format!("skipped: {why}"));
                }
                loud(&format!("setups: {}", names.join(", ")));
            }
            Err(why) => loud(why),
        }
        chosen.map(|(setups, _)| setups)
    })
}

/// The setups for `$INFER_SETUPS` = `named`, and the reasons for those left out. `strict`
/// (CI, or any list named) turns a missing MLX library into an error.
fn select(
    named: Option<&str>,
    ci: bool,
    cuda: bool,
    mlx: impl Fn() -> std::result::Result<PathBuf, String>,
) -> std::result::Result<(Vec<Setup>, Vec<String>), String> {
    let backends: Vec<&str> = match named {
        Some(list) => {
            let names: Vec<&str> = list.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
            if names.is_empty() {
                return Err(format!("INFER_SETUPS={list:?} names no backend (known: {})", SETUP_BACKENDS.join(", ")));
            }
            if let Some(bad) = names.iter().find(|n| !SETUP_BACKENDS.contains(n)) {
                return Err(format!(
                    "INFER_SETUPS names {bad:?}, not a backend (known: {})",
                    SETUP_BACKENDS.join(", ")
                ));
            }
            names
        }
        None => ["candle", "tch", "mlx"].into_iter().chain(cuda.then_some("cuda")).collect(),
    };
    let strict = ci || named.is_some();
    let (mut setups, mut skipped) = (Vec::new(), Vec::new());
    for backend in SETUP_BACKENDS.iter().filter(|b| backends.contains(b)) {
        match *backend {
            "candle" => setups.extend([Setup::CandleBuiltIn, Setup::CandleLibrary]),
            "tch" => setups.push(Setup::TchLibrary),
            "cuda" => setups.push(Setup::TchCuda),
            _ => match mlx() {
                Ok(_) => setups.push(Setup::MlxLibrary),
                Err(why) if strict => {
                    let by = if ci && named.is_none() { "CI=true" } else { "INFER_SETUPS" };
                    return Err(format!("{why}; {by} requires the MLX setup"));
                }
                Err(why) => skipped.push(why),
            },
        }
    }
    Ok((setups, skipped))
}

/// A line on the test binary's real stderr: libtest captures `eprintln!` of passing tests, which
/// would hide a skipped setup.
fn loud(line: &str) {
    use std::io::Write;
    let exe = test_binary();
    let _ = writeln!(std::io::stderr().lock(), "infer-tests [{exe}]: {line}");
}

/// The running test binary's name without cargo's hash (`llm_parity`, `serve`).
fn test_binary() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe.as_deref().and_then(Path::file_stem).and_then(|s| s.to_str()).unwrap_or("?");
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_string(),
        _ => stem.to_string(),
    }
}

fn report_line(what: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os("INFER_SETUP_REPORT") else { return };
    let thread = std::thread::current();
    let line = format!("{}\t{}\t{what}\n", test_binary(), thread.name().unwrap_or("?"));
    // One append of one short line: concurrent tests and binaries do not interleave within it.
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = appended {
        panic!("INFER_SETUP_REPORT {}: {e}", Path::new(&path).display());
    }
}

/// Where the repository's plugins.toml expects the MLX plugin library (the entry that provides
/// the `mlx` backend, `target/release/libinfer_plugin_mlx.so`, which tools/setup_mlx.sh writes
/// on Linux and docs/backends/mlx.md's macOS steps copy the `.dylib` to): the tests load the
/// file the `infer` binary would.
pub fn mlx_library_path() -> PathBuf {
    let config_path = repo_root().join("plugins.toml");
    let config = PluginConfig::from_file(&config_path).unwrap_or_else(|e| panic!("{}: {e}", config_path.display()));
    let entry = config
        .plugins
        .iter()
        .find(|p| p.backends.iter().any(|b| b == "mlx"))
        .unwrap_or_else(|| panic!("{} has no plugin entry with backends = [\"mlx\"]", config_path.display()));
    config.resolve_path(&entry.path)
}

/// The MLX plugin library, if tools/setup_mlx.sh has built it since the sources it is made of
/// last changed; otherwise why not. A library left from an earlier checkout or build would test
/// old code under the current name.
pub fn mlx_library() -> std::result::Result<PathBuf, String> {
    let lib = mlx_library_path();
    current_library(&lib, &repo_root(), MLX_LIBRARY_SOURCES)?;
    Ok(lib)
}

/// What the MLX plugin library is built from (tools/setup_mlx.sh), relative to the repository.
const MLX_LIBRARY_SOURCES: &[&str] =
    &["backends/mlx/src", "backends/mlx/library", "backends/mlx/build.rs", "backends/mlx/Cargo.toml", "core"];

/// Ok when `lib` exists and no file of `sources` (under `root`) changed after it was written.
fn current_library(lib: &Path, root: &Path, sources: &[&str]) -> std::result::Result<(), String> {
    let built = std::fs::metadata(lib)
        .and_then(|m| m.modified())
        .map_err(|_| format!("{} is missing (run tools/setup_mlx.sh to build it)", lib.display()))?;
    match sources.iter().filter_map(|s| newest_file(&root.join(s))).find(|(_, t)| *t > built) {
        Some((newer, _)) => Err(format!(
            "{} is stale: {} changed after it was built (run tools/setup_mlx.sh to rebuild it)",
            lib.display(),
            newer.strip_prefix(root).unwrap_or(&newer).display()
        )),
        None => Ok(()),
    }
}

/// The most recently modified file under `path` (itself, if a file), skipping `target` folders.
fn newest_file(path: &Path) -> Option<(PathBuf, std::time::SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return Some((path.to_path_buf(), meta.modified().ok()?));
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "target")
        .filter_map(|e| newest_file(&e.path()))
        .max_by_key(|(_, t)| *t)
}

/// The workspace's model plugin libraries: the library setups load all of them, so each model's
/// tests run with its plugin loaded by configuration and built-ins off.
pub const MODEL_LIBRARIES: &[&str] =
    &["infer_plugin_llm", "infer_plugin_qwen3_tts", "infer_plugin_voxtral_tts", "infer_plugin_voxtral_realtime"];

/// A backend library plus every model library.
fn with_models(backend_library: &str) -> Vec<&str> {
    std::iter::once(backend_library).chain(MODEL_LIBRARIES.iter().copied()).collect()
}

/// A plugins.toml (written to a temp dir, returned parsed) that loads the named workspace
/// libraries and no built-in plugins.
pub fn library_config(libs: &[&str]) -> Result<PluginConfig> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut toml = String::from("builtin_plugins = false\n");
    for lib in libs {
        toml.push_str(&format!("[[plugin]]\npath = {:?}\n", plugin_library(lib)));
    }
    let path = dir.path().join("plugins.toml");
    std::fs::write(&path, toml).expect("write plugins.toml");
    PluginConfig::from_file(&path)
}

/// The LLM fixtures' `golden.json` and the NaN-aware comparisons: the parity harness plugin
/// authors use (`infer-parity`).
pub use infer_parity::{max_abs_diff, worst, Golden, GoldenCase};

/// `dir/golden.json` written by tools/fixtures (a test's fixture: a missing one, or one with no
/// cases for a loop over them to check, is a panic).
pub fn golden(dir: &Path) -> Golden {
    let golden = Golden::read(dir).unwrap_or_else(|e| panic!("{e}"));
    assert!(!golden.cases.is_empty(), "{}: golden.json has no cases", dir.display());
    golden
}

/// Pearson's correlation of two equally long slices (in f64); NaN where either holds a NaN or
/// is constant, which no bound passes.
pub fn pearson(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let n = a.len() as f64;
    let mean = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let (ma, mb) = (mean(a), mean(b));
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (f64::from(x) - ma, f64::from(y) - mb);
        ab += dx * dy;
        aa += dx * dx;
        bb += dy * dy;
    }
    if aa == 0.0 || bb == 0.0 {
        return f64::NAN;
    }
    ab / (aa * bb).sqrt()
}

/// The least of some correlations; NaN when any is (`f64::min` drops NaN).
pub fn least(rs: impl IntoIterator<Item = f64>) -> f64 {
    rs.into_iter().fold(1.0, |m, r| if m.is_nan() || r.is_nan() { f64::NAN } else { m.min(r) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_are_infinitely_far() {
        let good = [0.5f32, -1.0, 2.0];
        assert_eq!(max_abs_diff(&good, &[0.5, -1.0, 2.25]), 0.25);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(max_abs_diff(&good, &[0.5, bad, 2.0]), f32::INFINITY, "{bad} in ours");
            assert_eq!(max_abs_diff(&[bad, -1.0, 2.0], &good), f32::INFINITY, "{bad} in the golden");
            // Both sides equally broken is still broken.
            assert_eq!(max_abs_diff(&[bad; 3], &[bad; 3]), f32::INFINITY, "{bad} on both sides");
        }
        assert_eq!(worst([0.1, f32::NAN, 0.2]), f32::INFINITY);
        assert_eq!(worst([f32::NAN, 0.2]), f32::INFINITY);
        assert_eq!(worst(std::iter::empty()), 0.0);
    }

    fn names(r: std::result::Result<(Vec<Setup>, Vec<String>), String>) -> Vec<&'static str> {
        r.unwrap().0.into_iter().map(Setup::name).collect()
    }

    #[test]
    fn requested_setups_are_required() {
        let built = || Ok(PathBuf::from("libinfer_plugin_mlx.so"));
        let absent = || Err("libinfer_plugin_mlx.so is missing".to_string());
        assert_eq!(
            names(select(None, false, false, built)),
            ["candle", "candle-library", "tch-library", "mlx-library"]
        );
        assert_eq!(names(select(Some("mlx"), false, false, built)), ["mlx-library"]);
        assert_eq!(
            names(select(Some(" tch, candle "), false, false, absent)),
            ["candle", "candle-library", "tch-library"]
        );
        assert_eq!(names(select(Some("cuda"), false, false, absent)), ["cuda"]);
        // Left out, with its reason, only when nothing asked for it.
        let (setups, skipped) = select(None, false, false, absent).unwrap();
        assert_eq!(setups.len(), 3);
        assert_eq!(skipped, ["libinfer_plugin_mlx.so is missing"]);
        // A typo, an empty list or a named library that is missing fails instead of running nothing.
        assert!(select(Some("mxl"), false, false, built).unwrap_err().contains("\"mxl\", not a backend"));
        assert!(select(Some(" , "), false, false, built).unwrap_err().contains("names no backend"));
        assert!(select(Some("candle,mlx"), false, false, absent).unwrap_err().contains("INFER_SETUPS requires"));
        assert!(select(None, true, false, absent).unwrap_err().contains("CI=true requires"));
    }

    #[test]
    fn a_library_older_than_its_sources_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let (root, lib) = (dir.path(), dir.path().join("target/release/libx.so"));
        let src = root.join("backend/src/deep/ops.rs");
        let at = |path: &Path, secs| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
            let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            std::fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
        };
        at(&src, 2_000);
        assert!(current_library(&lib, root, &["backend"]).unwrap_err().contains("is missing"));
        at(&lib, 3_000);
        current_library(&lib, root, &["backend"]).unwrap();
        at(&src, 4_000);
        let why = current_library(&lib, root, &["backend"]).unwrap_err();
        assert!(why.contains("is stale: backend/src/deep/ops.rs changed after it was built"), "{why}");
        // A build folder inside the sources does not count.
        at(&src, 2_000);
        at(&root.join("backend/target/debug/x.o"), 5_000);
        current_library(&lib, root, &["backend"]).unwrap();
    }
}
