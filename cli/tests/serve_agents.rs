//! `infer serve` driven by real clients as their users use them (cli/tests/serve_agents.py, in
//! the venv of tools/serve/setup_openai_venv.sh: `openai` 3.51.0 and `openai-agents` 0.24.0 from
//! PyPI), on the real Qwen2.5-Coder 0.5B Instruct GGUF, greedy:
//! - the official `openai` client's tool-calling round trip, not streamed and streamed: the model
//!   calls get_weather with a city (finish_reason "tool_calls"; streamed, the `delta.tool_calls`
//!   chunks assemble to the same call), the call and a `tool` message with its result go back,
//!   and the model answers from that result. The answer is asked for with `tool_choice: "none"`:
//!   offered the tool again, this 0.5B model calls it again rather than read its result;
//! - the OpenAI Agents SDK: an `Agent` with a `@function_tool`, on `OpenAIChatCompletionsModel`
//!   pointed at the server, run by `Runner.run` and `Runner.run_streamed`: the tool runs with the
//!   model's arguments and the run ends with a message. The first turn is forced with
//!   `tool_choice: "required"` (a small model may answer from its own knowledge); the runner's
//!   default `reset_tool_choice` leaves the next turn `auto`, so the model answers (this one, with
//!   the tool still offered, answers by echoing the call and the tool's JSON result as text);
//! - structured output through `client.chat.completions.parse(response_format=PydanticModel)`
//!   (`response_format` `json_schema`, enforced by constrained decoding): the parsed object.

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use infer_tests::cli::stderr;
use infer_tests::serve::{client_python, start_serve};
use infer_tests::{real_model, repo_root};
use serde_json::{json, Value};

const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// `infer serve` of Qwen as `qwen`; killed on drop.
struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start() -> Server {
        let model = real_model(QWEN);
        let started = start_serve(
            env!("CARGO_BIN_EXE_infer"),
            &["--model", model.to_str().unwrap(), "--alias", "qwen"],
            &[],
            Duration::from_secs(180),
        );
        Server { child: started.child, base: format!("http://{}/v1", started.addr), log: started.log }
    }

    /// What serve_agents.py printed for `case`.
    fn client(&self, case: &str) -> Value {
        let o = Command::new(client_python())
            .arg(repo_root().join("cli/tests/serve_agents.py"))
            .args([&self.base, "qwen", case])
            .output()
            .expect("run the python client");
        assert!(o.status.success(), "client {case} failed: {}\nserver log:\n{}", stderr(&o), self.log.lock().unwrap());
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("client {case} printed no JSON: {e}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A round trip's one call of get_weather for Paris, and its answer from the tool's result.
fn check_round_trip(got: &Value) {
    assert_eq!(got["finish_reason"], "tool_calls", "{got}");
    let calls = got["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{got}");
    let call = &calls[0];
    assert!(call["id"].as_str().is_some_and(|id| id.starts_with("call")), "{got}");
    assert_eq!(call["type"], "function", "{got}");
    assert_eq!(call["name"], "get_weather", "{got}");
    assert_eq!(call["arguments"]["city"], "Paris", "{got}");
    assert_eq!(got["final_finish_reason"], "stop", "{got}");
    assert_eq!(got["final_calls"], 0, "{got}");
    // The tool's result (18 degrees, sunny) is what the answer says.
    let answer = got["final_content"].as_str().unwrap_or_default();
    assert!(answer.contains("18"), "{got}");
}

#[test]
fn openai_client_tool_round_trip_streamed_and_not() {
    let server = Server::start();
    let plain = server.client("tools");
    check_round_trip(&plain);
    assert_eq!(plain["role"], "assistant", "{plain}");
    assert_eq!(plain["content"], Value::Null, "{plain}");

    let streamed = server.client("tools_stream");
    check_round_trip(&streamed);
    assert_eq!(streamed["content"], "", "{streamed}");
    assert!(streamed["tool_chunks"].as_u64().unwrap() >= 1, "{streamed}");
    // Streamed or not, the same call (ids are fresh per request) and the same answer.
    for field in ["name", "arguments_text", "arguments"] {
        assert_eq!(streamed["calls"][0][field], plain["calls"][0][field], "{field}: {streamed}\n{plain}");
    }
    assert_eq!(streamed["final_content"], plain["final_content"]);
}

#[test]
fn openai_agents_sdk_runs_the_tool_and_answers() {
    let server = Server::start();
    let run = server.client("agent");
    // The tool function ran, with the model's arguments.
    assert_eq!(run["ran"], json!([{"city": "Paris"}]), "{run}");
    assert_eq!(run["items"], json!(["ToolCallItem", "ToolCallOutputItem", "MessageOutputItem"]), "{run}");
    let answer = run["final_output"].as_str().unwrap_or_default();
    assert!(answer.contains("18"), "{run}");

    let streamed = server.client("agent_stream");
    assert_eq!(streamed["ran"], run["ran"], "{streamed}");
    assert_eq!(streamed["items"], run["items"], "{streamed}");
    assert_eq!(streamed["events"], json!(["tool_called", "tool_output", "message_output_created"]), "{streamed}");
    assert_eq!(streamed["final_output"], run["final_output"], "{streamed}");
}

#[test]
fn openai_client_parses_structured_output() {
    let server = Server::start();
    let got = server.client("parse");
    assert_eq!(got["finish_reason"], "stop", "{got}");
    assert_eq!(got["refusal"], Value::Null, "{got}");
    assert_eq!(got["parsed"], json!({"city": "Paris", "temperature_celsius": 18, "sunny": true}), "{got}");
}
