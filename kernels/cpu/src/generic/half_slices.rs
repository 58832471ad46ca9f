//! The portable bf16 slice conversions (see [`crate::half_slices`]): branch-free per value, so
//! the loops vectorize wherever they are compiled.

use half::bf16;

/// `v` rounded to bf16 exactly as `bf16::from_f32` rounds, branch-free.
#[inline(always)]
pub fn round_bf16(v: f32) -> bf16 {
    let x = v.to_bits();
    let nan = x & 0x7fff_ffff > 0x7f80_0000;
    // Adding 0x7fff plus the kept part's lowest bit carries into it exactly when the dropped
    // half is above one half, or equal to it with an odd kept part.
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let quiet = (x >> 16) | 0x40;
    bf16::from_bits(if nan { quiet } else { rounded } as u16)
}

/// `v` widened exactly as `bf16::to_f32` widens (a NaN comes back quiet), branch-free.
#[inline(always)]
pub fn widen_bf16(v: bf16) -> f32 {
    let x = v.to_bits() as u32;
    let nan = x & 0x7fff > 0x7f80;
    f32::from_bits(if nan { x | 0x40 } else { x } << 16)
}

/// `dst[i] = widen_bf16(src[i])`, equal lengths.
#[inline(always)]
pub(crate) fn widen(src: &[bf16], dst: &mut [f32]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = widen_bf16(s));
}

/// `dst[i] = round_bf16(src[i])`, equal lengths.
#[inline(always)]
pub(crate) fn narrow(src: &[f32], dst: &mut [bf16]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = round_bf16(s));
}

/// A bf16 is the upper half of an f32: widening by a 16-bit shift (NaNs keep their bits, unlike
/// [`widen_bf16`]; the half-precision products' panels widen this way).
#[inline(always)]
pub(crate) fn widen_by_shift(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((s.to_bits() as u32) << 16);
    }
}
