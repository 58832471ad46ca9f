//! Text conventions of the model families in this tree, as data for their plugins'
//! descriptors ([`Architecture`](infer_sdk::plugin::Architecture)): the turn formats used when a
//! checkpoint carries no chat template (as llama.cpp falls back to its built-in formats), the
//! byte-level BPE pre-tokenizers their vocabularies name, and the tokens that end a turn.

use infer_sdk::__private::abi_stable::std_types::RStr;
use infer_sdk::plugin::PreTokenizer;

// The sources hold no stray whitespace (Rust's `\` line continuations), so no tag needs `-`;
// the `\n` escapes are the formats' own newlines.

/// Gemma's turns: `assistant` is `model`, a system message is folded into the first user turn.
pub const GEMMA_TURNS: &str = "{{ bos_token }}\
{% if messages and messages[0]['role'] == 'system' %}\
{% set first_user_prefix = messages[0]['content'] ~ '\\n\\n' %}{% set loop_messages = messages[1:] %}\
{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}\
{% for message in loop_messages %}\
<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n\
{{ first_user_prefix if loop.first else '' }}{{ message['content'] | trim }}<end_of_turn>\n\
{% endfor %}\
{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/// ChatML, Qwen's format.
pub const CHATML: &str = "{% for message in messages %}\
<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n\
{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Llama 3's headers.
pub const LLAMA3_HEADERS: &str = "{{ bos_token }}\
{% for message in messages %}\
<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>\
{% endfor %}\
{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

/// Qwen2's split regex (`tokenizer.ggml.pre = qwen2`, `Qwen2Tokenizer`).
pub const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's split regex (`tokenizer.ggml.pre = llama-bpe`).
pub const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizers llama.cpp's GGUF vocabularies of these families name, and the
/// `tokenizer_class` of Qwen's vocab.json + merges.txt checkpoints. Others split as GPT-2.
pub const PRE_TOKENIZERS: &[PreTokenizer] = &[
    PreTokenizer::new("qwen2", QWEN2_PATTERN, true),
    PreTokenizer::new("deepseek-llm", QWEN2_PATTERN, true),
    PreTokenizer::new("llama-bpe", LLAMA3_PATTERN, false),
    PreTokenizer::new("llama3", LLAMA3_PATTERN, false),
    PreTokenizer::new("smaug-bpe", LLAMA3_PATTERN, false),
    PreTokenizer::new("Qwen2", QWEN2_PATTERN, true),
];

/// Tokens that end a turn in the chat formats llama.cpp knows, stopped on when a GGUF
/// vocabulary has them.
pub const END_OF_TURN: &[RStr<'static>] =
    infer_sdk::rstrs!["<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end|>"];

#[cfg(test)]
mod tests {
    use super::{CHATML, GEMMA_TURNS, LLAMA3_HEADERS};
    use infer_sdk::Message;
    use infer_text::JinjaTemplate;

    fn render(source: &str, messages: &[Message]) -> String {
        JinjaTemplate::new(source.to_string(), "<bos>", "<eos>").unwrap().render(messages, true).unwrap()
    }

    #[test]
    fn formats_render_as_published() {
        let msgs =
            [Message::system("Be brief."), Message::user(" Hi "), Message::assistant("Hello."), Message::user("Bye")];
        assert_eq!(
            render(GEMMA_TURNS, &msgs),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(render(CHATML, &msgs[1..2]), "<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(
            render(LLAMA3_HEADERS, &msgs[..2]),
            "<bos><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }
}
