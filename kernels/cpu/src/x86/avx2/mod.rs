//! Kernels for AVX2 + FMA + F16C.
