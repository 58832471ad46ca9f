//! A checkpoint's Jinja chat template (`ChatTemplate`, minijinja on an instruction budget)
//! rendered with fuzzed messages: every template must render or fail with an error, within
//! its budget and without exhausting memory. Input: a flag byte (bit 0: add the generation
//! prompt), then NUL-separated fields: the template, the BOS and EOS tokens, then role and
//! content pairs.
#![no_main]

use infer_core::text::chat_template::JinjaTemplate;
use infer_core::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let mut fields = rest.split(|&b| b == 0).map(|f| String::from_utf8_lossy(f).into_owned());
    let source = fields.next().unwrap_or_default();
    let bos = fields.next().unwrap_or_default();
    let eos = fields.next().unwrap_or_default();
    let fields: Vec<String> = fields.collect();
    let messages: Vec<Message> =
        fields.chunks(2).map(|p| Message::new(&p[0], p.get(1).cloned().unwrap_or_default())).collect();
    let Ok(template) = JinjaTemplate::new(source, &bos, &eos) else { return };
    let _ = template.render(&messages, flags & 1 == 1);
});
