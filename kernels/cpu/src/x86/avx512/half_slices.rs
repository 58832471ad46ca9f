//! The bf16 slice conversions (`crate::half_slices`) compiled for AVX-512 F/BW.

use half::bf16;

use crate::generic::half_slices as generic;

#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn widen(src: &[bf16], dst: &mut [f32]) {
    generic::widen(src, dst)
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn narrow(src: &[f32], dst: &mut [bf16]) {
    generic::narrow(src, dst)
}
