//! Kernels for AVX2 + FMA + F16C.

pub(crate) mod activation;
pub(crate) mod conv1d;
pub(crate) mod f32_tiles;
pub(crate) mod gemv;
pub(crate) mod ggml;
pub(crate) mod ggml_act;
pub(crate) mod ggml_panel;
pub(crate) mod half_slices;
pub(crate) mod quantize_q4k;
pub(crate) mod quantize_q8_0;
pub(crate) mod snake;
