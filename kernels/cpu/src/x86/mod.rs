//! The x86_64 kernels, one folder per instruction set: `avx2` (AVX2 + FMA + F16C), `avx512`
//! (AVX-512 F/BW/VL, VNNI and BF16 where a kernel says so), `amx` (AMX-BF16 tiles, Linux).
//! Each kernel is `unsafe` and compiled for its features (`#[target_feature]`); the family's
//! dispatch (outside this folder) calls it only where [`crate::cpu_features`] said yes.

#[cfg(target_os = "linux")]
pub mod amx;
pub mod avx2;
pub mod avx512;
