//! The activations ([`crate::activation`]) compiled for AVX2: 8 lanes a vector.

use crate::activation::Act;
use crate::generic::activation::act_body;

#[target_feature(enable = "avx2")]
pub(crate) unsafe fn act_slice(act: Act, src: &[f32], dst: &mut [f32]) {
    act_body(act, src, dst)
}
