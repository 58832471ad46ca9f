//! config.json of the decoder LLMs (Qwen3, Qwen2, Llama 3, Gemma 3): read, mapped to
//! hyperparameters, checked against the fixture weights beside it, and, when it loads, run for a
//! few tokens. The first byte picks the fixture whose weights sit beside the config.
#![no_main]

use libfuzzer_sys::fuzz_target;

const FIXTURES: [&str; 6] =
    ["qwen3/gqa", "qwen3/head-dim", "qwen2/base", "llama3/scaled", "gemma3/base", "gemma3/window-long"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, config)) = data.split_first() else { return };
    let i = pick as usize % FIXTURES.len();
    let dir = infer_fuzz::checkpoint_dir(&format!("llm{i}"), &[(FIXTURES[i], "")], "config.json");
    std::fs::write(dir.join("config.json"), config).expect("scratch config");
    infer_fuzz::load_and_run_llm(&dir);
});
