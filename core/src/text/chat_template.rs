//! Chat templates: the checkpoint's own Jinja template rendered with minijinja, with the Python
//! string methods HF templates use (`strip`, `startswith`, ...).

use minijinja::{context, Environment, ErrorKind};

use crate::text::types::Message;
use crate::{Error, Result};

pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub fn new(source: String, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
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
        .map_err(|e| Error::Tokenizer(format!("chat template failed to render: {e}")))
    }
}
