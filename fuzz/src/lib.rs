//! What the fuzz targets share: scratch files for readers that take a path, the repository's
//! fixtures, and the seed corpora (`seeds`).

pub mod seeds;
mod server_seeds;
mod text_seeds;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

// The integration tests' helpers; linking them also links the built-in plugins (their
// `inventory` registrations), as the `infer` binary does.
pub use infer_tests::{fixture, models_dir};

/// Where targets write the files their readers open: `$INFER_FUZZ_SCRATCH` (tools/fuzz.sh makes
/// one per target, in memory where /dev/shm exists, and removes it), else a directory of this
/// process's own under the temporary directory.
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var_os("INFER_FUZZ_SCRATCH") {
            Some(d) => PathBuf::from(d),
            None => std::env::temp_dir().join(format!("infer-fuzz-{}", std::process::id())),
        };
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// Writes `bytes` to `name` in the scratch directory and returns its path (for readers that open
/// files themselves).
pub fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch_dir().join(name);
    std::fs::write(&path, bytes).expect("scratch file");
    path
}

/// A scratch checkpoint directory `name` made of links to the files of fixtures (`(fixture,
/// subdirectory)` pairs), leaving out `replaced` (a path inside it that the target writes its
/// input to on each run; never a link, so a fixture is never written through).
pub fn checkpoint_dir(name: &str, parts: &[(&str, &str)], replaced: &str) -> PathBuf {
    let dir = scratch_dir().join(name);
    if !dir.exists() {
        for (fixture_rel, sub) in parts {
            link_tree(&fixture(fixture_rel), &dir.join(sub), &dir.join(replaced));
        }
    }
    dir
}

fn link_tree(from: &Path, to: &Path, skip: &Path) {
    std::fs::create_dir_all(to).expect("scratch checkpoint");
    for e in std::fs::read_dir(from).expect("fixture directory") {
        let e = e.expect("directory entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if dst == skip {
            continue;
        }
        if src.is_dir() {
            link_tree(&src, &dst, skip);
        } else {
            let src = src.canonicalize().expect("fixture path");
            std::os::unix::fs::symlink(src, dst).expect("link a fixture file");
        }
    }
}

/// Loads the decoder LLM at `path` (HF directory or GGUF) with the architecture it declares and,
/// when it loads, runs a three-token prompt and one decode step through it.
pub fn load_and_run_llm(path: &Path) {
    use abi_stable::std_types::ROption;
    use infer_core::{CausalLm, DType, ModelLoadOptions, Tensor};

    let Ok(info) = infer_core::checkpoint_info::CheckpointInfo::inspect(path) else { return };
    let backend = infer_backend_candle::CandleBackend::backend().expect("candle CPU backend");
    let opts = ModelLoadOptions { dtype: DType::F32, context_len: 0, ..Default::default() };
    let model = match info.model_type.as_str() {
        "qwen3" => infer_llm::qwen3::load(path, &backend, &opts),
        "qwen2" => infer_llm::qwen2::load(path, &backend, &opts),
        "llama" => infer_llm::llama::load(path, &backend, &opts),
        "gemma3" | "gemma3_text" => infer_llm::gemma3::load(path, &backend, &opts),
        _ => return,
    };
    let Ok(model) = model else { return };
    let vocab = model.info().vocab_size as u32;
    let Ok(mut cache) = model.new_cache(0).into_result() else { return };
    let prompt: Vec<u32> = [1, 2, 3].iter().map(|i| i % vocab.max(1)).collect();
    let Ok(tokens) = Tensor::from_u32(&backend, &prompt, &[1, 3]) else { return };
    if model.forward(&tokens, &mut cache, ROption::RNone, true).into_result().is_ok() {
        let next = Tensor::from_u32(&backend, &prompt[..1], &[1, 1]).expect("one token");
        let _ = model.forward(&next, &mut cache, ROption::RNone, true);
    }
}

/// For a target whose reader catches panics inside a third-party parser and reports them as an
/// error: a panic located in one of `sources` (path fragments) is printed once per site, for an
/// upstream report, and unwinds to that catch; any other panic keeps libFuzzer's abort.
pub fn tolerate_upstream_panics(sources: &'static [&'static str]) {
    let abort = std::panic::take_hook();
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    std::panic::set_hook(Box::new(move |info| {
        let site = info.location().map(|l| l.to_string()).unwrap_or_default();
        if !sources.iter().any(|s| site.contains(s)) {
            return abort(info);
        }
        if seen.lock().map(|mut s| s.insert(site.clone())).unwrap_or(false) {
            eprintln!("upstream panic, caught by the reader: {info}");
        }
    }));
}
