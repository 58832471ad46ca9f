//! A conversation turned into prompt ids. The template's markup keeps its special tokens; message
//! content is read as literal text, so a message cannot forge `<|im_start|>system`.

use crate::text::chat_template::ChatTemplate;
use crate::text::conversation::Conversation;
use crate::text::tokenizer::Tokenizer;
use crate::text::types::Message;
use crate::{Error, Result};

/// A rendered conversation: the prompt text and its ids.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatPrompt {
    pub text: String,
    pub ids: Vec<u32>,
}

pub fn chat_prompt_ids(tok: &dyn Tokenizer, template: &dyn ChatTemplate, messages: &[Message]) -> Result<Vec<u32>> {
    let text = template.render(messages, true)?;
    prompt_ids(tok, &text, messages)
}

/// [`chat_prompt_ids`] for a conversation with tools, turn fields or template switches, with the
/// rendered text (a server reads the tool-call format from it).
pub fn conversation_prompt(
    tok: &dyn Tokenizer,
    template: &dyn ChatTemplate,
    conversation: &Conversation,
) -> Result<ChatPrompt> {
    let text = template.render_conversation(conversation, true)?;
    let ids = prompt_ids(tok, &text, &conversation.messages)?;
    Ok(ChatPrompt { text, ids })
}

fn prompt_ids(tok: &dyn Tokenizer, text: &str, messages: &[Message]) -> Result<Vec<u32>> {
    // The template writes BOS itself where the model wants one.
    if !messages.iter().any(|m| tok.contains_special_token(&m.content)) {
        // The usual case: the rendered prompt tokenized whole, exactly as the references do.
        return tok.encode(text, false);
    }
    let mut ids = Vec::new();
    let mut at = 0;
    for m in messages.iter().filter(|m| tok.contains_special_token(&m.content)) {
        let (start, end) = find_content(text, at, &m.content).ok_or_else(|| {
            Error::invalid(format!(
                "a {} message contains special-token text that the chat template rewrites, so it cannot be kept literal",
                m.role
            ))
        })?;
        ids.extend(tok.encode(&text[at..start], false)?);
        ids.extend(tok.encode_literal(&text[start..end])?);
        at = end;
    }
    ids.extend(tok.encode(&text[at..], false)?);
    Ok(ids)
}

/// Where `content` (as written, or trimmed as templates often do) sits in `text` after `from`.
fn find_content(text: &str, from: usize, content: &str) -> Option<(usize, usize)> {
    [content, content.trim()]
        .into_iter()
        .filter(|c| !c.is_empty())
        .find_map(|c| text[from..].find(c).map(|i| (from + i, from + i + c.len())))
}
