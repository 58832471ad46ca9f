//! What a request's output must match, as one [`Constraint`] for the engine: the answer's
//! format (`response_format`, or vLLM's `structured_outputs`) and the tool calls the model may
//! make, whose arguments follow each function's JSON Schema.
//!
//! - a forced call (`tool_choice` "required" or a function): the prompt ends with the call's
//!   opener; the grammar continues it with a listed name and that function's arguments;
//! - tools the model may call (`auto`) and an answer format: either an answer in that format or
//!   calls with valid arguments;
//! - an answer format alone: that format.

use infer_core::text::grammar::{lark_json, lark_literal};
use infer_core::Constraint;
use serde_json::{json, Value};

use crate::assistant_output::ToolSyntax;
use crate::chat_tools::{ReplyFormat, ToolChoice, ToolRequest};
use crate::error::ApiError;

/// The answer format a request asks for: `response_format` (OpenAI: `text`, `json_object`,
/// `json_schema`) or `structured_outputs` (vLLM: `json`, `regex`, `choice`, `grammar` in Lark).
pub fn answer_format(
    response_format: Option<&Value>,
    structured_outputs: Option<&Value>,
) -> Result<Option<Constraint>, ApiError> {
    let from_response_format = match response_format {
        None | Some(Value::Null) => None,
        Some(f) => response_format_constraint(f)?,
    };
    let from_structured = match structured_outputs {
        None | Some(Value::Null) => None,
        Some(s) => Some(structured_outputs_constraint(s)?),
    };
    match (from_response_format, from_structured) {
        (Some(_), Some(_)) => {
            Err(ApiError::param("structured_outputs", "give response_format or structured_outputs, not both"))
        }
        (a, b) => Ok(a.or(b)),
    }
}

fn response_format_constraint(f: &Value) -> Result<Option<Constraint>, ApiError> {
    let bad = |why: &str| ApiError::param("response_format", why);
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        // llama-server's form carries a schema beside the type.
        Some("json_object") => {
            Ok(Some(Constraint::JsonSchema(f.get("schema").cloned().unwrap_or_else(|| json!({"type": "object"})))))
        }
        Some("json_schema") => {
            let spec = f.get("json_schema").filter(|s| s.is_object()).ok_or_else(|| {
                bad("response_format json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": {...}}}")
            })?;
            let schema = spec.get("schema").cloned().unwrap_or_else(|| json!({}));
            if !schema.is_object() && !schema.is_boolean() {
                return Err(bad("response_format.json_schema.schema must be a JSON Schema object"));
            }
            Ok(Some(Constraint::JsonSchema(schema)))
        }
        Some(other) => Err(bad(&format!(
            "response_format type must be \"text\", \"json_object\" or \"json_schema\", got \"{other}\""
        ))),
        None => Err(bad("response_format needs a \"type\"")),
    }
}

fn structured_outputs_constraint(s: &Value) -> Result<Constraint, ApiError> {
    let bad = |why: &str| ApiError::param("structured_outputs", why);
    let o = s.as_object().ok_or_else(|| bad("structured_outputs must be an object"))?;
    let given: Vec<&str> = ["json", "regex", "choice", "grammar"]
        .into_iter()
        .filter(|k| o.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    let [kind] = given[..] else {
        return Err(bad("structured_outputs takes exactly one of json, regex, choice and grammar"));
    };
    let v = &o[kind];
    match kind {
        "json" => match v {
            // vLLM accepts the schema as JSON text too.
            Value::String(text) => serde_json::from_str(text)
                .map(Constraint::JsonSchema)
                .map_err(|e| bad(&format!("structured_outputs.json is not JSON: {e}"))),
            schema => Ok(Constraint::JsonSchema(schema.clone())),
        },
        "regex" => v.as_str().map(|r| Constraint::Regex(r.to_string())).ok_or_else(|| bad("regex must be a string")),
        "grammar" => {
            v.as_str().map(|g| Constraint::Lark(g.to_string())).ok_or_else(|| bad("grammar must be a string (Lark)"))
        }
        _ => {
            let choices: Vec<&str> = v.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if choices.is_empty() || v.as_array().is_some_and(|a| a.len() != choices.len()) {
                return Err(bad("choice must be a non-empty array of strings"));
            }
            let alternatives: Vec<String> = choices.iter().map(|c| lark_literal(c)).collect();
            Ok(Constraint::Lark(format!("start: {}", alternatives.join(" | "))))
        }
    }
}

/// The constraint of a chat reply: `answer` (the answer format, if any) combined with the
/// calls `tools` allow, read as `format` (the template's syntax, the forced opener).
pub fn chat_constraint(
    answer: Option<Constraint>,
    tools: Option<&ToolRequest>,
    format: &ReplyFormat,
) -> Result<Option<Constraint>, ApiError> {
    let (Some(tools), Some(syntax)) = (tools, format.tools) else { return Ok(answer) };
    let calls = Calls::new(tools, syntax)?;
    let lark = match (&tools.choice, &answer) {
        (ToolChoice::Function(name), _) => calls.after_named_opener(name, format.parallel),
        (ToolChoice::Required, _) => calls.after_opener(format.parallel),
        (ToolChoice::Auto, None) => return Ok(None),
        (ToolChoice::Auto, Some(answer)) => calls.or_answer(answer, format.parallel)?,
    };
    Ok(Some(Constraint::Lark(lark)))
}

/// Lark rules for the calls of one request's tools.
struct Calls {
    syntax: ToolSyntax,
    /// Per tool: its name and the `%json` of its parameters.
    tools: Vec<(String, String)>,
}

impl Calls {
    fn new(tools: &ToolRequest, syntax: ToolSyntax) -> Result<Calls, ApiError> {
        let mut rules = Vec::with_capacity(tools.names.len());
        for (i, (name, tool)) in tools.names.iter().zip(&tools.tools).enumerate() {
            let params = tool["function"].get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}));
            let params = lark_json(&params)
                .map_err(|e| ApiError::param(&format!("tools[{i}].function.parameters"), e.to_string()))?;
            rules.push((name.clone(), params));
        }
        Ok(Calls { syntax, tools: rules })
    }

    fn arguments_key(&self) -> &'static str {
        match self.syntax {
            ToolSyntax::Hermes => "arguments",
            ToolSyntax::LlamaJson => "parameters",
        }
    }

    /// `args_i: %json {...}` for every tool, and `call: call_0 | call_1 ...` where `call_i` is
    /// tool i's whole JSON call.
    fn rules(&self) -> String {
        let mut out = String::new();
        for (i, (name, params)) in self.tools.iter().enumerate() {
            let head = format!("{{\"name\": {}, \"{}\": ", Value::String(name.clone()), self.arguments_key());
            out.push_str(&format!("args_{i}: {params}\ncall_{i}: {} args_{i} \"}}\"\n", lark_literal(&head)));
        }
        let all: Vec<String> = (0..self.tools.len()).map(|i| format!("call_{i}")).collect();
        out.push_str(&format!("call: {}\n", all.join(" | ")));
        out
    }

    /// After `{"name": "`: a listed name, the rest of its call, then optionally the closing
    /// tag and (with `parallel`) further tagged calls.
    fn after_opener(&self, parallel: bool) -> String {
        let mut out = self.rules();
        let rests: Vec<String> = self
            .tools
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let rest = format!("{}\", \"{}\": ", json_string_body(name), self.arguments_key());
                format!("{} args_{i} \"}}\"", lark_literal(&rest))
            })
            .collect();
        out.push_str(&format!("first: {}\n", rests.join(" | ")));
        out.push_str(&self.start_after_first(parallel));
        out
    }

    /// After `{"name": "NAME", "arguments": `: that function's arguments and the closing brace.
    fn after_named_opener(&self, name: &str, parallel: bool) -> String {
        let mut out = self.rules();
        let i = self.tools.iter().position(|(n, _)| n == name).unwrap_or(0);
        out.push_str(&format!("first: args_{i} \"}}\"\n"));
        out.push_str(&self.start_after_first(parallel));
        out
    }

    fn start_after_first(&self, parallel: bool) -> String {
        match (self.syntax, parallel) {
            // Only Hermes has a syntax for several calls: each in its tags.
            (ToolSyntax::Hermes, true) => concat!(
                "more: \"\\n<tool_call>\\n\" call \"\\n</tool_call>\"\n",
                "start: first (\"\\n</tool_call>\" more*)?\n"
            )
            .to_string(),
            (ToolSyntax::Hermes, false) => "start: first \"\\n</tool_call>\"?\n".to_string(),
            (ToolSyntax::LlamaJson, _) => "start: first\n".to_string(),
        }
    }

    /// An answer in `answer`'s format, or calls.
    fn or_answer(&self, answer: &Constraint, parallel: bool) -> Result<String, ApiError> {
        let mut out = self.rules();
        let answer = match answer {
            Constraint::JsonSchema(schema) => {
                lark_json(schema).map_err(|e| ApiError::param("response_format", e.to_string()))?
            }
            _ => {
                return Err(ApiError::unsupported(
                    "structured_outputs",
                    "with tools the model may call, only a JSON answer format can be combined",
                ))
            }
        };
        out.push_str(&format!("answer: {answer}\n"));
        let calls = match self.syntax {
            ToolSyntax::Hermes => {
                let tagged = "\"<tool_call>\\n\" call \"\\n</tool_call>\"";
                let repeat = if parallel { format!("({tagged} \"\\n\")* {tagged}") } else { tagged.to_string() };
                format!("{repeat} | call")
            }
            ToolSyntax::LlamaJson => "call".to_string(),
        };
        out.push_str(&format!("start: answer | {calls}\n"));
        Ok(out)
    }
}

/// `text` as it appears between the quotes of a JSON string.
fn json_string_body(text: &str) -> String {
    let quoted = Value::String(text.to_string()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}
