//! The chat-template contract: a conversation rendered as the prompt text a model was trained on.
//! The text runtime renders checkpoints' Jinja templates; a plugin may bring its own format.

use crate::text::conversation::Conversation;
use crate::text::types::Message;
use crate::{Error, Result};

pub trait ChatTemplate: Send + Sync {
    /// The prompt text for `messages`, ending with the assistant's turn opener when
    /// `add_generation_prompt`.
    fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String>;

    /// [`ChatTemplate::render`] for a conversation with tools, turn fields or template switches.
    /// A format that knows none of them refuses tools and tool calls rather than drop them, and
    /// renders the rest from each turn's role and content.
    fn render_conversation(&self, conversation: &Conversation, add_generation_prompt: bool) -> Result<String> {
        if conversation.has_tools() {
            return Err(Error::unsupported("this chat format takes no tools or tool calls"));
        }
        self.render(&conversation.messages, add_generation_prompt)
    }
}
