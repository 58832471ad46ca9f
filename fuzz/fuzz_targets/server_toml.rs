//! `server.toml` (`infer serve --config`): parsing, path resolution, `validate()`, and each
//! model's name and load settings (dtype, KV dtype, quantization names). Nothing is loaded.
#![no_main]

use infer_server::ServerConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = infer_fuzz::scratch_file("server.toml", data);
    let Ok(cfg) = ServerConfig::from_file(&path) else { return };
    let _ = cfg.validate();
    for m in &cfg.models {
        let _ = m.served_name();
        let _ = m.load_config();
    }
});
