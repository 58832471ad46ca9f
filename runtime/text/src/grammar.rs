//! Constrained decoding: llguidance compiles a [`Constraint`] against the vocabulary's bytes,
//! and each constrained sequence carries a matcher that, before every draw, masks the ids that
//! cannot continue a match and then advances over the id drawn. The mask depends only on the
//! sequence's own output, so a sequence draws the same whatever else is in its batch.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

use infer_sdk::text::types::Constraint;
use infer_sdk::{Error, Result, TokenBytes, Tokenizer};

/// Whitespace the JSON grammars allow between two tokens: one space, or a line break (two at
/// most) and an indent, as pretty-printed JSON has (llama.cpp's JSON grammars allow the same).
/// Free whitespace would let a sampled small model fill its budget with blank lines.
const JSON_WHITESPACE: &str = r"(\x20|\x0A{1,2}[\x20\x09]{0,20})?";

/// Compiles constraints for one vocabulary (built once per model: the token trie and the
/// mask slicer it holds take a while for a large vocabulary).
pub struct GrammarCompiler {
    factory: ParserFactory,
}

impl GrammarCompiler {
    /// A compiler for `tok`'s ids, masks `width` wide (the logits row, which may be longer than
    /// the vocabulary: those ids are never allowed). The end-of-turn ids are what the grammar
    /// allows once a match is complete.
    pub fn new(tok: &dyn Tokenizer, width: usize) -> Result<Self> {
        let pieces = tok.token_bytes().ok_or_else(|| {
            Error::invalid(
                "this model's tokenizer cannot say which bytes its tokens stand for: its output cannot be constrained",
            )
        })?;
        let width = width.max(pieces.len());
        let mut words: Vec<Vec<u8>> = pieces
            .into_iter()
            .map(|p| match p {
                TokenBytes::Text(b) => b,
                TokenBytes::Special(name) => [&[TokTrie::SPECIAL_TOKEN_MARKER], name.as_bytes()].concat(),
                TokenBytes::Unused => Vec::new(),
            })
            .collect();
        words.resize(width, Vec::new());
        let eos = tok.eos_ids();
        let &first = eos.first().ok_or_else(|| {
            Error::invalid("this model names no end-of-sequence token: a constrained output could never end")
        })?;
        let built = guarded(|| {
            let trie = TokTrie::from(&TokRxInfo::new(width as u32, first), &words).with_eos_tokens(eos);
            let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
            let mut factory = ParserFactory::new_simple(&env)?;
            factory.quiet();
            Ok(factory)
        })?;
        Ok(GrammarCompiler { factory: built })
    }

    /// A fresh matcher for `constraint`; a grammar that does not compile is the caller's error.
    pub fn compile(&self, constraint: &Constraint) -> Result<TokenConstraint> {
        let grammar = match constraint {
            Constraint::JsonSchema(schema) => TopLevelGrammar::from_json_schema(with_bounded_whitespace(schema)?),
            Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Constraint::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        };
        let matcher = guarded(|| Ok(Matcher::new(self.factory.create_parser(grammar))))?;
        if let Some(e) = matcher.get_error() {
            return Err(Error::invalid(format!("the {} does not compile: {}", kind(constraint), one_line(&e))));
        }
        Ok(TokenConstraint { matcher, spent: Duration::ZERO })
    }
}

/// One sequence's position in its constraint.
pub struct TokenConstraint {
    matcher: Matcher,
    /// Time spent in [`TokenConstraint::mask`] and [`TokenConstraint::accept`] so far.
    spent: Duration,
}

impl TokenConstraint {
    /// Sets the logit of every id that cannot continue the match to -inf (and of ids past the
    /// vocabulary). Fails when no id can: the constraint cannot be met from here.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let start = Instant::now();
        let mask = self.matcher.compute_mask().map_err(grammar_error)?;
        if mask.is_zero() {
            return Err(Error::invalid("the constraint allows no token here"));
        }
        // A word of the mask holds 32 ids; a zero word masks 32 logits at once.
        let words = mask.as_slice();
        for (chunk, &word) in logits.chunks_mut(32).zip(words.iter().chain(std::iter::repeat(&0))) {
            if word == u32::MAX {
                continue;
            }
            for (bit, l) in chunk.iter_mut().enumerate() {
                if word & (1 << bit) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        self.spent += start.elapsed();
        Ok(())
    }

    /// Advances over `id` (an id [`TokenConstraint::mask`] allowed); `true` once the match is
    /// complete and nothing can follow it.
    pub fn accept(&mut self, id: u32) -> Result<bool> {
        let start = Instant::now();
        self.matcher.consume_token(id).map_err(grammar_error)?;
        self.spent += start.elapsed();
        Ok(self.matcher.is_stopped())
    }

    /// Time spent masking and advancing so far.
    pub fn spent(&self) -> Duration {
        self.spent
    }
}

fn kind(constraint: &Constraint) -> &'static str {
    match constraint {
        Constraint::JsonSchema(_) => "JSON Schema",
        Constraint::Regex(_) => "regular expression",
        Constraint::Lark(_) => "grammar",
    }
}

/// `schema` as a Lark `%json {...}` value (for grammars that embed JSON Schemas), with the
/// JSON layout [`GrammarCompiler::compile`] gives a schema alone.
pub fn lark_json(schema: &Value) -> Result<String> {
    let schema = match with_bounded_whitespace(schema)? {
        // `%json` takes an object: `true` is the schema that accepts anything.
        Value::Bool(true) => json!({"x-guidance": {"whitespace_pattern": JSON_WHITESPACE}}),
        Value::Bool(false) => return Err(Error::invalid("the JSON Schema `false` accepts nothing")),
        s => s,
    };
    Ok(format!("%json {schema}"))
}

/// A Lark string literal matching `text` exactly (JSON's escapes are Lark's).
pub fn lark_literal(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// `schema` with a bounded whitespace pattern unless it sets its own JSON layout
/// (`x-guidance`, llguidance's options key).
fn with_bounded_whitespace(schema: &Value) -> Result<Value> {
    match schema {
        Value::Object(o) if o.contains_key("x-guidance") => Ok(schema.clone()),
        Value::Object(o) => {
            let mut o = o.clone();
            o.insert("x-guidance".into(), json!({"whitespace_pattern": JSON_WHITESPACE}));
            Ok(Value::Object(o))
        }
        Value::Bool(_) => Ok(schema.clone()),
        _ => Err(Error::invalid("a JSON Schema is an object (or true / false)")),
    }
}

fn grammar_error(e: anyhow::Error) -> Error {
    Error::invalid(format!("constrained decoding: {}", one_line(&e.to_string())))
}

/// The library's multi-line messages (a regex error draws a caret under the pattern) as one
/// line, for CLI errors and API error objects.
fn one_line(message: &str) -> String {
    message.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Runs llguidance code that may panic on input it did not expect (a vocabulary, a grammar):
/// a panic is an error like any other.
fn guarded<T>(f: impl FnOnce() -> anyhow::Result<T>) -> Result<T> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(grammar_error),
        Err(_) => Err(Error::invalid("constrained decoding: the grammar library failed on this input")),
    }
}
