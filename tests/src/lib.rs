//! Helpers shared by the integration tests: fixture paths, golden files, plugin libraries and
//! the backend configurations every model test runs on.

pub mod cli;

use std::path::{Path, PathBuf};

use infer_core::{PluginConfig, Registry, Result};
use serde::Deserialize;

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
#[derive(Debug, Clone, Copy)]
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

impl Setup {
    /// Every setup. The MLX one is left out, with a printed reason, only when
    /// tools/setup_mlx.sh has not been run (its library is absent); the CUDA one is added by
    /// `INFER_TEST_CUDA=1` or by naming `cuda` in `$INFER_SETUPS`. `$INFER_SETUPS` (backend
    /// names, comma-separated: `candle,tch,mlx,cuda`) narrows the list, for a machine that has only
    /// some backends (the macOS workflow runs `mlx` alone: no libtorch there).
    pub fn all() -> Vec<Setup> {
        let mut all = vec![Setup::CandleBuiltIn, Setup::CandleLibrary, Setup::TchLibrary];
        match mlx_library() {
            Some(_) => all.push(Setup::MlxLibrary),
            None => eprintln!(
                "skipping the MLX setup: {} is missing (run tools/setup_mlx.sh to build it)",
                mlx_library_path().display()
            ),
        }
        let only = std::env::var("INFER_SETUPS").ok();
        let cuda_named = only.as_deref().is_some_and(|o| o.split(',').any(|n| n.trim() == "cuda"));
        if cuda_named || std::env::var("INFER_TEST_CUDA").as_deref() == Ok("1") {
            all.push(Setup::TchCuda);
        }
        if let Some(only) = only {
            all.retain(|s| only.split(',').any(|n| n.trim() == s.backend()));
        }
        all
    }

    /// One setup per backend (candle built in, tch and MLX from their libraries), for the
    /// checks whose backend-specific part does not depend on how the model plugin is loaded.
    /// Narrowed by `$INFER_SETUPS` and left without MLX like [`Setup::all`].
    pub fn per_backend() -> Vec<Setup> {
        Setup::all().into_iter().filter(|s| !matches!(s, Setup::CandleLibrary)).collect()
    }

    pub fn registry(self) -> Result<Registry> {
        match self {
            Setup::CandleBuiltIn => Registry::builtin(),
            Setup::CandleLibrary => Registry::from_config(library_config(&with_models("infer_plugin_candle"))?),
            Setup::TchLibrary | Setup::TchCuda => {
                Registry::from_config(library_config(&with_models("infer_plugin_tch"))?)
            }
            Setup::MlxLibrary => {
                let mlx = mlx_library().expect("Setup::all lists MlxLibrary only when its library exists");
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
}

/// Where tools/setup_mlx.sh puts the MLX plugin library: `<repo>/target/release`, the path
/// plugins.toml names.
pub fn mlx_library_path() -> PathBuf {
    repo_root().join("target/release").join(format!(
        "{}infer_plugin_mlx{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// The MLX plugin library, if tools/setup_mlx.sh has built it.
pub fn mlx_library() -> Option<PathBuf> {
    let p = mlx_library_path();
    p.exists().then_some(p)
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

/// `golden.json` written by tools/fixtures.
#[derive(Debug, Deserialize)]
pub struct Golden {
    pub reference: String,
    pub cases: Vec<GoldenCase>,
}

#[derive(Debug, Deserialize)]
pub struct GoldenCase {
    pub prompt: String,
    pub ids: Vec<u32>,
    pub last_logits: Vec<f32>,
    pub greedy: Vec<u32>,
}

pub fn golden(dir: &Path) -> Golden {
    let path = dir.join("golden.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
