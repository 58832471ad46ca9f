//! The portable kernels: plain Rust every target runs, and the reference the SIMD kernels of
//! each instruction set are tested against.

pub mod activation;
pub(crate) mod gemv;
pub mod ggml;
pub mod half_slices;
pub mod rope;
pub mod snake;
