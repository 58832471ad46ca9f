//! Pre-quantized checkpoints (`infer quantize`): a copy written from the weights a speech model
//! quantized at load holds those weights as GGML blocks, loads without `--quant`, and gives what
//! quantizing at load gives, bit for bit (the same blocks); every other tensor and file is the
//! source's. Broken copies and bad destinations get one clear error.

use std::path::{Path, PathBuf};

use infer_core::audio::{RSome, SpeechOptions, Voice};
use infer_core::quantized_checkpoint::{record_quantized, write_quantized, QuantizedWeight, METADATA_KEY};
use infer_core::{CancelToken, DType, LoadConfig, Registry, Weights};
use infer_tests::fixture;

fn q8_0() -> LoadConfig {
    LoadConfig { quant: Some(DType::Q8_0), ..LoadConfig::default() }
}

/// Loads with `load` while recording, and writes the copy of `src` into a new temporary folder.
fn quantized_copy<T>(src: &Path, load: impl FnOnce() -> T) -> (T, tempfile::TempDir, PathBuf) {
    let (model, weights) = record_quantized(load);
    assert!(!weights.is_empty(), "{}: nothing was quantized", src.display());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("q8_0");
    let written = write_quantized(src, &out, &weights).unwrap();
    assert_eq!(written.quantized, weights.len());
    assert!(written.block_bytes < written.source_bytes, "{written:?}");
    (model, tmp, out)
}

fn speak(tts: &dyn infer_core::audio::SpeechSynthesizer, text: &str, voice: Voice) -> (Vec<u32>, Vec<f32>) {
    let options = SpeechOptions { voice, temperature: 0.0, seed: RSome(7), max_frames: 6, ..SpeechOptions::default() };
    let (mut codes, mut samples) = (Vec::new(), Vec::new());
    tts.synthesize(text, &options, &CancelToken::new(), &mut |c| {
        codes.extend_from_slice(&c.codes);
        samples.extend_from_slice(&c.samples);
        true
    })
    .unwrap();
    (codes, samples)
}

#[test]
fn quantized_speech_checkpoints_load_as_quantizing_at_load_does() {
    let registry = Registry::builtin().unwrap();
    for (model, voice) in
        [("qwen3-tts/small", Voice::Default), ("voxtral-tts/small", Voice::Preset(first_voice().into()))]
    {
        let src = fixture(model);
        let (at_load, _tmp, copy) = quantized_copy(&src, || registry.load_speech_model(&src, &q8_0()).unwrap());
        let mapped = registry.load_speech_model(&copy, &LoadConfig::default()).unwrap();
        let want = speak(at_load.as_ref(), "Hello there.", voice.clone());
        assert!(!want.0.is_empty(), "{model}: no frames");
        assert_eq!(speak(mapped.as_ref(), "Hello there.", voice.clone()), want, "{model}: copy vs --quant q8_0");
        // The copy's float tensors and other files are the source's.
        assert_same_files_and_float_tensors(&src, &copy);
    }
}

#[test]
fn a_quantized_recognizer_checkpoint_transcribes_as_quantizing_at_load_does() {
    let registry = Registry::builtin().unwrap();
    let src = fixture("voxtral-realtime/hf");
    let (at_load, _tmp, copy) = quantized_copy(&src, || registry.load_recognizer(&src, &q8_0()).unwrap());
    let audio = infer_core::audio_io::read_audio(fixture("voxtral-realtime/speech_16k.wav")).unwrap().audio;
    let options = infer_core::audio::RecognitionOptions::default();
    let want = at_load.transcribe(&audio, &options).unwrap().tokens;
    let mapped = registry.load_recognizer(&copy, &LoadConfig::default()).unwrap();
    assert_eq!(mapped.transcribe(&audio, &options).unwrap().tokens, want, "copy vs --quant q8_0");
    // Loaded with --quant again, the stored blocks are used as they are.
    let again = registry.load_recognizer(&copy, &q8_0()).unwrap();
    assert_eq!(again.transcribe(&audio, &options).unwrap().tokens, want, "copy with --quant q8_0");
    assert_same_files_and_float_tensors(&src, &copy);
}

/// A Hugging Face cache snapshot: every file a link to a blob outside the folder. The copy
/// holds real files under the snapshot's names.
#[test]
fn a_snapshot_of_linked_blobs_is_copied_under_its_names() {
    let registry = Registry::builtin().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (blobs, snapshot) = (tmp.path().join("blobs"), tmp.path().join("snapshots/abc"));
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    for (i, e) in std::fs::read_dir(fixture("voxtral-realtime/hf")).unwrap().enumerate() {
        let p = e.unwrap().path();
        let blob = blobs.join(format!("blob{i}"));
        std::fs::copy(&p, &blob).unwrap();
        std::os::unix::fs::symlink(&blob, snapshot.join(p.file_name().unwrap())).unwrap();
    }
    let (_, _out_tmp, copy) = quantized_copy(&snapshot, || registry.load_recognizer(&snapshot, &q8_0()).unwrap());
    let file = copy.join("model.safetensors");
    assert!(!std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink());
    assert!(registry.load_recognizer(&copy, &LoadConfig::default()).is_ok());
    assert_same_files_and_float_tensors(&snapshot, &copy);
}

/// A sharded checkpoint (two files and `model.safetensors.index.json`): each shard holding
/// recorded weights is rewritten, the index keeps its map and gets the copy's `total_size`, and
/// the copy transcribes as quantizing at load does.
#[test]
fn a_sharded_checkpoint_is_quantized_shard_by_shard() {
    let registry = Registry::builtin().unwrap();
    let src = fixture("voxtral-realtime/hf");
    let tmp = tempfile::tempdir().unwrap();
    let sharded = tmp.path().join("sharded");
    std::fs::create_dir_all(&sharded).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "safetensors") {
            std::fs::copy(&p, sharded.join(p.file_name().unwrap())).unwrap();
        }
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    let (first, second) = names.split_at(names.len() / 2);
    let mut map = serde_json::Map::new();
    for (file, part) in [("model-00001-of-00002.safetensors", first), ("model-00002-of-00002.safetensors", second)] {
        let views: Vec<_> = part.iter().map(|n| (n.to_string(), st.tensor(n).unwrap())).collect();
        safetensors::serialize_to_file(views, None, &sharded.join(file)).unwrap();
        part.iter().for_each(|n| drop(map.insert(n.to_string(), file.into())));
    }
    let index = serde_json::json!({"metadata": {"total_size": 1}, "weight_map": map});
    std::fs::write(sharded.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let (at_load, _out_tmp, copy) = quantized_copy(&sharded, || registry.load_recognizer(&sharded, &q8_0()).unwrap());
    let audio = infer_core::audio_io::read_audio(fixture("voxtral-realtime/speech_16k.wav")).unwrap().audio;
    let options = infer_core::audio::RecognitionOptions::default();
    let mapped = registry.load_recognizer(&copy, &LoadConfig::default()).unwrap();
    assert_eq!(
        mapped.transcribe(&audio, &options).unwrap().tokens,
        at_load.transcribe(&audio, &options).unwrap().tokens
    );
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(copy.join("model.safetensors.index.json")).unwrap()).unwrap();
    assert_eq!(index["weight_map"], serde_json::Value::Object(map));
    let data_bytes: u64 = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        .iter()
        .map(|f| {
            let b = std::fs::read(copy.join(f)).unwrap();
            safetensors::SafeTensors::read_metadata(&b).unwrap().1.data_len() as u64
        })
        .sum();
    assert_eq!(index["metadata"]["total_size"], data_bytes);
}

fn first_voice() -> String {
    let g: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("voxtral-tts/small/goldens.json")).unwrap()).unwrap();
    g["cases"][0]["voice"].as_str().unwrap().to_string()
}

/// Every file of `src` is in `copy`; safetensors files hold the same tensors, those not listed
/// as quantized byte for byte, the listed ones as U8 blocks; other files are identical.
fn assert_same_files_and_float_tensors(src: &Path, copy: &Path) {
    let mut quantized = 0;
    for entry in walk(src) {
        let rel = entry.strip_prefix(src).unwrap();
        let (a, b) = (std::fs::read(&entry).unwrap(), std::fs::read(copy.join(rel)).unwrap());
        if entry.extension().is_none_or(|x| x != "safetensors") {
            assert_eq!(a, b, "{}", rel.display());
            continue;
        }
        let (sa, sb) =
            (safetensors::SafeTensors::deserialize(&a).unwrap(), safetensors::SafeTensors::deserialize(&b).unwrap());
        let (_, meta) = safetensors::SafeTensors::read_metadata(&b).unwrap();
        let listed: serde_json::Map<String, serde_json::Value> = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get(METADATA_KEY))
            .map(|j| serde_json::from_str(j).unwrap())
            .unwrap_or_default();
        let mut names_a = sa.names();
        let mut names_b = sb.names();
        names_a.sort();
        names_b.sort();
        assert_eq!(names_a, names_b, "{}: tensor names", rel.display());
        for name in names_a {
            let (ta, tb) = (sa.tensor(name).unwrap(), sb.tensor(name).unwrap());
            match listed.get(name) {
                Some(q) => {
                    quantized += 1;
                    assert_eq!(tb.dtype(), safetensors::Dtype::U8, "{name}");
                    assert_eq!(q["shape"], serde_json::json!(ta.shape()), "{name}: logical shape");
                    assert_eq!(q["dtype"], "q8_0", "{name}");
                }
                None => assert_eq!((ta.dtype(), ta.shape(), ta.data()), (tb.dtype(), tb.shape(), tb.data()), "{name}"),
            }
        }
    }
    assert!(quantized > 0, "{}: no tensor listed as quantized", copy.display());
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn load_err(dir: &Path) -> String {
    let backend = Registry::builtin().unwrap().backend(Some("candle"), None).unwrap();
    match Weights::from_dir(dir, &backend, DType::F32) {
        Ok(_) => panic!("{} opened", dir.display()),
        Err(e) => e.to_string(),
    }
}

/// A one-tensor file `model.safetensors` in a new folder: `w` (U8, 68 bytes: two Q8_0 blocks)
/// listed under the metadata key as `listed` (raw JSON).
fn one_tensor(listed: &str, dtype: safetensors::Dtype, bytes: usize) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let data = vec![0u8; bytes];
    let view = safetensors::tensor::TensorView::new(dtype, vec![bytes * 8 / dtype.bitsize()], &data).unwrap();
    let meta = std::collections::HashMap::from([(METADATA_KEY.to_string(), listed.to_string())]);
    safetensors::serialize_to_file([("w", view)], Some(meta), &tmp.path().join("model.safetensors")).unwrap();
    tmp
}

#[test]
fn broken_quantized_checkpoints_are_named() {
    let good = one_tensor(r#"{"w": {"dtype": "q8_0", "shape": [2, 32]}}"#, safetensors::Dtype::U8, 68);
    let backend = Registry::builtin().unwrap().backend(Some("candle"), None).unwrap();
    let w = Weights::from_dir(good.path(), &backend, DType::F32).unwrap();
    assert_eq!(w.stored_dtype("w"), Some(DType::Q8_0));
    assert_eq!(w.get_linear("w", 2, 32).unwrap().dims(), [2, 32]);
    for (listed, dtype, bytes, needle) in [
        (
            r#"{"w": {"dtype": "q8_0", "shape": [3, 32]}}"#,
            safetensors::Dtype::U8,
            68,
            "68 bytes for shape [3, 32] q8_0",
        ),
        (r#"{"w": {"dtype": "q8_0", "shape": [4, 17]}}"#, safetensors::Dtype::U8, 68, "for shape [4, 17] q8_0"),
        (
            r#"{"w": {"dtype": "q9_z", "shape": [2, 32]}}"#,
            safetensors::Dtype::U8,
            68,
            "`q9_z` is not a GGML block format",
        ),
        (
            r#"{"w": {"dtype": "q8_0", "shape": [2, 32]}}"#,
            safetensors::Dtype::F32,
            68,
            "listed as quantized but stored as f32",
        ),
        (
            r#"{"v": {"dtype": "q8_0", "shape": [2, 32]}}"#,
            safetensors::Dtype::U8,
            68,
            "`v` is listed as quantized but not stored",
        ),
        (r#"["w"]"#, safetensors::Dtype::U8, 68, "not a map of {dtype, shape}"),
        // Sizes from the file must not overflow.
        (
            r#"{"w": {"dtype": "q8_0", "shape": [1152921504606846976, 64]}}"#,
            safetensors::Dtype::U8,
            68,
            "68 bytes for shape",
        ),
    ] {
        let dir = one_tensor(listed, dtype, bytes);
        let err = load_err(dir.path());
        assert!(err.contains(needle) && err.contains("model.safetensors"), "{listed}: {err}");
    }
    // Truncated: the header describes more than the file holds.
    let file = good.path().join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 10]).unwrap();
    assert!(load_err(good.path()).contains("truncated"), "{}", load_err(good.path()));
}

#[test]
fn bad_destinations_and_empty_recordings_are_refused() {
    let src = fixture("voxtral-realtime/hf");
    let registry = Registry::builtin().unwrap();
    let (_, weights) = record_quantized(|| registry.load_recognizer(&src, &q8_0()).unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let err = |out: &Path, w: &[QuantizedWeight]| write_quantized(&src, out, w).unwrap_err().to_string();
    // Nothing quantized: a load without --quant records nothing.
    let (_, none) = record_quantized(|| registry.load_recognizer(&src, &LoadConfig::default()).unwrap());
    assert!(err(&tmp.path().join("a"), &none).contains("quantized none of its weights"));
    // An output folder with files in it.
    std::fs::write(tmp.path().join("keep.txt"), "mine").unwrap();
    assert!(err(tmp.path(), &weights).contains("not empty"));
    assert_eq!(std::fs::read_to_string(tmp.path().join("keep.txt")).unwrap(), "mine", "nothing lost");
    // An output folder inside the checkpoint would copy itself.
    let inside = tempfile::tempdir().unwrap();
    let copied = inside.path().join("ckpt");
    std::fs::create_dir_all(&copied).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, copied.join(p.file_name().unwrap())).unwrap();
    }
    let (_, w) = record_quantized(|| registry.load_recognizer(&copied, &q8_0()).unwrap());
    let e = write_quantized(&copied, &copied.join("q8"), &w).unwrap_err().to_string();
    assert!(e.contains("inside the checkpoint"), "{e}");
    // A failed write leaves nothing behind: a recorded weight the files do not hold.
    let (_, mut w) = record_quantized(|| registry.load_recognizer(&src, &q8_0()).unwrap());
    w[0].name.push_str(".missing");
    let parent = tempfile::tempdir().unwrap();
    let e = write_quantized(&src, &parent.path().join("out"), &w).unwrap_err().to_string();
    assert!(e.contains("found in the checkpoint's files"), "{e}");
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0, "nothing left behind");
    // A copy is not a source.
    let (_, w) = record_quantized(|| registry.load_recognizer(&src, &q8_0()).unwrap());
    write_quantized(&src, &parent.path().join("copy"), &w).unwrap();
    let copy = parent.path().join("copy");
    let e = write_quantized(&copy, &parent.path().join("again"), &w).unwrap_err().to_string();
    assert!(e.contains("already quantized"), "{e}");
}

/// A speech model loaded from a plugin library quantizes through the library's own infer-core,
/// whose recording the host cannot see: `infer quantize` refuses it up front, naming the library,
/// rather than reporting that the model quantized nothing.
#[test]
fn a_model_from_a_plugin_library_is_refused_for_quantizing() {
    use infer_core::quantized_checkpoint::check_recordable;
    use infer_core::{Origin, Registry};
    let lib = infer_tests::plugin_library("infer_plugin_voxtral_realtime");
    let r = Registry::from_config(infer_tests::library_config(&["infer_plugin_voxtral_realtime"]).unwrap()).unwrap();
    let from_library = r
        .models()
        .iter()
        .find(|m| m.origin == Origin::Library(lib.clone()))
        .expect("the library's recognizer is registered");
    let err = check_recordable(from_library).unwrap_err().to_string();
    assert!(err.contains("plugin library") && err.contains(&lib.display().to_string()), "{err}");
    // The same model built in is recorded.
    let built_in = Registry::builtin().unwrap();
    let entry = built_in
        .models()
        .iter()
        .find(|m| m.plugin.name() == from_library.plugin.name())
        .expect("built into the test binary");
    assert_eq!(entry.origin, Origin::BuiltIn);
    check_recordable(entry).unwrap();
}
