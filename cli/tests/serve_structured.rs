//! Structured output through `infer serve` on the real Qwen2.5-Coder 0.5B Instruct and Gemma 3
//! 270M GGUFs, checked by an independent validator (Python's `jsonschema`, pinned in
//! tools/serve/setup_openai_venv.sh):
//! - `response_format` json_schema and json_object, vLLM's `structured_outputs` (json, regex,
//!   choice, grammar) and llama-server's `json_schema`: many sampled objects (temperature 1,
//!   several seeds, `n` > 1, streamed and not) all parse and validate;
//! - forced tool calls (`tool_choice` "required" or a function): the arguments always follow the
//!   function's JSON Schema;
//! - a format that is malformed, or a schema that does not compile, is one 400 naming it.

use std::io::Write;
use std::process::{Command, Stdio};

use infer_tests::cli::stderr;
use infer_tests::repo_root;
use infer_tests::serve::{client_python, http, serve_real_models, sse_events, Served};
use serde_json::{json, Value};

const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";

fn start(dir: &std::path::Path) -> Served {
    serve_real_models(env!("CARGO_BIN_EXE_infer"), dir, &[("qwen", QWEN), ("gemma", GEMMA)])
}

/// Runs cli/tests/validate_json.py over `cases` ({"text", "schema" | "regex"}): every case
/// must pass.
fn validate(cases: &[Value]) {
    let mut child = Command::new(client_python())
        .arg(repo_root().join("cli/tests/validate_json.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the validator");
    child.stdin.take().unwrap().write_all(Value::from(cases.to_vec()).to_string().as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "validator failed: {}", stderr(&o));
    let verdicts: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let failed: Vec<&Value> = verdicts.iter().filter(|v| !v.is_null()).collect();
    assert!(failed.is_empty(), "{} of {} outputs are invalid: {failed:#?}", failed.len(), cases.len());
}

/// Schemas of the kinds clients send: nested objects, enums, bounded arrays and numbers,
/// patterns, formats, optional fields, unions.
fn schemas() -> Vec<Value> {
    vec![
        json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": {"type": "string", "format": "email"},
            "address": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 30}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": false},
            "skills": {"type": "array", "items": {"enum": ["rust", "go", "python", "c"]}, "minItems": 1, "maxItems": 3},
            "nickname": {"type": "string", "maxLength": 10}},
            "required": ["name", "age", "address", "skills"], "additionalProperties": false}),
        json!({"type": "array", "minItems": 2, "maxItems": 4, "items": {"type": "object", "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
            "price": {"type": "number", "minimum": 0, "maximum": 1000},
            "in_stock": {"type": "boolean"}}, "required": ["sku", "price", "in_stock"], "additionalProperties": false}}),
        json!({"type": "object", "properties": {
            "event": {"anyOf": [
                {"type": "object", "properties": {"kind": {"const": "meeting"}, "date": {"type": "string", "format": "date"}},
                 "required": ["kind", "date"], "additionalProperties": false},
                {"type": "object", "properties": {"kind": {"const": "task"}, "priority": {"type": "integer", "minimum": 1, "maximum": 5}},
                 "required": ["kind", "priority"], "additionalProperties": false}]},
            "note": {"type": ["string", "null"], "maxLength": 40}},
            "required": ["event", "note"], "additionalProperties": false}),
    ]
}

fn chat(model: &str, prompt: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 300});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// Every choice's content, each of which must have ended by itself (not cut by the budget).
fn contents(reply: &Value) -> Vec<String> {
    reply["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert_eq!(c["finish_reason"], "stop", "{c}");
            c["message"]["content"].as_str().or(c["text"].as_str()).unwrap_or_else(|| panic!("{c}")).to_string()
        })
        .collect()
}

#[test]
fn sampled_structured_output_always_validates() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut cases = Vec::new();
    for (i, schema) in schemas().into_iter().enumerate() {
        let strict =
            json!({"type": "json_schema", "json_schema": {"name": format!("s{i}"), "strict": true, "schema": schema}});
        for (model, seed) in [("qwen", 1), ("gemma", 3)] {
            let body = chat(
                model,
                "Make up an example that fits the requested JSON format.",
                json!({"response_format": strict, "temperature": 1.0, "seed": seed, "n": 3}),
            );
            for text in contents(&server.json("/v1/chat/completions", &body, 200)) {
                cases.push(json!({"text": text, "schema": schema}));
            }
        }
        // Streamed: the deltas assemble to a valid object too.
        let body = chat(
            "qwen",
            "An example, please.",
            json!({"response_format": strict, "temperature": 1.0, "seed": 9, "stream": true}),
        );
        let (status, text) = http(&server.addr, "POST", "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{text}");
        let events = sse_events(&text);
        let streamed: String = events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(events.last().unwrap()["choices"][0]["finish_reason"], "stop", "{text}");
        cases.push(json!({"text": streamed, "schema": schema}));
        // llama-server's field and vLLM's take the same schema.
        for extra in [json!({"json_schema": schema}), json!({"structured_outputs": {"json": schema}})] {
            let mut body = chat("gemma", "An example:", json!({"temperature": 0.8, "seed": 4}));
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            for text in contents(&server.json("/v1/chat/completions", &body, 200)) {
                cases.push(json!({"text": text, "schema": schema}));
            }
        }
    }
    // json_object: any object.
    let body = chat(
        "qwen",
        "Describe a cat in JSON.",
        json!({"response_format": {"type": "json_object"}, "temperature": 1.0, "seed": 5, "n": 2}),
    );
    for text in contents(&server.json("/v1/chat/completions", &body, 200)) {
        cases.push(json!({"text": text, "schema": {"type": "object"}}));
    }
    // Completions take vLLM's regex, choice and grammar.
    let regex = "(Mon|Tue|Wed|Thu|Fri) [0-2][0-9]:[0-5][0-9]";
    let complete = |extra: Value| {
        let mut body = json!({"model": "gemma", "prompt": "The meeting is on", "max_tokens": 20, "temperature": 1.0, "seed": 6, "n": 4});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        contents(&server.json("/v1/completions", &body, 200))
    };
    for text in complete(json!({"structured_outputs": {"regex": regex}})) {
        cases.push(json!({"text": text, "regex": regex}));
    }
    for text in complete(json!({"structured_outputs": {"choice": ["Monday", "Friday afternoon"]}})) {
        cases.push(json!({"text": text, "regex": "Monday|Friday afternoon"}));
    }
    let lark = "start: day \" at \" HOUR\nday: \"noon\" | \"dawn\"\nHOUR: /[0-9]{1,2}h/\n";
    for text in complete(json!({"structured_outputs": {"grammar": lark}})) {
        cases.push(json!({"text": text, "regex": "(noon|dawn) at [0-9]{1,2}h"}));
    }
    assert!(cases.len() >= 40, "{}", cases.len());
    validate(&cases);
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
         "parameters": {"type": "object", "properties": {
             "city": {"type": "string", "maxLength": 40},
             "unit": {"enum": ["celsius", "fahrenheit"]},
             "days": {"type": "integer", "minimum": 1, "maximum": 7}},
             "required": ["city", "unit", "days"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "book_table", "description": "Book a restaurant table",
         "parameters": {"type": "object", "properties": {
             "restaurant": {"type": "string", "maxLength": 40},
             "people": {"type": "integer", "minimum": 1, "maximum": 12},
             "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}},
             "required": ["restaurant", "people", "time"], "additionalProperties": false}}}
    ])
}

#[test]
fn forced_tool_calls_follow_their_function_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let tools = tools();
    let schema_of = |name: &str| {
        tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == name).unwrap()["function"]["parameters"]
            .clone()
    };
    let mut cases = Vec::new();
    let mut named = 0;
    // Sampled calls one per reply (a sampled small model may go on calling until its budget
    // ends), and greedy parallel calls.
    let choices = [json!("required"), json!({"type": "function", "function": {"name": "book_table"}})];
    let runs = choices.iter().flat_map(|c| {
        [
            (c, json!({"temperature": 1.0, "seed": 1, "n": 3, "parallel_tool_calls": false})),
            (c, json!({"temperature": 1.0, "seed": 2, "n": 3, "parallel_tool_calls": false})),
            (c, json!({"temperature": 0})),
        ]
    });
    for (choice, sampling) in runs {
        let mut body = chat(
            "qwen",
            "Weather in Oslo for three days, then a table for four at Luigi's at 19:30.",
            json!({"tools": tools, "tool_choice": choice, "max_tokens": 200}),
        );
        body.as_object_mut().unwrap().extend(sampling.as_object().unwrap().clone());
        let reply = server.json("/v1/chat/completions", &body, 200);
        for c in reply["choices"].as_array().unwrap() {
            assert_eq!(c["finish_reason"], "tool_calls", "{c}");
            let calls = c["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("no calls: {c}"));
            for call in calls {
                let name = call["function"]["name"].as_str().unwrap();
                if choice.is_object() {
                    assert_eq!(name, "book_table", "{c}");
                    named += 1;
                }
                let text = call["function"]["arguments"].as_str().unwrap().to_string();
                cases.push(json!({"text": text, "schema": schema_of(name)}));
            }
        }
    }
    assert!(named >= 7 && cases.len() >= 14, "{named} named, {} calls", cases.len());
    validate(&cases);
}

#[test]
fn malformed_formats_are_one_400_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let schema = json!({"type": "object"});
    for (extra, param, says) in [
        (json!({"response_format": {"type": "xml"}}), "response_format", "must be"),
        (json!({"response_format": {"type": "json_schema"}}), "response_format", "json_schema"),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}}),
            "response_format",
            "JSON Schema",
        ),
        (json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}), "structured_outputs", "exactly one"),
        (json!({"structured_outputs": {"choice": []}}), "structured_outputs", "non-empty"),
        (
            json!({"json_schema": schema, "response_format": {"type": "json_object"}}),
            "json_schema",
            "one output format",
        ),
    ] {
        let e = server.json("/v1/chat/completions", &chat("qwen", "Hi", extra.clone()), 400);
        assert_eq!(e["error"]["param"], param, "{extra}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(says), "{extra}: {e}");
    }
    // A schema or grammar the grammar library refuses: the request fails, the server goes on.
    for extra in [
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(["}}}}),
        json!({"structured_outputs": {"grammar": "start: missing_rule"}}),
    ] {
        let e = server.json("/v1/chat/completions", &chat("qwen", "Hi", extra.clone()), 400);
        assert!(e["error"]["message"].as_str().unwrap().contains("does not compile"), "{extra}: {e}");
    }
    let ok = server.json("/v1/chat/completions", &chat("qwen", "Hi", json!({"max_tokens": 4})), 200);
    assert_eq!(ok["object"], "chat.completion");
}
