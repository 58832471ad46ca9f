//! Not a fuzz target: writes the seed corpora of the others under `$INFER_FUZZ_SEEDS` and exits
//! (a target, so that it is built by the same `cargo fuzz build` with the same flags).
#![no_main]
// The process ends in `init`: what the macro generates after it never runs.
#![allow(unreachable_code)]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        let root = std::env::var_os("INFER_FUZZ_SEEDS").expect("INFER_FUZZ_SEEDS names the corpus root");
        infer_fuzz::seeds::write_all(std::path::Path::new(&root));
        std::process::exit(0);
    },
    |_data: &[u8]| {}
);
