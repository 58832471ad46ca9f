//! The rotary embedding's row ([`crate::rope`]), the body every build compiles.

use crate::rope::{RopeLayout, MAX_DIM};
use crate::row_elem::RowElem;

/// One row: x's d values rotated by the position's (d/2) cos and sin into `o`.
#[inline(always)]
pub fn rope_row<E: RowElem>(x: &[E], cw: &[f32], sw: &[f32], layout: RopeLayout, o: &mut [E]) {
    use std::mem::MaybeUninit;
    let (d, half) = (x.len(), x.len() / 2);
    // Only the row's d values of the scratch are initialized: zeroing two 4 KB arrays per row
    // of 128 was most of the rotation's time (memset, 1.4% of a 1-thread bf16 prefill).
    let (mut xbuf, mut ybuf) = ([MaybeUninit::<f32>::uninit(); MAX_DIM], [MaybeUninit::<f32>::uninit(); MAX_DIM]);
    x.iter().zip(&mut xbuf[..d]).for_each(|(v, w)| {
        w.write(v.widen());
    });
    ybuf[..d].iter_mut().for_each(|w| {
        w.write(0.0);
    });
    // SAFETY: the first d values of both buffers were just written (slicing them checked
    // d <= MAX_DIM); MaybeUninit<f32> has f32's layout.
    let (xw, yw) = unsafe {
        (
            &*(&xbuf[..d] as *const [MaybeUninit<f32>] as *const [f32]),
            &mut *(&mut ybuf[..d] as *mut [MaybeUninit<f32>] as *mut [f32]),
        )
    };
    let r_ = E::round;
    match layout {
        RopeLayout::SplitHalf => {
            for (i, (&c, &s)) in cw.iter().zip(sw).enumerate() {
                let (a, b) = (xw[i], xw[i + half]);
                yw[i] = r_(r_(a * c) - r_(b * s));
                yw[i + half] = r_(r_(a * s) + r_(b * c));
            }
        }
        RopeLayout::Interleaved => {
            for (i, (&c, &s)) in cw.iter().zip(sw).enumerate() {
                let (a, b) = (xw[2 * i], xw[2 * i + 1]);
                yw[2 * i] = r_(r_(a * c) - r_(b * s));
                yw[2 * i + 1] = r_(r_(a * s) + r_(b * c));
            }
        }
    }
    o.iter_mut().zip(yw.iter()).for_each(|(o, &v)| *o = E::narrow(v));
}
