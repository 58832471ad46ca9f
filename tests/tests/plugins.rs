//! Plugin libraries: loading by config, the out-of-tree example plugin, and every error path of
//! the loader (missing file, not a library, no root module, wrong ABI, another infer-core version,
//! panics, duplicate names).

use std::collections::HashMap;
use std::path::Path;

use infer_core::plugin::{Kind, SpeechSynthesis};
use infer_core::{Error, GenerateConfig, LoadConfig, Origin, Registry};
use infer_tests::{fixture, library_config, plugin_library};

fn load_err(path: &Path) -> String {
    match Registry::empty().load_library(path) {
        Ok(()) => panic!("{} loaded but should not", path.display()),
        Err(e @ Error::Plugin { .. }) => e.to_string(),
        Err(other) => panic!("expected a plugin error, got {other:?}"),
    }
}

#[test]
fn missing_library_is_a_clear_error() {
    let msg = load_err(Path::new("/nonexistent/libinfer_nothing.so"));
    assert!(msg.contains("/nonexistent/libinfer_nothing.so") && msg.contains("does not exist"), "{msg}");
}

#[test]
fn file_that_is_not_a_library_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libfake.so");
    std::fs::write(&fake, b"this is not an ELF file").unwrap();
    let msg = load_err(&fake);
    assert!(msg.contains("libfake.so") && msg.contains("cannot open as a shared library"), "{msg}");
}

#[test]
fn library_without_root_module_is_a_clear_error() {
    let msg = load_err(&plugin_library("infer_test_no_root"));
    assert!(msg.contains("infer_test_no_root") && msg.contains("exports no abi_stable root module"), "{msg}");
}

#[test]
fn library_with_wrong_abi_is_a_clear_error() {
    let msg = load_err(&plugin_library("infer_test_wrong_abi"));
    assert!(msg.contains("infer_test_wrong_abi") && msg.contains("ABI mismatch"), "{msg}");
}

#[test]
fn library_built_against_another_core_version_is_a_clear_error() {
    let msg = load_err(&plugin_library("infer_test_other_version"));
    assert!(
        msg.contains("infer_test_other_version") && msg.contains("built against another infer-core version"),
        "{msg}"
    );
    assert!(msg.contains("0.0.9") && msg.contains(env!("CARGO_PKG_VERSION")), "both versions named: {msg}");
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
}

/// A library from a later SDK: a kind this host does not know is listed and ignored, its text
/// kind works; a text vtable of another layout under the text-generation id is refused in one
/// line instead of being called.
#[test]
fn unknown_kinds_load_and_drifted_vtables_are_refused() {
    let mut r = Registry::empty();
    r.load_library(&plugin_library("infer_test_kinds")).unwrap();
    r.load_library(&plugin_library("infer_plugin_candle")).unwrap();
    let future = r.models().iter().find(|m| m.plugin.name() == "future-kinds").expect("listed");
    assert_eq!(future.kind_names(), ["text", "infer-test.future-kind/1"]);

    let cfg = LoadConfig { backend: Some("candle".into()), ..Default::default() };
    let checkpoint = |model_type: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), format!(r#"{{"model_type": "{model_type}"}}"#)).unwrap();
        std::fs::copy(fixture("qwen3/tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
        dir
    };
    let dir = checkpoint("future_kinds");
    let err = r.load_model(dir.path(), &cfg).err().expect("its loader refuses");
    assert!(err.to_string().contains("the kinds test model loads nothing"), "{err}");

    let dir = checkpoint("drifted_text");
    let err = r.load_model(dir.path(), &cfg).err().expect("a drifted vtable must be refused").to_string();
    assert!(err.contains("drifted-text") && err.contains("vtable does not match"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(r.get("candle").is_ok());

    // Speech synthesis under the id of an SDK whose layouts differ: named, never called.
    let dir = checkpoint("stale_speech");
    let err = r.load_speech_model(dir.path(), &cfg).err().expect("a stale speech id must be refused").to_string();
    assert!(err.contains("stale-speech") && err.contains("infer.speech-synthesis/1"), "{err}");
    assert!(err.contains(<SpeechSynthesis as Kind>::ID) && err.contains("rebuild"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn panicking_plugin_becomes_an_error() {
    let mut r = Registry::empty();
    let lib = plugin_library("infer_test_panicky");
    r.load_library(&lib).unwrap();
    assert_eq!(r.backends()[0].origin, Origin::Library(lib));

    let err = r.get("panicky").unwrap_err();
    assert!(matches!(err, Error::Panic(_)), "{err:?}");
    assert!(err.to_string().contains("panicky backend refuses to start"), "{err}");

    // The model plugin panics too; the backend it is handed is the example's working candle.
    r.load_library(&plugin_library("infer_plugin_candle")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "panicky"}"#).unwrap();
    std::fs::copy(fixture("qwen3/tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    let cfg = LoadConfig { backend: Some("candle".into()), ..Default::default() };
    let err = r.load_model(dir.path(), &cfg).err().expect("load must fail");
    assert!(err.to_string().contains("panicky model refuses to load"), "{err}");
    // The host is still alive and the registry still usable.
    assert!(r.get("candle").is_ok());
}

#[test]
fn two_plugins_claiming_one_name_is_an_error() {
    // The test binary links candle in; its library build claims the same name.
    let mut r = Registry::builtin().unwrap();
    let lib = plugin_library("infer_plugin_candle");
    let err = r.load_library(&lib).unwrap_err().to_string();
    assert!(err.contains("infer_plugin_candle") && err.contains("`candle`") && err.contains("built in"), "{err}");
}

#[test]
fn unknown_backend_lists_the_known_ones() {
    let r = Registry::builtin().unwrap();
    let err = r.get("tpu").unwrap_err().to_string();
    assert!(err.contains("unknown backend `tpu`") && err.contains("candle"), "{err}");
}

/// A device kind no backend drives is one line saying what it needs and what to use instead,
/// and the list of known names never offers a name it then refuses.
#[test]
fn device_kind_without_a_backend_says_what_to_use() {
    let r = Registry::builtin().unwrap();
    for kind in ["metal", "gpu"] {
        let err = r.get(kind).unwrap_err().to_string();
        assert!(
            err.contains("Metal needs macOS on Apple silicon") && err.contains("--backend mlx --device cpu"),
            "{err}"
        );
        assert!(!err.contains('\n') && !err.contains("known:"), "{err}");
    }
    let err = r.get("cuda").unwrap_err().to_string();
    assert!(err.contains("CUDA needs an NVIDIA GPU") && !err.contains('\n'), "{err}");
    let known = r.get("tpu").unwrap_err().to_string();
    assert!(known.contains("cpu") && !known.contains("metal") && !known.contains("cuda"), "{known}");
}

#[test]
fn device_kind_alias_selects_a_backend() {
    let r = Registry::builtin().unwrap();
    assert_eq!(r.get("cpu").unwrap().name(), "candle");
}

/// A library that declares its backends is loaded only when one of them may be used: a candle
/// run does not map libtorch (issue 12: +110 MB resident when it did).
#[test]
fn a_library_declaring_its_backends_loads_only_when_they_may_be_used() {
    use infer_core::{BackendNeed, PluginConfig};
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("plugins.toml");
    let tch = infer_tests::plugin_library("infer_plugin_tch");
    std::fs::write(
        &cfg_path,
        format!("default_backends = [\"candle\"]\n[aliases]\ngpu = \"tch\"\n[[plugin]]\npath = {tch:?}\nbackends = [\"tch\"]\n"),
    )
    .unwrap();
    let names = |need: BackendNeed<'_>| -> Vec<String> {
        let r = Registry::from_config_for(PluginConfig::from_file(&cfg_path).unwrap(), need).unwrap();
        r.backends().iter().map(|b| b.plugin.name.to_string()).collect()
    };
    assert!(!names(BackendNeed::Default).contains(&"tch".to_string()));
    assert!(!names(BackendNeed::Named("candle")).contains(&"tch".to_string()));
    for need in [BackendNeed::Any, BackendNeed::Named("tch"), BackendNeed::Named("gpu"), BackendNeed::Named("cuda")] {
        assert!(names(need).contains(&"tch".to_string()), "{need:?}");
    }
}

#[test]
fn config_loaded_libraries_report_their_origin() {
    let cfg = library_config(&["infer_plugin_candle", "infer_plugin_llm"]).unwrap();
    let r = Registry::from_config(cfg).unwrap();
    let origins: HashMap<String, Origin> =
        r.backends().iter().map(|b| (b.plugin.name.to_string(), b.origin.clone())).collect();
    assert_eq!(origins["candle"], Origin::Library(plugin_library("infer_plugin_candle")));
    let qwen3 = r.models().iter().find(|m| m.plugin.name() == "qwen3").expect("qwen3 from the library");
    assert_eq!(qwen3.origin, Origin::Library(plugin_library("infer_plugin_llm")));
}

/// Writes a bigram checkpoint whose transitions make token i's successor `(7i + 3) % vocab`.
fn bigram_checkpoint(dir: &Path, vocab: usize) {
    let mut table = vec![0f32; vocab * vocab];
    for i in 0..vocab {
        for j in 0..vocab {
            table[i * vocab + j] = ((i * 31 + j * 17) % 13) as f32 * 0.1;
        }
        table[i * vocab + (7 * i + 3) % vocab] = 5.0;
    }
    let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![vocab, vocab], &bytes).unwrap();
    safetensors::serialize_to_file([("transitions", view)], None, &dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("config.json"), format!(r#"{{"model_type": "bigram", "vocab_size": {vocab}}}"#)).unwrap();
    std::fs::copy(fixture("qwen3/tokenizer.json"), dir.join("tokenizer.json")).unwrap();
}

#[test]
fn out_of_tree_example_plugin_runs_through_the_generation_loop() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = 483;
    bigram_checkpoint(dir.path(), vocab);
    let mut cfg = library_config(&["infer_example_bigram"]).unwrap();
    cfg.builtin_plugins = true; // the example brings a model; candle comes built in
    let r = Registry::from_config(cfg).unwrap();
    let model = r.load_model(dir.path(), &LoadConfig::default()).unwrap();
    assert_eq!(model.model_type(), "bigram");
    let gen = GenerateConfig { max_tokens: 12, ignore_eos: true, ..Default::default() };
    let ids: Vec<u32> = model.generate_ids(&[5], &gen).unwrap().map(|t| t.unwrap().id).collect();
    let mut want = Vec::new();
    let mut cur = 5usize;
    for _ in 0..12 {
        cur = (7 * cur + 3) % vocab;
        want.push(cur as u32);
    }
    assert_eq!(ids, want);
}
