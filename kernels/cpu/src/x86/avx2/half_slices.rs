//! The bf16 slice conversions (`crate::half_slices`) compiled for AVX2.

use half::bf16;

use crate::generic::half_slices as generic;

#[target_feature(enable = "avx2")]
pub(crate) unsafe fn widen(src: &[bf16], dst: &mut [f32]) {
    generic::widen(src, dst)
}

#[target_feature(enable = "avx2")]
pub(crate) unsafe fn narrow(src: &[f32], dst: &mut [bf16]) {
    generic::narrow(src, dst)
}

#[target_feature(enable = "avx2")]
pub(crate) unsafe fn widen_by_shift(src: &[bf16], dst: &mut [f32]) {
    generic::widen_by_shift(src, dst)
}
