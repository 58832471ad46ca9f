//! The JSON bodies of POST /v1/chat/completions and /v1/completions, through every check their
//! handlers run before a model is involved: deserializing, `check_supported`, the chat
//! messages, the sampling parameters. Input: first byte picks the endpoint (even: chat), the
//! rest is the body.
#![no_main]

use infer_server::openai::{ChatRequest, CompletionRequest, Prompt, RequestLimits};
use infer_server::ServerConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    // The served defaults: max_tokens 1024, at most 32768, stop strings of at most 1024 bytes.
    let limits = RequestLimits::of(&ServerConfig::default());
    if pick % 2 == 0 {
        let Ok(req) = serde_json::from_slice::<ChatRequest>(body) else { return };
        let _ = req.check_supported();
        let _ = req.messages();
        let _ = req.sampling.generate_config(limits);
    } else {
        let Ok(req) = serde_json::from_slice::<CompletionRequest>(body) else { return };
        let _ = req.check_supported();
        let _ = req.sampling.generate_config(limits);
        if let Prompt::IdLists(lists) = &req.prompt {
            let _: usize = lists.iter().map(Vec::len).sum();
        }
    }
});
