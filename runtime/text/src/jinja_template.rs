//! Chat templates: the checkpoint's own Jinja template rendered with minijinja, with the Python
//! string methods HF templates use (`strip`, `startswith`, ...).

use minijinja::value::{Kwargs, StringInput, Value};
use minijinja::{context, Environment, ErrorKind};

use infer_sdk::text::types::Message;
use infer_sdk::{ChatTemplate, Conversation, Error, Result};

/// Template instructions one render may execute. A template comes with the checkpoint, so a
/// stranger's may loop for ever (`{% for i in range(99999) %}{% for j in range(99999) %}`); this
/// budget stops it within about half a second (measured: 20 million took 1.3 s here) instead of
/// holding a server thread. Real templates use far less: a 1000-message conversation through
/// Qwen2.5-Coder's GGUF template (ChatML with tools) took 31.5 thousand instructions.
const RENDER_FUEL: u64 = 10_000_000;

/// Bytes one render may output. The budget above counts instructions, not bytes: one
/// `{{ 'a' * 100000000 }}` (minijinja's largest string repeat) is a few instructions, so a loop
/// of them asked for gigabytes. A prompt is bounded by a context of at most some 10^6 tokens,
/// a few MiB of text; 64 MiB leaves room for any conversation a request body can carry.
const MAX_RENDER_BYTES: usize = 64 << 20;

/// Widest indentation the `indent` and `tojson` filters may ask for. minijinja 2.24 bounds
/// `'x' * n` but passes these widths straight to `str::repeat`: `indent(10**11)` asked for
/// 100 GB in one allocation, which aborts the process. Real templates indent by 2 to 4.
const MAX_INDENT: usize = 1024;

pub struct JinjaTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate for JinjaTemplate {
    fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        JinjaTemplate::render(self, messages, add_generation_prompt)
    }

    fn render_conversation(&self, conversation: &Conversation, add_generation_prompt: bool) -> Result<String> {
        // The switches first, so that none can replace the conversation's own variables.
        let mut vars = conversation.template_kwargs.clone();
        vars.insert("messages".into(), conversation.message_values().into());
        // Templates test `{% if tools %}`: no tools is no variable, not an empty list.
        if conversation.tools.is_empty() {
            vars.remove("tools");
        } else {
            vars.insert("tools".into(), conversation.tools.clone().into());
        }
        vars.insert("add_generation_prompt".into(), add_generation_prompt.into());
        vars.insert("bos_token".into(), self.bos_token.clone().into());
        vars.insert("eos_token".into(), self.eos_token.clone().into());
        self.render_context(Value::from_serialize(&vars))
    }
}

impl JinjaTemplate {
    pub fn new(source: String, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_fuel(Some(RENDER_FUEL));
        // Hugging Face renders chat templates with these two on; a template written for them
        // puts a block tag on its own line and expects the newline after it gone.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_filter("indent", bounded_indent);
        env.add_filter("tojson", bounded_tojson);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", source)
            .map_err(|e| Error::Tokenizer(format!("chat template does not parse: {e}")))?;
        Ok(JinjaTemplate { env, bos_token: bos_token.into(), eos_token: eos_token.into() })
    }

    /// The prompt text for `messages`, ending with the assistant's turn opener when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_context(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
    }

    fn render_context(&self, ctx: Value) -> Result<String> {
        let tmpl = self.env.get_template("chat").map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut out = CappedOutput(Vec::new());
        tmpl.render_captured_to(ctx, &mut out).map_err(|e| match e.kind() {
            ErrorKind::OutOfFuel => Error::Tokenizer(format!(
                "chat template failed to render: it ran past its budget of {RENDER_FUEL} instructions"
            )),
            ErrorKind::WriteFailure => Error::Tokenizer(format!(
                "chat template failed to render: its output passed {} MiB",
                MAX_RENDER_BYTES >> 20
            )),
            _ => Error::Tokenizer(format!("chat template failed to render: {e}")),
        })?;
        // Whole `str` pieces were written (a piece past the cap is refused, not cut): UTF-8.
        String::from_utf8(out.0).map_err(|e| Error::Tokenizer(format!("chat template output: {e}")))
    }
}

fn too_wide(what: &str, width: usize) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, format!("{what} of {width} is too wide (at most {MAX_INDENT})"))
}

/// minijinja's `indent`, for widths up to [`MAX_INDENT`] and results within the output cap (every
/// line gains `width` bytes).
fn bounded_indent(
    value: StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let w = match width {
        Some(w) => w,
        None => kwargs.peek::<Option<usize>>("width")?.unwrap_or(4),
    };
    let lines = value.as_str().bytes().filter(|&b| b == b'\n').count() + 1;
    if w > MAX_INDENT || lines.saturating_mul(w).saturating_add(value.as_str().len()) > MAX_RENDER_BYTES {
        return Err(too_wide("indent", w));
    }
    minijinja::filters::indent(value, width, first, blank, kwargs)
}

/// `tojson` as Hugging Face templates have it (Python's `json.dumps` with `ensure_ascii=False`,
/// [`crate::py_json`]), for an `indent` up to [`MAX_INDENT`].
fn bounded_tojson(
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent = indent.or(kwargs.get::<Option<Value>>("indent")?).filter(|w| !w.is_none());
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(w) => match usize::try_from(w.clone()) {
            Ok(w) if w > MAX_INDENT => return Err(too_wide("tojson indent", w)),
            Ok(w) => Some(w),
            Err(_) => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson indent `{w}` is not a width"),
                ))
            }
        },
    };
    let json = serde_json::to_value(value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let text = crate::py_json::dumps(&json, indent, sort_keys);
    if text.len() > MAX_RENDER_BYTES {
        return Err(minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: the value is too large"));
    }
    Ok(Value::from_safe_string(text))
}

/// The render's output, refusing any write that would take it past [`MAX_RENDER_BYTES`].
struct CappedOutput(Vec<u8>);

impl std::io::Write for CappedOutput {
    fn write(&mut self, piece: &[u8]) -> std::io::Result<usize> {
        if self.0.len().saturating_add(piece.len()) > MAX_RENDER_BYTES {
            return Err(std::io::Error::other("chat template output too large"));
        }
        self.0.extend_from_slice(piece);
        Ok(piece.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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
        let t = JinjaTemplate::new(src.into(), "", "").unwrap();
        let start = std::time::Instant::now();
        let e = t.render(&conversation(1), true).unwrap_err().to_string();
        assert!(e.contains("budget of 10000000 instructions"), "{e}");
        eprintln!("stopped after {:?}", start.elapsed());
    }

    #[test]
    fn a_long_chat_fits_the_budget() {
        let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}\
                   {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let t = JinjaTemplate::new(src.into(), "", "").unwrap();
        assert!(t.render(&conversation(1000), true).unwrap().ends_with("<|im_start|>assistant\n"));
    }
}
