//! The tch backend as an infer plugin.

use crate::TchBackend;

/// libtorch is linked (this code runs only if the dynamic loader found it), and its CPU device
/// always works. CUDA is checked when a `cuda` device is asked for, with an error saying why not.
fn available() -> bool {
    true
}

fn create(device: &str) -> infer_core::Result<TchBackend> {
    TchBackend::new(device)
}

infer_core::register_backend! {
    name: "tch",
    description: "libtorch 2.13 through tch: CPU and CUDA",
    devices: ["cpu", "cuda"],
    available: available,
    create: create,
}
