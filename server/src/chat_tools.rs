//! The chat request as the model's template reads it (tools, tool calls and results, template
//! switches) and what the reply parser must know once the prompt is rendered: the model's
//! tool-call syntax, whether the prompt opened a think block, and the opener a required call
//! starts with.

use infer_core::{Conversation, Message};
use serde_json::{Map, Value};

use crate::assistant_output::{AssistantOutput, ToolSyntax};
use crate::error::ApiError;
use crate::openai::{ChatMessage, ChatRequest, Content};

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    Required,
    Function(String),
}

/// The tools of a request that may call them.
#[derive(Debug, Clone)]
pub struct ToolRequest {
    /// As sent: `{"type": "function", "function": {...}}`, which is what templates render.
    pub tools: Vec<Value>,
    pub names: Vec<String>,
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): false keeps the first call.
    pub parallel: bool,
}

/// How the reply of a chat request is read.
#[derive(Debug, Clone, Default)]
pub struct ReplyFormat {
    pub tools: Option<ToolSyntax>,
    /// The functions the reply may call.
    pub names: Vec<String>,
    /// The prompt ends inside a think block (the template opened it).
    pub in_reasoning: bool,
    /// Appended to the prompt: the start of the call `tool_choice` requires.
    pub opener: Option<String>,
    pub parallel: bool,
}

impl ReplyFormat {
    /// A parser for one choice's reply.
    pub fn parser(&self) -> AssistantOutput {
        match (&self.opener, self.tools) {
            (Some(opener), Some(syntax)) => AssistantOutput::forced(syntax, self.names.clone(), opener),
            _ => AssistantOutput::new(self.tools, self.names.clone(), self.in_reasoning),
        }
        .single_call(!self.parallel)
    }

    /// What `tools` asks of the reply to `prompt` (the rendered text): the syntax the template
    /// asked for, refused when the template left the tools out (a model that was never told of
    /// them cannot call them).
    pub fn of_prompt(prompt: &str, tools: Option<&ToolRequest>, model: &str) -> Result<ReplyFormat, ApiError> {
        let in_reasoning = prompt.trim_end().ends_with("<think>");
        let Some(tools) = tools else {
            return Ok(ReplyFormat { in_reasoning, parallel: true, ..Default::default() });
        };
        let names: Vec<&str> = tools.names.iter().map(String::as_str).collect();
        let syntax = ToolSyntax::of_prompt(prompt, &names).ok_or_else(|| {
            ApiError::unsupported("tools", format!("the chat template of `{model}` does not render tools"))
        })?;
        let opener = match &tools.choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(syntax.call_opener(None)),
            ToolChoice::Function(name) => Some(syntax.call_opener(Some(name))),
        };
        Ok(ReplyFormat {
            tools: Some(syntax),
            names: tools.names.clone(),
            in_reasoning: in_reasoning && opener.is_none(),
            opener,
            parallel: tools.parallel,
        })
    }
}

impl ChatRequest {
    /// The tools the model may call, `None` when it may call none (no tools, or `tool_choice`
    /// "none": the template then renders without them).
    pub fn tool_request(&self) -> Result<Option<ToolRequest>, ApiError> {
        let tools = match &self.tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(tools)) => tools.clone(),
            Some(_) => return Err(ApiError::param("tools", "tools must be an array")),
        };
        let mut names = Vec::with_capacity(tools.len());
        for (i, t) in tools.iter().enumerate() {
            let name = t
                .get("function")
                .filter(|_| t.get("type").and_then(Value::as_str) == Some("function"))
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    ApiError::param(
                        &format!("tools[{i}]"),
                        "a tool is {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}",
                    )
                })?;
            if t["function"].get("parameters").is_some_and(|p| !p.is_object()) {
                return Err(ApiError::param(
                    &format!("tools[{i}].function.parameters"),
                    "parameters must be a JSON Schema object",
                ));
            }
            names.push(name.to_string());
        }
        let choice = match &self.tool_choice {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => return Ok(None),
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ApiError::param(
                        "tool_choice",
                        format!("tool_choice must be \"none\", \"auto\", \"required\" or a function, got \"{other}\""),
                    ))
                }
            },
            Some(v) => {
                let name = v["function"]["name"].as_str().filter(|_| v["type"] == "function").ok_or_else(|| {
                    ApiError::param(
                        "tool_choice",
                        "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    )
                })?;
                if !names.iter().any(|n| n == name) {
                    return Err(ApiError::param(
                        "tool_choice",
                        format!("tool_choice names `{name}`, which is not in tools"),
                    ));
                }
                ToolChoice::Function(name.to_string())
            }
        };
        if tools.is_empty() {
            return match choice {
                ToolChoice::Auto => Ok(None),
                _ => Err(ApiError::param("tool_choice", "tool_choice requires a call but tools is empty")),
            };
        }
        Ok(Some(ToolRequest { tools, names, choice, parallel: self.parallel_tool_calls.unwrap_or(true) }))
    }

    /// The conversation to render: every message with its tool calls, tool result ids and
    /// reasoning, the tools when the model may call them, and `chat_template_kwargs`.
    pub fn conversation(&self, tools: Option<&ToolRequest>) -> Result<Conversation, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::param("messages", "messages must not be empty"));
        }
        let mut conversation = Conversation {
            tools: tools.map(|t| t.tools.clone()).unwrap_or_default(),
            template_kwargs: self.chat_template_kwargs.clone().unwrap_or_default(),
            ..Default::default()
        };
        for (i, m) in self.messages.iter().enumerate() {
            // "developer" is the newer name of the system role.
            let role = if m.role == "developer" { "system" } else { m.role.as_str() };
            conversation.messages.push(Message::new(role, content_text(i, m)?));
            conversation.fields.push(turn_fields(i, m)?);
        }
        Ok(conversation)
    }
}

fn content_text(i: usize, m: &ChatMessage) -> Result<String, ApiError> {
    Ok(match &m.content {
        None => String::new(),
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(parts)) => {
            let mut text = String::new();
            for p in parts {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::unsupported(
                            &format!("messages[{i}].content"),
                            format!("content parts of type `{kind}` are not supported (text only)"),
                        ))
                    }
                }
            }
            text
        }
    })
}

/// A message's fields besides role and content, in the shapes templates read: tool calls with
/// their arguments as JSON objects (the API sends them as JSON text; templates write them with
/// `tojson`), a tool result's `tool_call_id` and `name`, an assistant turn's `reasoning_content`.
fn turn_fields(i: usize, m: &ChatMessage) -> Result<Map<String, Value>, ApiError> {
    let mut fields = Map::new();
    if let Some(calls) = m.tool_calls.as_ref().filter(|c| !c.is_null()) {
        let param = format!("messages[{i}].tool_calls");
        let calls = calls.as_array().ok_or_else(|| ApiError::param(&param, "tool_calls must be an array"))?;
        let mut out = Vec::with_capacity(calls.len());
        for (j, c) in calls.iter().enumerate() {
            let f = &c["function"];
            let name = f["name"].as_str().filter(|n| !n.is_empty()).ok_or_else(|| {
                ApiError::param(
                    &format!("{param}[{j}]"),
                    "a tool call is {\"type\": \"function\", \"function\": {\"name\": ..., \"arguments\": ...}}",
                )
            })?;
            let arguments = match &f["arguments"] {
                Value::String(s) => serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.clone())),
                Value::Null => Value::Object(Map::new()),
                other => other.clone(),
            };
            let mut call = Map::new();
            if let Some(id) = c.get("id").filter(|id| id.is_string()) {
                call.insert("id".into(), id.clone());
            }
            call.insert("type".into(), "function".into());
            call.insert("function".into(), serde_json::json!({ "name": name, "arguments": arguments }));
            out.push(Value::Object(call));
        }
        fields.insert("tool_calls".into(), out.into());
    }
    for (key, value) in
        [("tool_call_id", &m.tool_call_id), ("name", &m.name), ("reasoning_content", &m.reasoning_content)]
    {
        if let Some(v) = value {
            fields.insert(key.into(), v.clone().into());
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(v: Value) -> ChatRequest {
        let mut v = v;
        if v.get("messages").is_none() {
            v["messages"] = json!([{"role": "user", "content": "hi"}]);
        }
        serde_json::from_value(v).unwrap()
    }

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])
    }

    #[test]
    fn tool_choice_is_read_and_checked() {
        let t = request(json!({"tools": weather()})).tool_request().unwrap().unwrap();
        assert_eq!((t.choice, t.parallel, t.names), (ToolChoice::Auto, true, vec!["get_weather".to_string()]));
        assert!(request(json!({"tools": weather(), "tool_choice": "none"})).tool_request().unwrap().is_none());
        assert!(request(json!({})).tool_request().unwrap().is_none());
        assert!(request(json!({"tools": [], "tool_choice": "auto"})).tool_request().unwrap().is_none());
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let t = request(json!({"tools": weather(), "tool_choice": named, "parallel_tool_calls": false}))
            .tool_request()
            .unwrap()
            .unwrap();
        assert_eq!((t.choice, t.parallel), (ToolChoice::Function("get_weather".into()), false));
        for (body, param) in [
            (json!({"tools": weather(), "tool_choice": "always"}), "tool_choice"),
            (
                json!({"tools": weather(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"tools": {"a": 1}}), "tools"),
            (json!({"tools": [{"type": "function", "function": {}}]}), "tools[0]"),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
                "tools[0].function.parameters",
            ),
        ] {
            let e = request(body.clone()).tool_request().unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e}");
        }
    }

    #[test]
    fn turns_carry_their_tool_calls_and_results_as_templates_read_them() {
        let r = request(json!({"messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": null, "reasoning_content": "look it up",
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ], "chat_template_kwargs": {"enable_thinking": false}}));
        let c = r.conversation(None).unwrap();
        assert_eq!(c.messages[0], Message::system("be brief"));
        assert_eq!(c.messages[1].content, "weather?");
        assert_eq!(c.messages[2].content, "");
        assert_eq!(
            Value::Object(c.fields[2].clone()),
            json!({"tool_calls": [{"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
                   "reasoning_content": "look it up"})
        );
        assert_eq!(Value::Object(c.fields[3].clone()), json!({"tool_call_id": "call_1"}));
        assert_eq!(c.template_kwargs["enable_thinking"], false);
        assert!(c.tools.is_empty());
        let bad = request(json!({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}));
        assert_eq!(bad.conversation(None).unwrap_err().param.as_deref(), Some("messages[0].tool_calls[0]"));
    }

    #[test]
    fn the_reply_format_follows_the_prompt() {
        let t = request(json!({"tools": weather(), "tool_choice": "required"})).tool_request().unwrap().unwrap();
        let f = ReplyFormat::of_prompt("tags <tool_call></tool_call>\n<|im_start|>assistant\n", Some(&t), "m").unwrap();
        assert_eq!((f.tools, f.opener.as_deref()), (Some(ToolSyntax::Hermes), Some("{\"name\": \"")));
        let e = ReplyFormat::of_prompt("<start_of_turn>model\n", Some(&t), "gemma").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"));
        let f = ReplyFormat::of_prompt("<|im_start|>assistant\n<think>\n", None, "m").unwrap();
        assert!(f.in_reasoning && f.tools.is_none());
    }
}
