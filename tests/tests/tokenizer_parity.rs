//! The HF tokenizer.json path gives the reference tokenizer's ids and decoded text.

use infer_core::{HfTokenizer, Tokenizer};
use infer_tests::fixture;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    decoded: String,
}

#[test]
fn encode_and_decode_match_transformers() {
    let tok = HfTokenizer::from_dir(&fixture("qwen3/gqa")).unwrap();
    let cases: Vec<Case> =
        serde_json::from_str(&std::fs::read_to_string(fixture("qwen3/tokenizer_cases.json")).unwrap()).unwrap();
    assert!(cases.len() >= 10);
    for c in cases {
        assert_eq!(tok.encode(&c.text, false).unwrap(), c.ids, "encode {:?}", c.text);
        assert_eq!(tok.decode(&c.ids, false).unwrap(), c.decoded, "decode {:?}", c.text);
    }
}

#[test]
fn special_tokens_and_chat_template_come_from_the_checkpoint() {
    let tok = HfTokenizer::from_dir(&fixture("qwen3/gqa")).unwrap();
    assert_eq!(tok.eos_ids(), &[482]);
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(481));
    let prompt = tok
        .chat_template()
        .expect("tokenizer_config.json has a chat template")
        .render(&[infer_core::Message::user("Hello")], true)
        .unwrap();
    assert_eq!(prompt, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    let ids = tok.encode(&prompt, false).unwrap();
    assert_eq!(ids[0], 481);
    assert_eq!(ids.iter().filter(|&&i| i == 482).count(), 1);
}
