//! `infer quantize` end to end through the binary: the copy of the Voxtral Realtime fixture
//! transcribes as `--quant q8_0` does, in both layouts (a Hugging Face folder and Mistral's
//! consolidated.safetensors), and bad requests get one error line.

use std::path::Path;

use infer_tests::cli::{stderr, stdout, Infer};
use infer_tests::fixture;

fn infer() -> Infer {
    Infer::new(env!("CARGO_BIN_EXE_infer"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn transcribe(model: &Path, extra: &[&str]) -> String {
    let speech = fixture("voxtral-realtime/speech_16k.wav");
    let mut args = vec!["transcribe", "--model", s(model), s(&speech), "--json"];
    args.extend_from_slice(extra);
    let o = infer().run(&args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    format!("{} {}", v["tokens"], v["text"])
}

#[test]
fn a_quantized_copy_transcribes_as_quant_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    for layout in ["hf", "mistral"] {
        let src = fixture("voxtral-realtime").join(layout);
        let out = tmp.path().join(layout);
        let o = infer().run(&["quantize", "--model", s(&src), "--quant", "q8_0", "--out", s(&out)]);
        let err = stderr(&o);
        assert!(o.status.success(), "{layout}: {err}");
        assert!(err.contains("as q8_0") && err.contains("load it without --quant"), "{layout}: {err}");
        assert_eq!(transcribe(&out, &[]), transcribe(&src, &["--quant", "q8_0"]), "{layout}");
        assert_ne!(transcribe(&out, &[]), transcribe(&src, &[]), "{layout}: the copy equals f32");
    }
}

#[test]
fn bad_requests_get_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let rt = fixture("voxtral-realtime/hf");
    let run = |model: &Path, quant: &str, out: &Path, needles: &[&str]| {
        infer().assert_clean_error(&["quantize", "--model", s(model), "--quant", quant, "--out", s(out)], needles)
    };
    run(&rt, "q9", &out, &["unknown quantization `q9`"]);
    run(&fixture("qwen3/gqa"), "q8_0", &out, &["`qwen3` is not a speech model", "GGUF"]);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "keep").unwrap();
    run(&rt, "q8_0", &out, &["not empty"]);
    assert_eq!(std::fs::read_to_string(out.join("notes.txt")).unwrap(), "keep");
    run(&tmp.path().join("missing"), "q8_0", &tmp.path().join("o2"), &["does not exist"]);
    // A copy is not quantized again.
    let copy = tmp.path().join("copy");
    let o = infer().run(&["quantize", "--model", s(&rt), "--quant", "q8_0", "--out", s(&copy)]);
    assert!(o.status.success(), "{}", stderr(&o));
    run(&copy, "q4_k", &tmp.path().join("o3"), &["already quantized"]);
    assert!(!tmp.path().join("o3").exists(), "nothing written");
}
