//! The MLX backend as an infer plugin.

use crate::MlxBackend;

/// libmlx is linked (this code runs only if the dynamic loader found it), and its CPU device
/// always works. The GPU is checked when it is asked for, with an error saying why not.
fn available() -> bool {
    true
}

fn create(device: &str) -> infer_core::Result<MlxBackend> {
    MlxBackend::new(device)
}

// `metal` is listed only where MLX can drive Metal, so elsewhere `--backend metal` finds no
// backend and gets the registry's one-line explanation.
#[cfg(target_os = "macos")]
infer_core::register_backend! {
    name: "mlx",
    description: "MLX through mlx-rs: the Metal GPU (default) and the CPU",
    devices: ["gpu", "metal", "cpu"],
    available: available,
    create: create,
}

#[cfg(not(target_os = "macos"))]
infer_core::register_backend! {
    name: "mlx",
    description: "MLX through mlx-rs: the CPU (MLX's CPU build)",
    devices: ["cpu"],
    available: available,
    create: create,
}
