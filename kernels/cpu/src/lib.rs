//! infer-cpu-kernels: the CPU kernels of infer's backends, as plain slice and pointer code (no
//! tensor types, no backend).
//!
//! Layout (as ggml-cpu's): [`generic`] holds the portable kernels, [`x86`] one folder per
//! instruction set (`avx2`, `avx512`, `amx`), `aarch64` is where a NEON set goes (its README
//! says what it must provide). Each kernel family (e.g. [`ggml`]) has one dispatch module that
//! picks the kernel from [`cpu_features`], the one place CPU features and `INFER_GGML_ISA` are
//! read. Work is split over the caller's thread pool ([`pool::Pool`]).
//!
//! docs/backends/cpu-kernels.md describes the layout, the dispatch rule and how to add an
//! instruction set.

pub mod activation;
pub mod attention;
pub mod bench_inputs;
pub mod conv1d;
pub mod conv_transpose1d;
pub mod cpu_features;
pub mod f32_tiles;
pub mod fused_attention;
pub mod gemv;
pub mod generic;
pub mod ggml;
pub mod half_gemm;
pub mod half_slices;
pub mod out_ptr;
pub mod pool;
pub mod rms_norm;
pub mod rope;
pub mod row_elem;
pub mod snake;
pub mod stream_split;
pub mod thin_product;
#[cfg(target_arch = "x86_64")]
pub mod x86;

pub use cpu_features::{features, isa, CpuFeatures, Isa};
pub use pool::Pool;
