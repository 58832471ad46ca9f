//! Chat templates: the checkpoint's own Jinja template rendered with minijinja, with the Python
//! string methods HF templates use (`strip`, `startswith`, ...).

use minijinja::{context, Environment, ErrorKind};

use crate::text::types::Message;
use crate::{Error, Result};

/// Template instructions one render may execute. A template comes with the checkpoint, so a
/// stranger's may loop for ever (`{% for i in range(99999) %}{% for j in range(99999) %}`); this
/// budget stops it within about half a second (measured: 20 million took 1.3 s here) instead of
/// holding a server thread. Real templates use far less: a 1000-message conversation through
/// Qwen2.5-Coder's GGUF template (ChatML with tools) took 31.5 thousand instructions.
const RENDER_FUEL: u64 = 10_000_000;

pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub fn new(source: String, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", source)
            .map_err(|e| Error::Tokenizer(format!("chat template does not parse: {e}")))?;
        Ok(ChatTemplate { env, bos_token: bos_token.into(), eos_token: eos_token.into() })
    }

    /// The prompt text for `messages`, ending with the assistant's turn opener when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let tmpl = self.env.get_template("chat").map_err(|e| Error::Tokenizer(e.to_string()))?;
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
        .map_err(|e| match e.kind() {
            ErrorKind::OutOfFuel => Error::Tokenizer(format!(
                "chat template failed to render: it ran past its budget of {RENDER_FUEL} instructions"
            )),
            _ => Error::Tokenizer(format!("chat template failed to render: {e}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation(n: usize) -> Vec<Message> {
        (0..n).map(|i| Message::new(if i % 2 == 0 { "user" } else { "assistant" }, format!("turn {i}"))).collect()
    }

    #[test]
    fn a_template_that_never_ends_runs_out_of_fuel() {
        let src = "{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(src.into(), "", "").unwrap();
        let start = std::time::Instant::now();
        let e = t.render(&conversation(1), true).unwrap_err().to_string();
        assert!(e.contains("budget of 10000000 instructions"), "{e}");
        eprintln!("stopped after {:?}", start.elapsed());
    }

    #[test]
    fn a_long_chat_fits_the_budget() {
        let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}\
                   {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let t = ChatTemplate::new(src.into(), "", "").unwrap();
        assert!(t.render(&conversation(1000), true).unwrap().ends_with("<|im_start|>assistant\n"));
    }
}
