//! The activations ([`crate::activation`]) compiled for AVX-512: 16 lanes a vector, the f64
//! steps (range reduction, the exponent's argument) 8.

use crate::activation::Act;
use crate::generic::activation::act_body;

#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(crate) unsafe fn act_slice(act: Act, src: &[f32], dst: &mut [f32]) {
    act_body(act, src, dst)
}
