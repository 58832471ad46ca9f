//! An assistant turn's generated text split the way the OpenAI API returns it: `reasoning_content`
//! (a Qwen3-style `<think>…</think>` block at the start), `content`, and `tool_calls` in the
//! model's own syntax (its chat template's): Hermes `<tool_call>{json}</tool_call>` blocks
//! (Qwen2.5, Qwen3), or a reply that is bare JSON calls (Llama 3.x; small Qwen2.5 models write
//! Hermes calls without the tags too). Fed the text as it is generated, it yields each piece as
//! soon as it is certain, holding back only what could still be the start of a tag (a reply
//! opening with `{` is held to its end). A call that does not parse, or names no tool of the
//! request, is given back as content, never dropped.

use serde_json::Value;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";
/// Llama 3.1 may open a JSON tool call with this token.
const PYTHON_TAG: &str = "<|python_tag|>";
/// A Markdown code fence: small models write calls as a fenced JSON block.
const FENCE: &str = "```";

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSyntax {
    /// `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, any number, among text.
    Hermes,
    /// The whole reply is `{"name": …, "parameters": {…}}` (several joined by `;`).
    LlamaJson,
}

impl ToolSyntax {
    /// The syntax a rendered prompt (a template given tools) asks the model for; `None` when the
    /// template left the tools out (their names, as JSON strings, are not in it).
    pub fn of_prompt(prompt: &str, tool_names: &[&str]) -> Option<ToolSyntax> {
        if prompt.contains(CALL_OPEN) {
            Some(ToolSyntax::Hermes)
        } else if tool_names.iter().all(|n| prompt.contains(&Value::String(n.to_string()).to_string())) {
            Some(ToolSyntax::LlamaJson)
        } else {
            None
        }
    }

    /// The text that starts a call (of `name`, when given): appended to the prompt when the
    /// request requires a call. The call's JSON itself, without `<tool_call>`: small models that
    /// write bare calls stop at once after a forced tag (Qwen2.5-Coder 0.5B does), and the JSON
    /// is what every model continues.
    pub fn call_opener(self, name: Option<&str>) -> String {
        let arguments = match self {
            ToolSyntax::Hermes => "arguments",
            ToolSyntax::LlamaJson => "parameters",
        };
        match name {
            None => "{\"name\": \"".into(),
            Some(n) => format!("{{\"name\": {}, \"{arguments}\": ", Value::String(n.into())),
        }
    }
}

/// A piece of the reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
    /// `arguments` is JSON text, as the API carries it.
    ToolCall {
        name: String,
        arguments: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing certain yet: the reply may still open a think block or a bare JSON call.
    Start,
    Reasoning,
    /// Just past `</think>`: the blank lines before the answer are dropped.
    AfterReasoning,
    Content,
    /// Inside `<tool_call>`.
    Call,
    /// A bare JSON reply (Llama): buffered to the end.
    JsonReply,
}

/// The parser of one choice's reply.
pub struct AssistantOutput {
    tools: Option<ToolSyntax>,
    /// The request's functions: a call of any other is not one.
    names: Vec<String>,
    state: State,
    /// Text not yet given out.
    held: String,
    /// `parallel_tool_calls: false`: calls after the first are dropped.
    single_call: bool,
    calls: usize,
}

impl AssistantOutput {
    /// `tools`: the syntax to read calls of the functions `names` in (`None`: the reply is never
    /// a call). `in_reasoning`: the prompt itself opened the think block.
    pub fn new(tools: Option<ToolSyntax>, names: Vec<String>, in_reasoning: bool) -> Self {
        let state = if in_reasoning { State::Reasoning } else { State::Start };
        AssistantOutput { tools, names, state, held: String::new(), single_call: false, calls: 0 }
    }

    /// Starts the reply with text the prompt already holds (a required call's opener, the start
    /// of its JSON): read as output, so the call it opens is parsed whole.
    pub fn forced(tools: ToolSyntax, names: Vec<String>, opener: &str) -> Self {
        AssistantOutput {
            state: State::JsonReply,
            held: opener.to_string(),
            ..AssistantOutput::new(Some(tools), names, false)
        }
    }

    /// Keeps the reply's first call only (`parallel_tool_calls: false`).
    pub fn single_call(mut self, single: bool) -> Self {
        self.single_call = single;
        self
    }

    fn emit_call(&mut self, out: &mut Vec<Piece>, call: Piece) {
        if !(self.single_call && self.calls > 0) {
            out.push(call);
        }
        self.calls += 1;
    }

    /// The pieces that `text`, appended to the reply, makes certain.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out, false) {}
        out
    }

    /// The reply has ended: everything held is given out.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        while self.step(&mut out, true) {}
        let rest = std::mem::take(&mut self.held);
        match self.state {
            State::Reasoning => push_piece(&mut out, Piece::Reasoning(rest)),
            State::Call => match self.parse_call(&rest) {
                // A call whose closing tag never came (the reply hit a stop) still counts.
                Some(call) => self.emit_call(&mut out, call),
                None => push_piece(&mut out, Piece::Content(format!("{CALL_OPEN}{rest}"))),
            },
            State::JsonReply => match self.parse_json_reply(&rest) {
                Some((calls, cut)) => {
                    calls.into_iter().for_each(|c| self.emit_call(&mut out, c));
                    push_piece(&mut out, Piece::Content(cut.to_string()));
                }
                None => push_piece(&mut out, Piece::Content(rest)),
            },
            State::Start | State::AfterReasoning | State::Content => push_piece(&mut out, Piece::Content(rest)),
        }
        out
    }

    /// One move of the state machine over `held`; false when it needs more text.
    fn step(&mut self, out: &mut Vec<Piece>, at_end: bool) -> bool {
        match self.state {
            State::Start => {
                let t = self.held.trim_start();
                if t.is_empty() || (!at_end && could_start(t, &self.openers())) {
                    return false;
                }
                let fenced = match self.tools.map(|_| fenced_json(t)) {
                    Some(None) if !at_end => return false,
                    Some(Some(true)) => true,
                    _ => false,
                };
                if let Some(rest) = t.strip_prefix(THINK_OPEN) {
                    self.held = rest.to_string();
                    self.state = State::Reasoning;
                } else if fenced || (self.tools.is_some() && (t.starts_with('{') || t.starts_with(PYTHON_TAG))) {
                    self.held = t.strip_prefix(PYTHON_TAG).unwrap_or(t).to_string();
                    self.state = State::JsonReply;
                } else {
                    self.state = State::Content;
                }
                true
            }
            State::Reasoning => {
                let (before, found) = split_at_tag(&mut self.held, THINK_CLOSE, at_end);
                push_piece(out, Piece::Reasoning(before));
                if found {
                    self.state = State::AfterReasoning;
                }
                found
            }
            State::AfterReasoning => {
                let t = self.held.trim_start().to_string();
                if t.is_empty() && !at_end {
                    return false;
                }
                let json = self.tools.is_some() && (t.starts_with('{') || t.starts_with(PYTHON_TAG));
                self.held = if json { t.strip_prefix(PYTHON_TAG).unwrap_or(&t).to_string() } else { t };
                self.state = if json { State::JsonReply } else { State::Content };
                true
            }
            State::Content => {
                if self.tools != Some(ToolSyntax::Hermes) {
                    push_piece(out, Piece::Content(std::mem::take(&mut self.held)));
                    return false;
                }
                let (before, found) = split_at_tag(&mut self.held, CALL_OPEN, at_end);
                push_piece(out, Piece::Content(before));
                if found {
                    self.state = State::Call;
                }
                found
            }
            State::Call => {
                let Some(end) = self.held.find(CALL_CLOSE) else { return false };
                let body = self.held[..end].to_string();
                self.held.drain(..end + CALL_CLOSE.len());
                match self.parse_call(&body) {
                    Some(call) => self.emit_call(out, call),
                    None => push_piece(out, Piece::Content(format!("{CALL_OPEN}{body}{CALL_CLOSE}"))),
                }
                self.state = State::Content;
                true
            }
            State::JsonReply => false,
        }
    }

    /// What a reply may open with, in this parser's syntax.
    fn openers(&self) -> Vec<&'static str> {
        let mut v = vec![THINK_OPEN];
        if self.tools.is_some() {
            v.extend([PYTHON_TAG, FENCE]);
        }
        v
    }

    /// `{"name": …, "arguments"|"parameters": {…}}` as a call of one of the request's functions.
    fn call_of(&self, v: &Value) -> Option<Piece> {
        let name = v.get("name")?.as_str()?;
        if !self.names.iter().any(|n| n == name) {
            return None;
        }
        let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
            None => "{}".to_string(),
            // Some models write the arguments as a JSON string: it is passed on as that string.
            Some(Value::String(s)) => s.clone(),
            Some(args @ Value::Object(_)) => args.to_string(),
            Some(_) => return None,
        };
        Some(Piece::ToolCall { name: name.to_string(), arguments })
    }

    fn parse_call(&self, body: &str) -> Option<Piece> {
        self.call_of(&serde_json::from_str::<Value>(body.trim()).ok()?)
    }

    /// A reply of bare JSON calls: one, or several joined by `;`, new lines, Hermes tags (a
    /// model may close the call it was made to start with `</tool_call>`, and open another) or
    /// in JSON code fences. A reply cut off inside a call after complete ones (it reached
    /// its token budget) keeps those; the cut text is returned beside them.
    fn parse_json_reply<'t>(&self, text: &'t str) -> Option<(Vec<Piece>, &'t str)> {
        let mut calls = Vec::new();
        let mut rest = text;
        loop {
            rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
            let tag = [CALL_CLOSE, CALL_OPEN, "```json", FENCE].into_iter().find_map(|t| rest.strip_prefix(t));
            if let Some(r) = tag {
                rest = r;
                continue;
            }
            if rest.is_empty() {
                break;
            }
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            match values.next()? {
                Ok(v) => calls.push(self.call_of(&v)?),
                Err(e) if e.is_eof() && !calls.is_empty() => return Some((calls, rest)),
                Err(_) => return None,
            }
            rest = &rest[values.byte_offset()..];
        }
        (!calls.is_empty()).then_some((calls, ""))
    }
}

/// Whether `t` (a reply's start) opens a JSON code block: ```` ``` ```` or ```` ```json ````, a
/// new line and `{`. `None` while more text is needed to tell.
fn fenced_json(t: &str) -> Option<bool> {
    let Some(after) = t.strip_prefix(FENCE) else { return Some(false) };
    let Some((lang, body)) = after.split_once('\n') else {
        return if "json".starts_with(after.trim_end()) { None } else { Some(false) };
    };
    if !matches!(lang.trim(), "" | "json") {
        return Some(false);
    }
    let body = body.trim_start();
    if body.is_empty() {
        None
    } else {
        Some(body.starts_with('{'))
    }
}

/// Whether `t` is a proper prefix of one of `tags` (more text decides).
fn could_start(t: &str, tags: &[&str]) -> bool {
    tags.iter().any(|tag| t.len() < tag.len() && tag.starts_with(t))
}

/// Takes from `held` the text before `tag` (then drops the tag; true) or, when `tag` is not in
/// it, all but a tail that could be the tag's start (false). At the end nothing is held back.
fn split_at_tag(held: &mut String, tag: &str, at_end: bool) -> (String, bool) {
    if let Some(i) = held.find(tag) {
        let before = held[..i].to_string();
        held.drain(..i + tag.len());
        return (before, true);
    }
    let keep = if at_end { 0 } else { partial_tag_suffix(held, tag) };
    let before = held[..held.len() - keep].to_string();
    held.drain(..held.len() - keep);
    (before, false)
}

/// The length of the longest end of `text` that is a proper prefix of `tag`.
fn partial_tag_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

fn push_piece(out: &mut Vec<Piece>, piece: Piece) {
    match &piece {
        Piece::Content(t) | Piece::Reasoning(t) if t.is_empty() => {}
        _ => out.push(piece),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> Piece {
        Piece::ToolCall { name: name.into(), arguments: arguments.into() }
    }

    /// The pieces of `text` fed at once, merged so that runs of one kind read as one piece.
    fn whole(mut p: AssistantOutput, text: &str) -> Vec<Piece> {
        let mut v = p.push(text);
        v.extend(p.finish());
        merge(v)
    }

    fn merge(v: Vec<Piece>) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        for piece in v {
            match (out.last_mut(), &piece) {
                (Some(Piece::Content(a)), Piece::Content(b)) | (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => {
                    a.push_str(b)
                }
                _ => out.push(piece),
            }
        }
        out
    }

    /// Fed one character at a time, the reply splits exactly as fed whole.
    fn check(make: impl Fn() -> AssistantOutput, text: &str, want: &[Piece]) {
        assert_eq!(whole(make(), text), want, "whole: {text:?}");
        let mut p = make();
        let mut v = Vec::new();
        for c in text.chars() {
            v.extend(p.push(&c.to_string()));
        }
        v.extend(p.finish());
        assert_eq!(merge(v), want, "char by char: {text:?}");
    }

    fn names() -> Vec<String> {
        ["get_weather", "a", "b", "w", "f", "g"].map(String::from).to_vec()
    }

    fn hermes() -> AssistantOutput {
        AssistantOutput::new(Some(ToolSyntax::Hermes), names(), false)
    }

    #[test]
    fn hermes_calls_among_text() {
        check(
            hermes,
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            &[Piece::Content("Let me look.\n".into()), call("get_weather", r#"{"city":"Paris"}"#)],
        );
        check(
            hermes,
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\"}\n</tool_call>",
            &[call("a", "{}"), Piece::Content("\n".into()), call("b", "{}")],
        );
        // Unclosed at the end (a stop string cut it) still parses; broken JSON is content.
        check(hermes, "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}", &[call("a", r#"{"x":1}"#)]);
        // Without parallel calls, the first is the only one.
        let two = "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
        check(|| hermes().single_call(true), two, &[call("a", "{}")]);
        let two = "{\"name\": \"f\"}; {\"name\": \"g\"}";
        check(|| hermes().single_call(true), two, &[call("f", "{}")]);
        check(hermes, "<tool_call>{oops</tool_call> ok", &[Piece::Content("<tool_call>{oops</tool_call> ok".into())]);
        // A `<` that opens no tag is text.
        check(hermes, "a < b <tool", &[Piece::Content("a < b <tool".into())]);
        // Without the tags (small models write that), a reply of calls is calls.
        check(hermes, "{\"name\": \"a\", \"arguments\": {\"x\": [1]}}", &[call("a", r#"{"x":[1]}"#)]);
        // A function the request did not offer is not called: the text stays.
        let unknown = "{\"name\": \"hello\", \"arguments\": {}}";
        check(hermes, unknown, &[Piece::Content(unknown.into())]);
        let tagged = format!("<tool_call>{unknown}</tool_call>");
        check(hermes, &tagged, &[Piece::Content(tagged.clone())]);
        // A call in a JSON code block is a call; other code blocks stream as text.
        let fenced = "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Rome\"}\n}\n```";
        check(hermes, fenced, &[call("get_weather", r#"{"city":"Rome"}"#)]);
        let code = "```python\nprint({1: 2})\n```";
        check(hermes, code, &[Piece::Content(code.into())]);
        let listing = "```\nls -la\n```";
        check(hermes, listing, &[Piece::Content(listing.into())]);
        let mut p = hermes();
        assert_eq!(p.push("```python\nprint"), [Piece::Content("```python\nprint".into())], "streams at once");
    }

    #[test]
    fn reasoning_then_answer() {
        let plain = || AssistantOutput::new(None, Vec::new(), false);
        check(
            plain,
            "<think>\nhmm\n</think>\n\nHi!",
            &[Piece::Reasoning("\nhmm\n".into()), Piece::Content("Hi!".into())],
        );
        check(plain, "No thinking <think> here", &[Piece::Content("No thinking <think> here".into())]);
        check(plain, "<thin", &[Piece::Content("<thin".into())]);
        // Without tools, JSON is content.
        check(plain, "{\"name\": \"a\"}", &[Piece::Content("{\"name\": \"a\"}".into())]);
        // The prompt opened the block.
        let opened = || AssistantOutput::new(None, Vec::new(), true);
        check(opened, "so</think>yes", &[Piece::Reasoning("so".into()), Piece::Content("yes".into())]);
        check(
            hermes,
            "<think>need weather</think>\n<tool_call>{\"name\": \"w\"}</tool_call>",
            &[Piece::Reasoning("need weather".into()), call("w", "{}")],
        );
    }

    #[test]
    fn llama_json_replies() {
        let llama = || AssistantOutput::new(Some(ToolSyntax::LlamaJson), names(), false);
        check(llama, "{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}", &[call("f", r#"{"a":"b"}"#)]);
        check(llama, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", &[call("f", "{}")]);
        check(
            llama,
            "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}",
            &[call("f", "{}"), call("g", "{}")],
        );
        check(llama, "The answer is 4.", &[Piece::Content("The answer is 4.".into())]);
        check(llama, "{not a call}", &[Piece::Content("{not a call}".into())]);
    }

    #[test]
    fn a_forced_opener_is_read_as_the_reply() {
        let opener = ToolSyntax::Hermes.call_opener(Some("get_weather"));
        assert_eq!(opener, r#"{"name": "get_weather", "arguments": "#);
        let p = AssistantOutput::forced(ToolSyntax::Hermes, names(), &opener);
        // A model trained on the tags may close the call with one, and open another.
        let rest = "{\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"a\"}\n</tool_call>";
        assert_eq!(whole(p, rest), [call("get_weather", r#"{"city":"Oslo"}"#), call("a", "{}")]);
        let opener = ToolSyntax::LlamaJson.call_opener(None);
        let p = AssistantOutput::forced(ToolSyntax::LlamaJson, names(), &opener);
        assert_eq!(whole(p, "f\", \"parameters\": {}}"), [call("f", "{}")]);
    }

    #[test]
    fn a_reply_cut_inside_a_later_call_keeps_the_complete_ones() {
        let opener = ToolSyntax::Hermes.call_opener(None);
        let p = AssistantOutput::forced(ToolSyntax::Hermes, names(), &opener);
        let rest = "a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"argu";
        let got = whole(p, rest);
        assert_eq!(got[0], call("a", "{}"));
        assert_eq!(got[1..], [Piece::Content("{\"name\": \"get_weather\", \"argu".into())]);
    }

    #[test]
    fn the_syntax_is_read_from_the_prompt() {
        assert_eq!(
            ToolSyntax::of_prompt("… within <tool_call></tool_call> XML tags", &["f"]),
            Some(ToolSyntax::Hermes)
        );
        let llama = "Given the following functions … {\"name\": \"get_weather\"}";
        assert_eq!(ToolSyntax::of_prompt(llama, &["get_weather"]), Some(ToolSyntax::LlamaJson));
        assert_eq!(ToolSyntax::of_prompt("<start_of_turn>user\nget_weather?", &["get_weather"]), None);
    }
}
