//! The portable kernels: plain Rust every target runs, and the reference the SIMD kernels of
//! each instruction set are tested against.

pub(crate) mod gemv;
pub mod ggml;
pub mod half_slices;
