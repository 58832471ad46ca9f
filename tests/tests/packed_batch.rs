//! Continuous batching on every LLM parity fixture (Qwen3 incl. bf16 and sharded, Qwen2, Llama 3,
//! Gemma 3 incl. a sliding window shorter than the prompts) and every backend setup: a sequence's
//! greedy ids through the packed forward (`SequenceBatch`, sequences of different lengths joining
//! at different steps, prefills beside decodes) equal the plain generation loop's.
//! server/tests/batch_invariance.rs does the same on the real GGUF models.

use infer_core::{GenerateConfig, LoadConfig, SeqEvent, TextModel};
use infer_tests::{fixture, Setup, LLM_FIXTURES};

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

/// Token ids spread over the vocabulary (any ids are valid prompts for these models).
fn prompt(len: usize, seed: u32, vocab: usize) -> Vec<u32> {
    (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed * 97) >> 7) % vocab as u32).collect()
}

#[test]
fn packed_greedy_equals_the_generation_loop_on_every_fixture_and_setup() {
    for setup in Setup::all() {
        let registry = setup.registry().unwrap();
        let cfg = LoadConfig { backend: Some(setup.backend().into()), ..LoadConfig::default() };
        for name in LLM_FIXTURES {
            let at = format!("{setup:?}/{name}");
            let model = registry.load_model(&fixture(name), &cfg).unwrap_or_else(|e| panic!("{at}: {e}"));
            let vocab = model.info().vocab_size;
            // Lengths around the window-long fixture's 36-position window.
            let prompts: Vec<Vec<u32>> =
                [5, 40, 17, 3].iter().enumerate().map(|(i, &len)| prompt(len, i as u32, vocab)).collect();
            let alone: Vec<Vec<u32>> = prompts.iter().map(|p| solo(model.as_ref(), p, 12)).collect();
            let jobs: Vec<_> =
                prompts.iter().enumerate().map(|(i, p)| (p.clone(), 12 - 2 * i, [0, 0, 3, 5][i])).collect();
            let together = batched(model.as_ref(), &jobs);
            for (i, (t, a)) in together.iter().zip(&alone).enumerate() {
                // The same ids, up to its own max_tokens (or the stop token, as alone).
                assert_eq!(t[..], a[..a.len().min(12 - 2 * i)], "{at}: prompt {i}");
            }
        }
    }
}

/// Steps `seq` (already in `batch`) until it ends, collecting its ids.
fn run_out(batch: &mut dyn infer_core::SequenceBatch, mut out: Vec<u32>, limit: Option<usize>) -> Vec<u32> {
    for _ in 0..1000 {
        if limit.is_some_and(|n| out.len() >= n) {
            return out;
        }
        for e in batch.step() {
            match e {
                SeqEvent::Token { token, .. } => out.push(token.id),
                SeqEvent::Finished { .. } => return out,
                SeqEvent::Failed { error, .. } => panic!("{error}"),
            }
        }
    }
    panic!("the sequence never finished")
}

/// A sequence put back into a new batch after some steps (what the server does when a step
/// fails) goes on with exactly the ids it would have had: greedy, and seeded sampling, whose
/// random draws the replay keeps in step.
#[test]
fn a_resumed_sequence_goes_on_as_if_it_never_stopped() {
    for setup in Setup::all() {
        let registry = setup.registry().unwrap();
        let cfg = LoadConfig { backend: Some(setup.backend().into()), ..LoadConfig::default() };
        for name in LLM_FIXTURES {
            let at = format!("{setup:?}/{name}");
            let model = registry.load_model(&fixture(name), &cfg).unwrap_or_else(|e| panic!("{at}: {e}"));
            let p = prompt(9, 3, model.info().vocab_size);
            // Random fixtures reach their end-of-sequence id early: ignore it.
            let greedy = GenerateConfig { ignore_eos: true, ..GenerateConfig::greedy(14) };
            let sampled = GenerateConfig { temperature: 0.9, seed: Some(7), ..greedy.clone() };
            for gen in [greedy, sampled] {
                let mut whole = model.sequence_batch().unwrap();
                whole.add(p.clone(), &gen).unwrap();
                let straight = run_out(whole.as_mut(), Vec::new(), None);
                let mut first = model.sequence_batch().unwrap();
                first.add(p.clone(), &gen).unwrap();
                let before = run_out(first.as_mut(), Vec::new(), Some(5));
                drop(first);
                let mut second = model.sequence_batch().unwrap();
                second.resume(p.clone(), &before, &gen).unwrap();
                let resumed = run_out(second.as_mut(), before.clone(), None);
                assert!(straight.len() > 5, "{at}: too short to resume: {straight:?}");
                assert_eq!(resumed, straight, "{at}: temperature {}", gen.temperature);
            }
        }
    }
}
