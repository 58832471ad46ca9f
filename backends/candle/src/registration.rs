//! The candle backend as an infer plugin.

use crate::CandleBackend;

fn available() -> bool {
    true
}

fn create(device: &str) -> infer_core::Result<CandleBackend> {
    match device {
        "" | "cpu" | "cpu:0" => CandleBackend::cpu(),
        other => Err(infer_core::Error::unsupported(format!(
            "candle in this build drives the CPU only; device `{other}` needs another backend (e.g. --backend cuda for tch)"
        ))),
    }
}

infer_core::register_backend! {
    name: "candle",
    description: "candle on the CPU (AVX2/AVX-512 GEMM, GGML k-quant kernels)",
    devices: ["cpu"],
    available: available,
    create: create,
}
