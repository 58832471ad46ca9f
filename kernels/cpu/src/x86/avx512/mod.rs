//! Kernels for AVX-512 (F/BW/VL; VNNI or BF16 where a kernel says so).

pub(crate) mod activation;
pub(crate) mod conv1d;
pub(crate) mod ggml;
pub(crate) mod rms_norm;
pub(crate) mod rope;
pub mod simd;
pub(crate) mod snake;
pub(crate) mod thin_product;
