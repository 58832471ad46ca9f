//! `infer serve` for agent clients, on the real Qwen2.5-Coder 0.5B Instruct GGUF (its own chat
//! template, Hermes `<tool_call>` syntax) beside Gemma 3 270M base (the built-in Gemma turn
//! format, which renders no tools):
//! - tools, assistant tool calls and tool results render exactly as transformers renders them
//!   (`/apply-template` against goldens of tools/fixtures/make_tool_chat.py);
//! - the model's call comes back as `tool_calls` with finish_reason "tool_calls", and streamed
//!   as `delta.tool_calls` chunks that assemble to the same call (also when the model writes it
//!   without the tags, or in a JSON code block, as this small model does);
//! - `tool_choice` "required" or a named function makes it call; `parallel_tool_calls: false`
//!   keeps one call; a tool's result fed back is rendered and answered;
//! - a template that leaves tools out, and malformed tool requests, get one clear 400.

use std::path::Path;

use infer_tests::fixture;
use infer_tests::serve::{http, serve_real_models, sse_events, Served};
use serde_json::{json, Value};

const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

/// Qwen as `qwen`, Gemma as `gemma`.
fn start(dir: &Path) -> Served {
    serve_real_models(env!("CARGO_BIN_EXE_infer"), dir, &[("qwen", QWEN), ("gemma", GEMMA)])
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}})
}

fn ask(question: &str, extra: Value) -> Value {
    let mut body = json!({
        "model": "qwen",
        "messages": [{"role": "user", "content": question}],
        "tools": [weather_tool()],
        "temperature": 0,
        "max_tokens": 64,
    });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// The calls of a response as (name, arguments parsed).
fn calls(message: &Value) -> Vec<(String, Value)> {
    message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    assert_eq!(c["type"], "function", "{c}");
                    assert!(c["id"].as_str().is_some_and(|id| id.starts_with("call")), "{c}");
                    let args = c["function"]["arguments"].as_str().unwrap_or_else(|| panic!("arguments not text: {c}"));
                    let args = serde_json::from_str(args).unwrap_or_else(|e| panic!("arguments not JSON ({e}): {c}"));
                    (c["function"]["name"].as_str().unwrap().to_string(), args)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn tool_conversations_render_as_transformers_renders_them() {
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("chat/qwen2.5-coder-tools.json")).unwrap()).unwrap();
    assert_eq!(golden["model"], QWEN);
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let cases = golden["cases"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for case in cases {
        let mut body = case["request"].clone();
        body["model"] = "qwen".into();
        let got = server.json("/apply-template", &body, 200);
        assert_eq!(got["prompt"], case["prompt"], "{}", case["name"]);
    }
    // A required call's opener is part of the prompt the model continues.
    let required = ask("Hi", json!({"tool_choice": "required"}));
    let prompt = server.json("/apply-template", &required, 200)["prompt"].as_str().unwrap().to_string();
    assert!(prompt.ends_with("<|im_start|>assistant\n{\"name\": \""), "{prompt}");
    // A template that renders no tools: refused, not silently dropped; without them it renders.
    let mut gemma = ask("Hi", json!({}));
    gemma["model"] = "gemma".into();
    let e = server.json("/v1/chat/completions", &gemma, 400);
    assert_eq!(e["error"]["param"], "tools", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("does not render tools"), "{e}");
    gemma["tool_choice"] = "none".into();
    let prompt = server.json("/apply-template", &gemma, 200)["prompt"].as_str().unwrap().to_string();
    assert!(prompt.ends_with("<start_of_turn>model\n"), "{prompt}");
    // Malformed tool requests name their field.
    for (extra, param) in [
        (json!({"tools": {"type": "function"}}), "tools"),
        (json!({"tools": [{"type": "function", "function": {"description": "no name"}}]}), "tools[0]"),
        (json!({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}), "tool_choice"),
        (json!({"tool_choice": "sometimes"}), "tool_choice"),
    ] {
        let e = server.json("/v1/chat/completions", &ask("Hi", extra.clone()), 400);
        assert_eq!(e["error"]["param"], param, "{extra}: {e}");
    }
    let bad_call = json!({"messages": [{"role": "user", "content": "Hi"},
                                       {"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]}]});
    let e = server.json("/v1/chat/completions", &ask("Hi", bad_call), 400);
    assert_eq!(e["error"]["param"], "messages[1].tool_calls[0]", "{e}");
}

#[test]
fn the_models_calls_come_back_as_tool_calls_streamed_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let question = "What is the weather in Paris?";
    let whole = server.json("/v1/chat/completions", &ask(question, json!({})), 200);
    let choice = &whole["choices"][0];
    let got = calls(&choice["message"]);
    eprintln!("greedy reply: {}", choice["message"]);
    assert_eq!(choice["finish_reason"], "tool_calls", "{whole}");
    assert_eq!(choice["message"]["content"], Value::Null, "{whole}");
    assert_eq!(got.len(), 1, "{whole}");
    assert_eq!(got[0].0, "get_weather");
    assert_eq!(got[0].1["city"], "Paris", "{whole}");

    // Streamed: a role chunk, then each call's header (index, id, type, name) and its arguments.
    let (status, body) = http(&server.addr, "POST", "/v1/chat/completions", &ask(question, json!({"stream": true})));
    assert_eq!(status, 200, "{body}");
    let chunks = sse_events(&body);
    let mut assembled: Vec<Value> = Vec::new();
    let mut content = String::new();
    for c in &chunks {
        let delta = &c["choices"][0]["delta"];
        content.push_str(delta["content"].as_str().unwrap_or(""));
        for part in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = part["index"].as_u64().unwrap() as usize;
            if i == assembled.len() {
                assert!(part["id"].is_string() && part["function"]["name"].is_string(), "a call's first chunk: {part}");
                assembled.push(json!({"id": part["id"], "type": part["type"],
                                      "function": {"name": part["function"]["name"], "arguments": ""}}));
            }
            let args = assembled[i]["function"]["arguments"].as_str().unwrap().to_string()
                + part["function"]["arguments"].as_str().unwrap_or("");
            assembled[i]["function"]["arguments"] = args.into();
        }
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls", "{body}");
    assert_eq!(content, "", "{body}");
    assert_eq!(calls(&json!({"tool_calls": assembled})), got, "{body}");

    // The result fed back is rendered as the template's tool response, and answered.
    let mut follow_up = ask(question, json!({}));
    let call_message = json!({"role": "assistant", "content": null, "tool_calls": choice["message"]["tool_calls"]});
    let call_id = choice["message"]["tool_calls"][0]["id"].clone();
    follow_up["messages"].as_array_mut().unwrap().extend([
        call_message,
        json!({"role": "tool", "tool_call_id": call_id, "content": "{\"temperature_c\": 18, \"sky\": \"clear\"}"}),
    ]);
    let prompt = server.json("/apply-template", &follow_up, 200)["prompt"].as_str().unwrap().to_string();
    assert!(
        prompt.contains("<tool_response>\n{\"temperature_c\": 18, \"sky\": \"clear\"}\n</tool_response>"),
        "{prompt}"
    );
    let answer = server.json("/v1/chat/completions", &follow_up, 200);
    eprintln!("answer to the result: {}", answer["choices"][0]["message"]);
    let answer = &answer["choices"][0];
    assert!(answer["finish_reason"] == "stop" || answer["finish_reason"] == "tool_calls", "{answer}");
}

#[test]
fn tool_choice_makes_the_model_call_and_parallel_calls_can_be_limited() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    // A greeting would get a greeting; a named function or "required" gets a call.
    let plain = server.json("/v1/chat/completions", &ask("Say hello to me.", json!({})), 200);
    eprintln!("no call asked for: {}", plain["choices"][0]["message"]);
    let named = json!({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}});
    for extra in [named, json!({"tool_choice": "required"})] {
        let v = server.json("/v1/chat/completions", &ask("What is it like in Oslo today?", extra.clone()), 200);
        let got = calls(&v["choices"][0]["message"]);
        assert!(!got.is_empty() && got.iter().all(|(name, _)| name == "get_weather"), "{extra}: {v}");
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{extra}: {v}");
    }
    let two = "What is the weather in Rome, and what is the weather in Lima?";
    let v = server.json("/v1/chat/completions", &ask(two, json!({"max_tokens": 96})), 200);
    let parallel = calls(&v["choices"][0]["message"]);
    eprintln!("two cities: {}", v["choices"][0]["message"]);
    let v =
        server.json("/v1/chat/completions", &ask(two, json!({"max_tokens": 96, "parallel_tool_calls": false})), 200);
    let single = calls(&v["choices"][0]["message"]);
    assert!(!parallel.is_empty() && single.len() == 1, "{v}");
    assert_eq!(single.first(), parallel.first(), "the first call is the same either way");
}
