//! The Snake activation ([`crate::snake`]) compiled for AVX2.

use crate::generic::snake::snake_body;

#[target_feature(enable = "avx2")]
pub(crate) unsafe fn snake_values(x: &[f32], alpha: f32, inv_beta: f32, out: &mut [f32]) {
    snake_body(x, alpha, inv_beta, out)
}
