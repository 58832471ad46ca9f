//! Continuous batching on the real GGUF models: a sequence's greedy tokens are the same alone
//! (the plain generation loop), alone in a batch, and packed into one forward with others of
//! different lengths that join and leave at different steps (a prompt's prefill beside other
//! sequences' decode steps), on candle built in and on tch.

use infer_core::{GenerateConfig, LoadConfig, SeqEvent, TextModel};
use infer_tests::{models_dir, Setup};

fn load(setup: Setup, file: &str) -> Box<dyn TextModel> {
    let path = models_dir().join(file);
    assert!(path.exists(), "{} is missing: fetch the real models with tools/models/fetch.sh", path.display());
    let registry = setup.registry().unwrap();
    let cfg = LoadConfig { backend: Some(setup.backend().into()), ..LoadConfig::default() };
    registry.load_model(&path, &cfg).unwrap()
}

fn solo(model: &dyn TextModel, prompt: &[u32], n: usize) -> Vec<u32> {
    model.generate_ids(prompt, &GenerateConfig::greedy(n)).unwrap().map(|t| t.unwrap().id).collect()
}

/// Runs `jobs` (prompt, max_tokens, step at which it joins) through one batch.
fn batched(model: &dyn TextModel, jobs: &[(Vec<u32>, usize, usize)]) -> Vec<Vec<u32>> {
    let mut batch = model.sequence_batch().unwrap();
    let mut ids = vec![None; jobs.len()];
    let mut out = vec![Vec::new(); jobs.len()];
    let mut done = 0;
    for step in 0.. {
        for (j, (prompt, max, at)) in jobs.iter().enumerate() {
            if *at == step {
                ids[j] = Some(batch.add(prompt.clone(), &GenerateConfig::greedy(*max)).unwrap());
            }
        }
        for e in batch.step() {
            let job = |seq| ids.iter().position(|i| *i == Some(seq)).unwrap();
            match e {
                SeqEvent::Token { seq, token, .. } => out[job(seq)].push(token.id),
                SeqEvent::Finished { .. } => done += 1,
                SeqEvent::Failed { error, .. } => panic!("{error}"),
            }
        }
        if done == jobs.len() {
            break;
        }
        assert!(step < 1000, "batch never finished");
    }
    out
}

const PROMPTS: [&str; 5] = [
    "The capital of France",
    "def fibonacci(n):",
    "Once upon a time, in a land far away,",
    "1, 2, 3,",
    "A long prompt joins while the others decode: it is prefilled in the same forward as their \
     single new tokens, so its rows sit beside theirs in every projection of every layer.",
];

fn check(setup: Setup, file: &str) {
    let model = load(setup, file);
    let tok = model.tokenizer();
    let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| tok.encode(p, tok.adds_bos()).unwrap()).collect();
    let alone: Vec<Vec<u32>> = prompts.iter().map(|p| solo(model.as_ref(), p, 16)).collect();
    let ctx = format!("{file} on {}", setup.backend());
    assert_eq!(&batched(model.as_ref(), &[(prompts[0].clone(), 16, 0)])[0], &alone[0], "{ctx}: alone in a batch");
    // Two prompts of different lengths prefilled together in one forward.
    let pair = batched(model.as_ref(), &[(prompts[1].clone(), 16, 0), (prompts[2].clone(), 16, 0)]);
    assert_eq!(pair, [alone[1].clone(), alone[2].clone()], "{ctx}: two prefills packed together");
    // Joining at different steps (each prefill packed beside decodes), leaving at different ones.
    let jobs: Vec<_> = prompts.iter().enumerate().map(|(i, p)| (p.clone(), 16 - 3 * i, 2 * i)).collect();
    let together = batched(model.as_ref(), &jobs);
    for (i, (t, a)) in together.iter().zip(&alone).enumerate() {
        assert_eq!(t[..], a[..16 - 3 * i], "{ctx}: prompt {i} in a batch");
    }
}

#[test]
fn gemma_greedy_does_not_depend_on_the_batch() {
    check(Setup::CandleBuiltIn, "gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn qwen_greedy_does_not_depend_on_the_batch() {
    check(Setup::CandleBuiltIn, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
}

#[test]
fn gemma_greedy_does_not_depend_on_the_batch_on_tch() {
    check(Setup::TchLibrary, "gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn qwen_greedy_does_not_depend_on_the_batch_on_tch() {
    check(Setup::TchLibrary, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
}
