//! The rotary embedding's row ([`crate::rope`]) compiled for AVX-512, where its roundings
//! vectorize 16 lanes wide.

use crate::rope::RopeLayout;
use crate::row_elem::RowElem;

#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn rope_row<E: RowElem>(x: &[E], cw: &[f32], sw: &[f32], layout: RopeLayout, o: &mut [E]) {
    crate::generic::rope::rope_row(x, cw, sw, layout, o)
}
