//! `infer embed` and `infer serve`'s /v1/embeddings end to end through the binary, on the tiny
//! Qwen3-Embedding fixture (tools/fixtures/make_qwen3_embedding.py): the vectors
//! sentence-transformers computed (as JSON floats and as the base64 the `openai` client asks
//! for), a prompt by name, Matryoshka dimensions, and one clear error for each kind of bad input.

use std::time::Duration;

use base64::Engine;
use infer_tests::cli::{stderr, stdout, Infer};
use infer_tests::serve::{http, start_serve};
use infer_tests::{fixture, max_abs_diff, Setup};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Golden {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    prompt_name: Option<String>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct Printed {
    architecture: String,
    dimension: usize,
    prompt_tokens: usize,
    embeddings: Vec<Vec<f32>>,
}

fn infer() -> Infer {
    Setup::CandleBuiltIn.mark_ran();
    Infer::new(env!("CARGO_BIN_EXE_infer"))
}

fn golden() -> Golden {
    serde_json::from_str(&std::fs::read_to_string(fixture("qwen3-embedding/tiny/golden.json")).unwrap()).unwrap()
}

fn embed(args: &[&str]) -> Printed {
    let dir = fixture("qwen3-embedding/tiny");
    let mut all = vec!["embed", "--backend", "candle", "--model", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = infer().run(&all);
    assert!(o.status.success(), "{all:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("stdout is not the JSON expected ({e}): {}", stdout(&o)))
}

#[test]
fn texts_print_the_reference_vectors_in_order() {
    let g = golden();
    let plain: Vec<&Case> = g.cases.iter().filter(|c| c.prompt_name.is_none() && !c.text.is_empty()).take(2).collect();
    let out = embed(&["--text", &plain[0].text, "--text", &plain[1].text]);
    assert_eq!((out.architecture.as_str(), out.dimension, out.embeddings.len()), ("qwen3", 64, 2));
    assert!(out.prompt_tokens > 0);
    for (ours, case) in out.embeddings.iter().zip(&plain) {
        let diff = max_abs_diff(ours, &case.embedding);
        assert!(diff <= 1e-4, "{:?}: differs by {diff}", case.text);
    }
}

#[test]
fn a_prompt_name_prefixes_its_instruction() {
    let g = golden();
    let case = g.cases.iter().find(|c| c.prompt_name.as_deref() == Some("query")).unwrap();
    let out = embed(&["--prompt-name", "query", "--text", &case.text]);
    let diff = max_abs_diff(&out.embeddings[0], &case.embedding);
    assert!(diff <= 1e-4, "query prompt: differs by {diff}");
}

#[test]
fn bad_input_is_one_clear_line() {
    let dir = fixture("qwen3-embedding/tiny");
    let dir = dir.to_str().unwrap();
    let infer = infer();
    let base = ["embed", "--backend", "candle", "--model"];
    let with = |rest: &[&'static str], model: &str| -> Vec<String> {
        base.iter()
            .map(|s| s.to_string())
            .chain([model.to_string()])
            .chain(rest.iter().map(|s| s.to_string()))
            .collect()
    };
    let check = |args: Vec<String>, needles: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        infer.assert_clean_error(&args, needles);
    };
    check(with(&["--text", "a"], "/no/such/embedding/dir"), &["/no/such/embedding/dir"]);
    check(with(&["--prompt-name", "passage", "--text", "a"], dir), &["unknown prompt name `passage`", "query"]);
    check(with(&[], dir), &["no --text given"]);
    check(with(&["--text", "a", "--text", ""], dir), &["--text number 2 is empty"]);
    check(with(&["--dimensions", "65", "--text", "a"], dir), &["65 dimensions"]);
    infer.assert_clean_error(&["embed", "--text", "a"], &["no --model given"]);
}

#[test]
fn the_server_embeds_as_the_cli_and_the_reference_do() {
    let g = golden();
    let dir = fixture("qwen3-embedding/tiny");
    let exe = env!("CARGO_BIN_EXE_infer");
    let server = Killed(start_serve(
        exe,
        &["--model", dir.to_str().unwrap(), "--backend", "candle"],
        &[],
        Duration::from_secs(120),
    ));
    let server = &server.0;
    Setup::CandleBuiltIn.mark_ran();
    let post = |body: Value| -> (u16, Value) {
        let (status, text) = http(&server.addr, "POST", "/v1/embeddings", &body);
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
    };
    let (_, models) = http(&server.addr, "GET", "/v1/models", &Value::Null);
    assert!(models.contains("text embedding"), "{models}");

    let plain: Vec<&Case> = g.cases.iter().filter(|c| c.prompt_name.is_none() && !c.text.is_empty()).collect();
    let texts: Vec<&str> = plain.iter().map(|c| c.text.as_str()).collect();
    let (status, v) = post(json!({ "model": "any", "input": texts }));
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["object"].as_str(), v["data"].as_array().unwrap().len()), (Some("list"), plain.len()));
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{v}");
    // base64 (little-endian f32), the `openai` client's default, carries the same vectors.
    let (status, b) = post(json!({ "input": texts, "encoding_format": "base64" }));
    assert_eq!(status, 200, "{b}");
    for (i, case) in plain.iter().enumerate() {
        let item = &v["data"][i];
        assert_eq!((item["object"].as_str(), item["index"].as_u64()), (Some("embedding"), Some(i as u64)));
        let floats: Vec<f32> =
            item["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        let diff = max_abs_diff(&floats, &case.embedding);
        assert!(diff <= 1e-4, "{:?}: differs from sentence-transformers by {diff}", case.text);
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(b["data"][i]["embedding"].as_str().unwrap()).unwrap();
        let decoded: Vec<f32> = bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(decoded, floats, "base64 and float vectors differ");
    }
    // A prompt by name, and Matryoshka dimensions exactly as `infer embed --dimensions` gives them.
    let query = g.cases.iter().find(|c| c.prompt_name.as_deref() == Some("query")).unwrap();
    let (status, q) = post(json!({ "input": query.text, "prompt_name": "query" }));
    assert_eq!(status, 200, "{q}");
    let floats: Vec<f32> =
        q["data"][0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    assert!(max_abs_diff(&floats, &query.embedding) <= 1e-4, "query prompt differs");
    let (status, short) = post(json!({ "input": texts[0], "dimensions": 16 }));
    assert_eq!(status, 200, "{short}");
    let cli = embed(&["--dimensions", "16", "--text", texts[0]]);
    let served: Vec<f32> =
        short["data"][0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    assert_eq!(served.len(), 16);
    assert!(max_abs_diff(&served, &cli.embeddings[0]) <= 1e-6, "served and CLI truncations differ");

    for (body, param) in [
        (json!({ "input": [] }), "input"),
        (json!({ "input": ["a", ""] }), "input"),
        (json!({ "input": [[1, 2, 3]] }), "input"),
        (json!({ "input": 5 }), "input"),
        (json!({ "input": "a", "dimensions": 65 }), "dimensions"),
        (json!({ "input": "a", "encoding_format": "int8" }), "encoding_format"),
        (json!({ "input": "a", "prompt_name": "passage" }), "prompt_name"),
    ] {
        let (status, e) = post(body.clone());
        assert_eq!((status, e["error"]["param"].as_str()), (400, Some(param)), "{body}: {e}");
    }
    // A text model's endpoint names what this model is.
    let (status, e) =
        http(&server.addr, "POST", "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(status, 400, "{e}");
    assert!(e.contains("text embedding"), "{e}");
}

/// A started server, killed when the test ends (or fails).
struct Killed(infer_tests::serve::Started);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}
