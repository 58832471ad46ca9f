//! Kernels for AVX2 + FMA + F16C.

pub(crate) mod activation;
pub(crate) mod conv1d;
pub(crate) mod ggml;
pub(crate) mod ggml_act;
pub(crate) mod ggml_panel;
pub(crate) mod snake;
