//! Constrained decoding (`GenerateConfig::constraint`) on real vocabularies: the real Gemma 3
//! (SentencePiece) and Qwen2.5 (byte-level BPE from GGUF) models and the tiny fixtures
//! (`tokenizer.json`), on every backend.
//! - each id's bytes (what the grammar matches) are what decoding writes;
//! - sampled output, not only greedy, always matches its regex, JSON Schema or Lark grammar,
//!   even from a random tiny model, and ends once the match is complete;
//! - a constrained sequence gives the same ids alone, in a continuous batch beside
//!   unconstrained ones, and in `batch_generate`;
//! - a constraint that does not compile, or that nothing can meet, is one clear error.

use infer_core::{Constraint, FinishReason, GenerateConfig, LoadConfig, SeqEvent, TextModel, TokenBytes};
use infer_tests::{fixture, real_model, Setup};
use serde_json::{json, Value};

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
/// Tiny random checkpoints with Qwen3's, Gemma 3's and Llama 3's `tokenizer.json`.
const TINY: [&str; 3] = ["qwen3/gqa", "gemma3/base", "llama3/plain"];

fn load(setup: Setup, path: &std::path::Path) -> Box<dyn TextModel> {
    let cfg = LoadConfig { backend: Some(setup.backend().into()), ..LoadConfig::default() };
    setup.registry().unwrap().load_model(path, &cfg).unwrap_or_else(|e| panic!("{setup:?} {}: {e}", path.display()))
}

fn sampled(seed: u64, max_tokens: usize, constraint: Constraint) -> GenerateConfig {
    GenerateConfig {
        max_tokens,
        temperature: 1.0,
        seed: Some(seed),
        constraint: Some(constraint),
        ..Default::default()
    }
}

/// The ids and text of one generation.
fn run(model: &dyn TextModel, prompt: &str, cfg: &GenerateConfig) -> (Vec<u32>, String) {
    let mut ids = Vec::new();
    let mut text = String::new();
    for t in model.generate(prompt, cfg).unwrap() {
        let t = t.unwrap();
        ids.push(t.id);
        text.push_str(&t.text);
    }
    (ids, text)
}

#[test]
fn token_bytes_spell_what_decoding_writes() {
    let setup = Setup::CandleBuiltIn;
    let paths: Vec<_> =
        [real_model(GEMMA), real_model(QWEN)].into_iter().chain(TINY.iter().map(|t| fixture(t))).collect();
    for path in paths {
        let model = load(setup, &path);
        let tok = model.tokenizer();
        let bytes = tok.token_bytes().unwrap_or_else(|| panic!("{}: no token bytes", path.display()));
        assert!(bytes.len() >= tok.vocab_size(), "{}: {} of {} ids", path.display(), bytes.len(), tok.vocab_size());
        let (mut text, mut special) = (0, 0);
        for (id, b) in bytes.iter().enumerate() {
            let id = id as u32;
            match b {
                TokenBytes::Text(b) => {
                    text += 1;
                    // Whole characters only: a byte piece decodes to U+FFFD alone.
                    let Ok(s) = std::str::from_utf8(b) else { continue };
                    let decoded = tok.decode(&[id], false).unwrap();
                    // SentencePiece with a space prefix drops the text's first space.
                    assert!(
                        decoded == s || s.strip_prefix(' ') == Some(decoded.as_str()),
                        "{}: id {id} is {s:?} but decodes to {decoded:?}",
                        path.display()
                    );
                }
                TokenBytes::Special(name) => {
                    special += 1;
                    assert_eq!(tok.decode(&[id], false).unwrap(), *name, "{}: special id {id}", path.display());
                    assert_eq!(tok.decode(&[id], true).unwrap(), "", "{}: special id {id}", path.display());
                }
                TokenBytes::Unused => {}
            }
        }
        assert!(text > bytes.len() * 9 / 10 && special > 0, "{}: {text} text, {special} special", path.display());
        for &eos in tok.eos_ids() {
            assert!(matches!(bytes[eos as usize], TokenBytes::Special(_)), "{}: eos {eos}", path.display());
        }
    }
}

/// A person, bounded in every part so that even a random model's output ends; compact layout
/// (no free whitespace) for the same reason.
fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "role": {"enum": ["admin", "user", "guest"]},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,5}$"}, "maxItems": 3}
        },
        "required": ["name", "age", "role", "tags"],
        "additionalProperties": false,
        "x-guidance": {"whitespace_flexible": false}
    })
}

fn check_person(text: &str, at: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{at}: {text:?} is not JSON: {e}"));
    let o = v.as_object().unwrap_or_else(|| panic!("{at}: {text:?} is not an object"));
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["age", "name", "role", "tags"], "{at}: {text}");
    assert!(o["name"].as_str().is_some_and(|n| n.chars().count() <= 8), "{at}: {text}");
    assert!(o["age"].as_u64().is_some_and(|a| a <= 120), "{at}: {text}");
    assert!(["admin", "user", "guest"].contains(&o["role"].as_str().unwrap_or("")), "{at}: {text}");
    let tags = o["tags"].as_array().unwrap_or_else(|| panic!("{at}: {text}"));
    assert!(tags.len() <= 3, "{at}: {text}");
    for t in tags {
        let t = t.as_str().unwrap_or_else(|| panic!("{at}: {text}"));
        assert!((1..=5).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_lowercase()), "{at}: {text}");
    }
}

/// `(yes|no|maybe)-[0-9]{2,4}`, checked by hand.
fn check_answer_code(text: &str, at: &str) {
    let (word, digits) = text.split_once('-').unwrap_or_else(|| panic!("{at}: {text:?}"));
    assert!(["yes", "no", "maybe"].contains(&word), "{at}: {text:?}");
    assert!((2..=4).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()), "{at}: {text:?}");
}

/// Sums as the Lark grammar below writes them: `n` or `(a+b)`.
const SUMS: &str = "start: expr\nexpr: NUM | \"(\" expr \"+\" expr \")\"\nNUM: /[0-9]{1,3}/\n";

fn check_sum(text: &str, at: &str) {
    fn expr(s: &[u8]) -> Option<&[u8]> {
        match s.first()? {
            b'(' => {
                let rest = expr(&s[1..])?;
                let rest = expr(rest.strip_prefix(b"+")?)?;
                rest.strip_prefix(b")")
            }
            b'0'..=b'9' => {
                let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
                (n <= 3).then_some(&s[n..])
            }
            _ => None,
        }
    }
    assert_eq!(expr(text.as_bytes()), Some(&b""[..]), "{at}: {text:?}");
}

#[test]
fn sampled_output_always_matches_its_constraint() {
    for setup in Setup::per_backend() {
        let paths: Vec<_> = TINY.iter().map(|t| fixture(t)).chain([real_model(GEMMA), real_model(QWEN)]).collect();
        for path in &paths {
            let model = load(setup, path);
            for seed in 0..3 {
                let at = format!("{setup:?} {} seed {seed}", path.display());
                let cfg = sampled(seed, 200, Constraint::JsonSchema(person_schema()));
                let (_, text) = run(model.as_ref(), "A user record:", &cfg);
                check_person(&text, &format!("{at} json"));
                let cfg = sampled(seed, 20, Constraint::Regex("(yes|no|maybe)-[0-9]{2,4}".into()));
                check_answer_code(&run(model.as_ref(), "Answer:", &cfg).1, &format!("{at} regex"));
                // Nesting is unbounded in the grammar: the budget bounds it, and a sum cut off
                // by the budget is not a match. Seeds whose sums end are what is checked.
                let cfg = sampled(seed, 60, Constraint::Lark(SUMS.into()));
                let (ids, text) = run(model.as_ref(), "Sum:", &cfg);
                if ids.len() < 60 {
                    check_sum(&text, &format!("{at} lark"));
                }
            }
            // The metrics count the time spent on masks.
            let cfg = sampled(0, 20, Constraint::Regex("(yes|no)".into()));
            run(model.as_ref(), "Answer:", &cfg);
            assert!(!model.metrics().constraint_duration.is_zero(), "{setup:?} {}", path.display());
        }
    }
}

#[test]
fn a_complete_match_ends_the_sequence() {
    let model = load(Setup::CandleBuiltIn, &real_model(QWEN));
    // Nothing can follow `ok`: the sequence ends there even though EOS is ignored.
    let cfg = GenerateConfig { ignore_eos: true, ..sampled(1, 50, Constraint::Regex("ok".into())) };
    let (ids, text) = run(model.as_ref(), "Say ok:", &cfg);
    assert_eq!(text, "ok", "{ids:?}");
}

#[test]
fn constrained_sequences_draw_the_same_alone_and_batched() {
    for setup in Setup::per_backend() {
        let model = load(setup, &fixture("qwen3/gqa"));
        let tok = model.tokenizer();
        let prompts = ["A user record:", "Another one, longer, with more words before it:"];
        // Greedy: the batched forward's logits may differ from the solo one's in the last bits,
        // which a draw at temperature 1 could feel; the masks must be the same either way.
        let cfgs: Vec<GenerateConfig> = (0..2)
            .map(|seed| GenerateConfig {
                temperature: 0.0,
                ..sampled(seed, 200, Constraint::JsonSchema(person_schema()))
            })
            .collect();
        let alone: Vec<Vec<u32>> = prompts.iter().zip(&cfgs).map(|(p, c)| run(model.as_ref(), p, c).0).collect();
        // The same requests beside unconstrained neighbours, joining at different steps.
        let mut batch = model.sequence_batch().unwrap();
        let free = GenerateConfig { max_tokens: 30, ignore_eos: true, ..GenerateConfig::default() };
        batch.add(tok.encode("Free text", tok.adds_bos()).unwrap(), &free).unwrap();
        let mut seqs = Vec::new();
        let mut out = vec![Vec::new(); prompts.len()];
        let mut finished = 0;
        for step in 0..400 {
            if step < prompts.len() {
                let ids = tok.encode(prompts[step], tok.adds_bos()).unwrap();
                seqs.push(batch.add(ids, &cfgs[step]).unwrap());
            }
            if step == 1 {
                batch.add(tok.encode("More free text here", tok.adds_bos()).unwrap(), &free).unwrap();
            }
            for e in batch.step() {
                match e {
                    SeqEvent::Token { seq, token, .. } => {
                        if let Some(i) = seqs.iter().position(|&s| s == seq) {
                            out[i].push(token.id);
                        }
                    }
                    SeqEvent::Finished { seq, reason, .. } if seqs.contains(&seq) => {
                        assert_eq!(reason, FinishReason::Stop, "{setup:?}: a match ends with stop");
                        finished += 1;
                    }
                    SeqEvent::Failed { error, .. } => panic!("{setup:?}: {error}"),
                    SeqEvent::Finished { .. } => {}
                }
            }
            if finished == prompts.len() {
                break;
            }
        }
        assert_eq!(out, alone, "{setup:?}: continuous batch");
        // batch_generate pads the prompts into one batch: the same ids again.
        let batched = model.batch_generate(&prompts, &cfgs[0]).unwrap();
        let got: Vec<Vec<u32>> = batched.iter().map(|r| r.tokens.iter().map(|t| t.id).collect()).collect();
        assert_eq!(got, alone, "{setup:?}: batch_generate");
    }
}

#[test]
fn a_constraint_that_cannot_work_is_one_clear_error() {
    let model = load(Setup::CandleBuiltIn, &fixture("qwen3/gqa"));
    let cases = [
        (Constraint::Regex("(unclosed".into()), "regular expression does not compile"),
        (Constraint::Lark("start: \"a\" (".into()), "grammar does not compile"),
        (Constraint::Lark("start: missing_rule".into()), "grammar does not compile"),
        (Constraint::JsonSchema(json!(3)), "a JSON Schema is an object"),
        (Constraint::JsonSchema(json!({"type": "no-such-type"})), "JSON Schema does not compile"),
        (Constraint::JsonSchema(json!({"type": "string", "minLength": 5, "maxLength": 2})), "JSON Schema"),
    ];
    for (constraint, expected) in cases {
        let cfg = GenerateConfig { constraint: Some(constraint.clone()), ..GenerateConfig::greedy(5) };
        let err = match model.generate("x", &cfg) {
            Ok(_) => panic!("{constraint:?} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(expected), "{constraint:?}: {err}");
        let mut batch = model.sequence_batch().unwrap();
        assert!(batch.add(vec![1, 2], &cfg).is_err(), "{constraint:?} joined a batch");
    }
}
