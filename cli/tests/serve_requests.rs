//! `infer serve` on the request surface real OpenAI clients send, on the tiny Qwen3 fixture: a
//! request without sampling fields samples with the checkpoint's generation_config.json, as
//! `infer run` does; one served model answers any name (and its `--alias`), several need theirs;
//! /tokenize and /detokenize; logit_bias forces and bans tokens, presence and frequency penalties
//! change repeats; logprobs of chat and completions, streamed and not; `n` choices each drawn as
//! its own seeded sequence. Raw HTTP/1.1 over loopback, so every byte and status is the server's.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use infer_tests::serve::{http, sse_events, start_serve};
use infer_tests::{copy_dir, fixture};
use serde_json::{json, Value};

/// A tiny Qwen3 checkpoint: 2 layers, a vocabulary of 512, a context of 512 positions.
const TINY: &str = "qwen3/gqa";

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_infer")
}

/// A copy of the tiny fixture whose generation_config.json samples: temperature 0.7, top-k 5,
/// top-p 0.9 (transformers' reading: min-p 0, repetition penalty 1).
fn sampling_checkpoint(dir: &Path) -> PathBuf {
    let to = dir.join("tiny");
    copy_dir(&fixture(TINY), &to, &["generation_config.json"]);
    std::fs::write(
        to.join("generation_config.json"),
        r#"{"do_sample": true, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "bos_token_id": 480, "eos_token_id": 482}"#,
    )
    .unwrap();
    to
}

/// A running `infer serve`; killed on drop.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let started = start_serve(exe(), args, &[], Duration::from_secs(120));
        Server { child: started.child, addr: started.addr, log: started.log }
    }

    /// Status and body of one request (`body` null: none).
    fn raw(&self, method: &str, path: &str, body: &Value) -> (u16, String) {
        http(&self.addr, method, path, body)
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (status, body) = self.raw("POST", path, &body);
        let json = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}\nserver log:\n{}", self.log.lock().unwrap()));
        (status, json)
    }

    /// A successful request's body.
    fn ok(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.post(path, body);
        assert_eq!(status, 200, "{v}");
        v
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A completion of the prompt ids 1, 2, 3 that never stops early.
fn completion(extra: Value) -> Value {
    let mut body = json!({ "model": "tiny", "prompt": [1, 2, 3], "max_tokens": 16, "ignore_eos": true });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

fn text(v: &Value) -> String {
    v["choices"][0]["text"].as_str().unwrap_or_else(|| panic!("no text: {v}")).to_string()
}

#[test]
fn requests_without_sampling_fields_take_the_checkpoints_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let model = sampling_checkpoint(dir.path());
    let server = Server::start(&["--model", model.to_str().unwrap()]);
    let defaults = text(&server.ok("/v1/completions", completion(json!({ "seed": 7 }))));
    let spelled_out =
        json!({ "seed": 7, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0, "repeat_penalty": 1 });
    assert_eq!(text(&server.ok("/v1/completions", completion(spelled_out))), defaults);
    // The API's own defaults (temperature 1 over the whole vocabulary of a random-weight model)
    // draw something else.
    let api = json!({ "seed": 7, "temperature": 1, "top_k": 0, "top_p": 1, "min_p": 0 });
    assert_ne!(text(&server.ok("/v1/completions", completion(api))), defaults);
    // A request's own value wins: temperature 0 is greedy whatever the checkpoint says.
    let greedy = |seed| text(&server.ok("/v1/completions", completion(json!({ "seed": seed, "temperature": 0 }))));
    assert_eq!(greedy(1), greedy(2));
}

fn chat(model: Option<&str>) -> Value {
    let mut body = json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 4, "temperature": 0 });
    if let Some(m) = model {
        body["model"] = m.into();
    }
    body
}

#[test]
fn one_served_model_answers_any_name_and_its_alias_is_listed() {
    let server = Server::start(&["--model", fixture(TINY).to_str().unwrap(), "--alias", "my-model"]);
    let (status, list) = server.raw("GET", "/v1/models", &Value::Null);
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&list).unwrap();
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["my-model"], "{list}");
    assert_eq!(server.raw("GET", "/v1/models/my-model", &Value::Null).0, 200);
    for name in [Some("my-model"), Some("gpt-4o"), None] {
        let v = server.ok("/v1/chat/completions", chat(name));
        assert_eq!(v["model"], "my-model", "{name:?}: {v}");
        let v = server.ok("/v1/completions", json!({ "model": name, "prompt": "hi", "max_tokens": 2 }));
        assert_eq!(v["model"], "my-model", "{name:?}: {v}");
    }
}

#[test]
fn several_served_models_need_one_of_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.toml");
    let tiny = fixture(TINY);
    std::fs::write(
        &path,
        format!("[[models]]\nname = \"a\"\npath = {tiny:?}\n[[models]]\nname = \"b\"\npath = {tiny:?}\n"),
    )
    .unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    assert_eq!(server.ok("/v1/chat/completions", chat(Some("b")))["model"], "b");
    let (status, v) = server.post("/v1/chat/completions", chat(Some("gpt-4o")));
    assert_eq!((status, v["error"]["code"].as_str()), (404, Some("model_not_found")), "{v}");
    let (status, v) = server.post("/v1/chat/completions", chat(None));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("model")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("a, b"), "{v}");
}

#[test]
fn tokenize_and_detokenize_round_trip_and_refuse_bad_ids() {
    let server = Server::start(&["--model", fixture(TINY).to_str().unwrap()]);
    let content = "Hello world, hello tokens.";
    let ids = server.ok("/tokenize", json!({ "content": content }))["tokens"].clone();
    let ids: Vec<u64> = ids.as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert!(!ids.is_empty());
    let pieces = server.ok("/tokenize", json!({ "content": content, "with_pieces": true }))["tokens"].clone();
    let pieces = pieces.as_array().unwrap();
    assert_eq!(pieces.iter().map(|p| p["id"].as_u64().unwrap()).collect::<Vec<_>>(), ids);
    assert_eq!(pieces.iter().map(|p| p["piece"].as_str().unwrap()).collect::<String>(), content);
    assert_eq!(server.ok("/detokenize", json!({ "tokens": ids }))["content"], content);
    // add_special gives the ids /v1/completions prompts with.
    let special = server.ok("/tokenize", json!({ "content": content, "add_special": true, "model": "any" }));
    let usage = server.ok("/v1/completions", json!({ "prompt": content, "max_tokens": 1 }))["usage"].clone();
    assert_eq!(special["tokens"].as_array().unwrap().len() as u64, usage["prompt_tokens"].as_u64().unwrap());
    for (bad, says) in [
        (json!({ "tokens": "1 2" }), "a list of token ids"),
        (json!({ "tokens": [1, 512] }), "tokens[1] = 512 is not in the vocabulary"),
        (json!({ "tokens": [1, -3] }), "tokens[1] = -3 is not a token id"),
    ] {
        let (status, v) = server.post("/detokenize", bad.clone());
        assert_eq!((status, v["error"]["param"].as_str()), (400, Some("tokens")), "{bad}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(says), "{bad}: {v}");
    }
    let (status, v) = server.post("/tokenize", json!({ "text": content }));
    assert_eq!(status, 400, "{v}");
}

fn ids_of(server: &Server, text: &str) -> Vec<u64> {
    let v = server.ok("/tokenize", json!({ "content": text }));
    v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect()
}

#[test]
fn logit_bias_forces_or_bans_tokens_and_penalties_change_repeats() {
    let server = Server::start(&["--model", fixture(TINY).to_str().unwrap()]);
    let greedy = |extra: Value| {
        let mut body = completion(json!({ "temperature": 0 }));
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        text(&server.ok("/v1/completions", body))
    };
    // +100 on one id: every token is that id.
    let forced = ids_of(&server, "hello")[0];
    let want = server.ok("/detokenize", json!({ "tokens": vec![forced; 16] }))["content"].clone();
    assert_eq!(greedy(json!({ "logit_bias": { forced.to_string(): 100 } })), want.as_str().unwrap());
    // -100 on the greedy first token: another one comes first. A prompt whose first token is
    // whole text names its id (a random model may begin with part of a character).
    let (prompt, first, id) = (3..40)
        .find_map(|last| {
            let first = greedy(json!({ "prompt": [1, 2, last], "max_tokens": 1 }));
            match ids_of(&server, &first)[..] {
                [id] if !first.contains('\u{FFFD}') => Some((last, first, id)),
                _ => None,
            }
        })
        .expect("a prompt whose greedy first token is text");
    let banned = greedy(json!({ "prompt": [1, 2, prompt], "max_tokens": 1, "logit_bias": { id.to_string(): -100 } }));
    assert_ne!(banned, first);
    let (status, v) = server.post("/v1/completions", completion(json!({ "logit_bias": { "512": 1 } })));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("logit_bias")), "{v}");
    // Penalties on generated tokens: a greedy text that repeats a token is changed by them.
    let plain = greedy(json!({ "max_tokens": 32 }));
    let plain_ids = ids_of(&server, &plain);
    let mut distinct = plain_ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let penalized = greedy(json!({ "max_tokens": 32, "presence_penalty": 2, "frequency_penalty": 2 }));
    if distinct.len() < plain_ids.len() {
        assert_ne!(penalized, plain);
    }
    assert_eq!(greedy(json!({ "max_tokens": 32, "presence_penalty": 0, "frequency_penalty": 0 })), plain);
}

#[test]
fn logprobs_of_chat_and_completions_streamed_or_not() {
    let server = Server::start(&["--model", fixture(TINY).to_str().unwrap()]);
    // Completions: greedy tokens hold the best logprob; the alternatives' mass is at most 1.
    let v = server.ok("/v1/completions", completion(json!({ "temperature": 0, "max_tokens": 8, "logprobs": 5 })));
    let lp = &v["choices"][0]["logprobs"];
    let tokens: Vec<&str> = lp["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tokens.len(), 8, "{v}");
    // A token that is part of a character reads as U+FFFD alone.
    if !tokens.concat().contains('\u{FFFD}') {
        assert_eq!(tokens.concat(), text(&v), "{v}");
    }
    let mut offset = 0;
    for i in 0..8 {
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        let top: Vec<f64> = lp["top_logprobs"][i].as_object().unwrap().values().map(|l| l.as_f64().unwrap()).collect();
        assert!(!top.is_empty() && top.len() <= 5, "{v}");
        let best = top.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert!((chosen - best).abs() < 1e-6 && chosen <= 0.0, "{i}: {v}");
        assert!(top.iter().map(|l| l.exp()).sum::<f64>() <= 1.0 + 1e-6, "{v}");
        assert_eq!(lp["text_offset"][i].as_u64().unwrap() as usize, offset, "{v}");
        offset += tokens[i].chars().count();
    }
    // Chat: content entries with bytes and alternatives, the same streamed as not.
    let body = json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 6, "temperature": 0,
                       "logprobs": true, "top_logprobs": 3 });
    let v = server.ok("/v1/chat/completions", body.clone());
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
    assert!(!content.is_empty(), "{v}");
    for e in &content {
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{e}");
        assert_eq!(e["logprob"], top[0]["logprob"], "{e}");
        assert!(top.windows(2).all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()), "{e}");
        let bytes: Vec<u8> = e["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
        assert_eq!(String::from_utf8_lossy(&bytes), e["token"].as_str().unwrap(), "{e}");
    }
    let mut streamed = body;
    streamed["stream"] = true.into();
    let (status, sse) = server.raw("POST", "/v1/chat/completions", &streamed);
    assert_eq!(status, 200, "{sse}");
    let chunks = sse_events(&sse);
    let streamed: Vec<Value> =
        chunks.iter().filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array()).flatten().cloned().collect();
    assert_eq!(streamed, content);
    // Not asked for: null.
    let v = server
        .ok("/v1/chat/completions", json!({ "messages": [{ "role": "user", "content": "hi" }], "max_tokens": 2 }));
    assert!(v["choices"][0]["logprobs"].is_null(), "{v}");
    let (status, v) = server.post(
        "/v1/chat/completions",
        json!({ "messages": [{ "role": "user", "content": "hi" }], "logprobs": true, "top_logprobs": 21 }),
    );
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("top_logprobs")), "{v}");
}

#[test]
fn n_choices_are_sequences_of_their_own_streamed_by_index() {
    let dir = tempfile::tempdir().unwrap();
    let model = sampling_checkpoint(dir.path());
    let server = Server::start(&["--model", model.to_str().unwrap(), "--parallel", "2"]);
    let one = |seed: u64| text(&server.ok("/v1/completions", completion(json!({ "seed": seed }))));
    let v = server.ok("/v1/completions", completion(json!({ "seed": 40, "n": 3 })));
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.iter().map(|c| c["index"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2], "{v}");
    // Choice i draws as a request seeded seed + i.
    let texts: Vec<String> = choices.iter().map(|c| c["text"].as_str().unwrap().to_string()).collect();
    assert_eq!(texts, [one(40), one(41), one(42)]);
    assert_eq!(v["usage"]["completion_tokens"], 48, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 3, "{v}");
    // Streamed: every chunk names its choice; each choice ends once, then usage and [DONE].
    let body = completion(json!({ "seed": 40, "n": 3, "stream": true, "stream_options": { "include_usage": true } }));
    let (status, sse) = server.raw("POST", "/v1/completions", &body);
    assert_eq!(status, 200, "{sse}");
    let chunks = sse_events(&sse);
    let mut streamed = vec![String::new(); 3];
    let mut finished = [0; 3];
    for c in &chunks[..chunks.len() - 1] {
        let choice = &c["choices"][0];
        let i = choice["index"].as_u64().unwrap() as usize;
        streamed[i].push_str(choice["text"].as_str().unwrap());
        finished[i] += choice["finish_reason"].is_string() as usize;
    }
    assert_eq!(streamed, texts);
    assert_eq!(finished, [1, 1, 1]);
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 48);
    let (status, v) = server.post("/v1/completions", completion(json!({ "n": 17 })));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("n")), "{v}");
}
