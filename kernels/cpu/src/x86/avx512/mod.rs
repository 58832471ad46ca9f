//! Kernels for AVX-512 (F/BW/VL; VNNI or BF16 where a kernel says so).

pub(crate) mod activation;
pub mod bf16_tiles;
pub(crate) mod conv1d;
pub(crate) mod f32_tiles;
pub(crate) mod gemv;
pub(crate) mod ggml;
pub(crate) mod half_slices;
pub(crate) mod quantize_q4k;
pub(crate) mod rms_norm;
pub(crate) mod rope;
pub mod simd;
pub(crate) mod snake;
pub(crate) mod softmax;
pub(crate) mod thin_product;
