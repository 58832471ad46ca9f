//! The chat-template contract: a conversation rendered as the prompt text a model was trained on.
//! The text runtime renders checkpoints' Jinja templates; a plugin may bring its own format.

use crate::text::types::Message;
use crate::Result;

pub trait ChatTemplate: Send + Sync {
    /// The prompt text for `messages`, ending with the assistant's turn opener when
    /// `add_generation_prompt`.
    fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String>;
}
