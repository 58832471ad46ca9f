//! A chat request as a template sees it when it is more than roles and contents: the tools the
//! model may call, the fields some turns carry besides their content (an assistant turn's
//! `tool_calls`, a tool result's `tool_call_id` and `name`, a turn's `reasoning_content`), and the
//! template's own switches (Qwen3's `enable_thinking`). The shapes are the Hugging Face chat
//! format's, which is what checkpoints' templates read.

use serde_json::{Map, Value};

use crate::text::types::Message;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    pub messages: Vec<Message>,
    /// Per message (by index; missing entries are empty), its fields besides role and content.
    pub fields: Vec<Map<String, Value>>,
    /// The functions the model may call: `{"type": "function", "function": {name, description,
    /// parameters}}` objects. Empty: the template is rendered without tools.
    pub tools: Vec<Value>,
    /// Variables set for the render, e.g. `enable_thinking`. They never replace the
    /// conversation's own (`messages`, `tools`, `add_generation_prompt`, the special tokens).
    pub template_kwargs: Map<String, Value>,
}

impl Conversation {
    /// Whether it carries tools or tool calls: what a format without tools cannot render (other
    /// fields and switches a format may ignore, as Jinja templates ignore what they do not read).
    pub fn has_tools(&self) -> bool {
        !self.tools.is_empty() || self.fields.iter().any(|f| f.contains_key("tool_calls"))
    }

    /// The messages as the template's `messages` variable: each role and content with its fields.
    pub fn message_values(&self) -> Vec<Value> {
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut v = self.fields.get(i).cloned().unwrap_or_default();
                v.insert("role".into(), m.role.clone().into());
                v.insert("content".into(), m.content.clone().into());
                Value::Object(v)
            })
            .collect()
    }
}

impl From<Vec<Message>> for Conversation {
    fn from(messages: Vec<Message>) -> Self {
        Conversation { messages, ..Default::default() }
    }
}
