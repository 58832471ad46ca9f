//! core's Tekken tokenizer against mistral-common 1.13.1 on the real tekken_240911.json
//! (fetched by `tools/models/fetch.sh tekken`; goldens from tools/fixtures/make_tekken.py).
//! Exact: token ids and decoded text must be identical.

use infer_core::text::tekken::Tekken;
use infer_core::text::tokenizer::Tokenizer;
use infer_tests::models_dir;
use serde::Deserialize;

#[derive(Deserialize)]
struct Goldens {
    n_words: usize,
    num_special_tokens: usize,
    bos_id: u32,
    eos_id: u32,
    specials: std::collections::BTreeMap<String, u32>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    decoded: String,
}

fn goldens() -> Goldens {
    let path = infer_tests::fixture("tekken/goldens.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("goldens")).expect("goldens json")
}

fn real_tekken() -> Tekken {
    let path = models_dir().join("tekken_240911.json");
    assert!(path.is_file(), "{} missing: run tools/models/fetch.sh tekken", path.display());
    Tekken::from_file(&path).expect("load tekken_240911.json")
}

#[test]
fn real_vocabulary_matches_mistral_common_token_for_token() {
    let g = goldens();
    let tok = real_tekken();
    assert_eq!(tok.vocab_size(), g.n_words);
    assert_eq!(tok.num_special_tokens(), g.num_special_tokens);
    assert_eq!(tok.bos_id(), Some(g.bos_id));
    assert_eq!(tok.eos_ids(), &[g.eos_id]);
    for (name, id) in &g.specials {
        assert_eq!(tok.special_id(name), Some(*id), "special {name}");
        assert_eq!(tok.token_to_id(name), Some(*id), "token_to_id {name}");
    }
    assert!(g.cases.len() >= 20);
    for case in &g.cases {
        assert_eq!(tok.encode(&case.text, false).unwrap(), case.ids, "encode {:?}", case.text);
        assert_eq!(tok.decode(&case.ids, true).unwrap(), case.decoded, "decode {:?}", case.text);
    }
}

#[test]
fn bos_is_prepended_only_when_asked_and_specials_in_text_stay_text() {
    let tok = real_tekken();
    let plain = tok.encode("[INST] hi", false).unwrap();
    let with_bos = tok.encode("[INST] hi", true).unwrap();
    assert_eq!(with_bos[0], 1);
    assert_eq!(&with_bos[1..], &plain[..]);
    let inst = tok.special_id("[INST]").unwrap();
    assert!(!plain.contains(&inst), "text '[INST]' must not become the control token");
    assert!(plain.iter().all(|&id| !tok.is_special(id)));
}
