//! f32 <-> bf16 / f16 slice conversion with half's exact results, at vector speed: the
//! dispatch. The loops are `generic/half_slices.rs`, compiled for AVX-512 or AVX2 by
//! `x86/avx512/half_slices.rs` and `x86/avx2/half_slices.rs` where the CPU has them.
//!
//! half converts bf16 one value at a time through a branchy function (its SIMD paths are f16
//! only): rounding a bf16 prefill's activations that way cost 8% of it. Here the same rounding
//! (to nearest, ties to even, NaN kept quiet) is written without branches so that the loops
//! vectorize. f16 keeps half's own slice conversions (F16C where the CPU has it). Not capped by
//! `INFER_GGML_ISA`: every build gives the same bits.

use half::{bf16, f16, slice::HalfFloatSliceExt};

use crate::generic::half_slices as generic;
pub use crate::generic::half_slices::{round_bf16, widen_bf16};
#[cfg(target_arch = "x86_64")]
use crate::x86::{avx2::half_slices as avx2, avx512::half_slices as avx512};

/// Runs `$f($args)` compiled for the widest vector ISA the CPU has.
macro_rules! dispatch {
    ($f:ident($($a:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            let f = crate::cpu_features::features();
            if f.avx512() {
                // SAFETY: the CPU has AVX-512 F/BW (just checked).
                return unsafe { avx512::$f($($a),*) };
            }
            if f.avx2 {
                // SAFETY: the CPU has AVX2 (just checked).
                return unsafe { avx2::$f($($a),*) };
            }
        }
        generic::$f($($a),*)
    }};
}

/// Whether the CPU has AVX-512 F/BW: the widest build of the slice and row kernels that follow
/// the CPU alone (conversions, norms, rotary, softmax, Snake, the load-time quantizers).
pub fn has_avx512() -> bool {
    crate::cpu_features::features().avx512()
}

/// A half-precision element: slices of it convert to and from f32 with half's exact results.
pub trait HalfElem: Copy + Default + Send + Sync + 'static {
    /// `dst[i] = src[i]` widened (equal lengths).
    fn widen_into(src: &[Self], dst: &mut [f32]);
    /// `dst[i] = src[i]` rounded to nearest, ties to even (equal lengths).
    fn narrow_into(src: &[f32], dst: &mut [Self]);
}

impl HalfElem for f16 {
    fn widen_into(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst)
    }
    fn narrow_into(src: &[f32], dst: &mut [f16]) {
        dst.convert_from_f32_slice(src)
    }
}

impl HalfElem for bf16 {
    fn widen_into(src: &[bf16], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len());
        dispatch!(widen(src, dst))
    }
    fn narrow_into(src: &[f32], dst: &mut [bf16]) {
        assert_eq!(src.len(), dst.len());
        dispatch!(narrow(src, dst))
    }
}

/// Each value rounded to `E` and widened back, in place (what a cast there and back gives).
pub fn round_through<E: HalfElem>(values: &mut [f32]) {
    let mut halves = [E::default(); 256];
    for chunk in values.chunks_mut(256) {
        let halves = &mut halves[..chunk.len()];
        E::narrow_into(chunk, halves);
        E::widen_into(halves, chunk);
    }
}

/// Values a half-precision loop widens at a time (two f32 blocks of 4 KiB on the stack).
pub const HALF_BLOCK: usize = 1024;

/// `dst[i] = combine(a[i], b[i])` (equal lengths), widened in blocks, rounded once.
pub fn combine_half<E: HalfElem>(a: &[E], b: &[E], dst: &mut [E], combine: impl Fn(f32, f32) -> f32) {
    let (mut wa, mut wb) = ([0f32; HALF_BLOCK], [0f32; HALF_BLOCK]);
    for ((x, y), d) in a.chunks(HALF_BLOCK).zip(b.chunks(HALF_BLOCK)).zip(dst.chunks_mut(HALF_BLOCK)) {
        let n = x.len();
        E::widen_into(x, &mut wa[..n]);
        E::widen_into(y, &mut wb[..n]);
        wa[..n].iter_mut().zip(&wb[..n]).for_each(|(p, &q)| *p = combine(*p, q));
        E::narrow_into(&wa[..n], d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit patterns that cover every class: zeros, subnormals, normals near every rounding
    /// boundary, the largest finite values, infinities, quiet and signalling NaNs of both signs.
    fn patterns() -> Vec<u32> {
        let mut v = Vec::new();
        for hi in [0u32, 1, 2, 0x7f, 0x80, 0x3f80, 0x3f81, 0x7f7f, 0x7f80, 0x7f81, 0x7fc0, 0x7fff] {
            for lo in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xc000, 0xffff] {
                for sign in [0, 0x8000_0000] {
                    v.push(sign | hi << 16 | lo);
                }
            }
        }
        // And a pseudo-random spread (a fixed LCG: the test is reproducible).
        let mut s = 0x1234_5678u64;
        for _ in 0..100_000 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            v.push((s >> 32) as u32);
        }
        v
    }

    #[test]
    fn narrowing_matches_halfs_rounding_bit_for_bit() {
        let src: Vec<f32> = patterns().into_iter().map(f32::from_bits).collect();
        let mut fast = vec![bf16::ZERO; src.len()];
        bf16::narrow_into(&src, &mut fast);
        for (i, (&v, f)) in src.iter().zip(&fast).enumerate() {
            assert_eq!(f.to_bits(), bf16::from_f32(v).to_bits(), "value {i}: {:#010x}", v.to_bits());
            assert_eq!(round_bf16(v).to_bits(), f.to_bits());
        }
    }

    /// Rounding through bf16 / f16 in place gives half's round trip bit for bit, across chunks.
    #[test]
    fn round_through_matches_halfs_round_trip() {
        // bf16's edge patterns, then scattered bits over the whole range (f16's subnormals, ties
        // and overflow included).
        let scattered = (0..20_000u32).map(|i| i.wrapping_mul(2654435761) >> (i % 7));
        let src: Vec<f32> =
            patterns().into_iter().chain(scattered).map(f32::from_bits).filter(|v| !v.is_nan()).collect();
        let (mut b, mut h) = (src.clone(), src.clone());
        round_through::<bf16>(&mut b);
        round_through::<f16>(&mut h);
        for (i, &v) in src.iter().enumerate() {
            assert_eq!(b[i].to_bits(), bf16::from_f32(v).to_f32().to_bits(), "bf16, value {:#010x}", v.to_bits());
            assert_eq!(h[i].to_bits(), f16::from_f32(v).to_f32().to_bits(), "f16, value {:#010x}", v.to_bits());
        }
    }

    #[test]
    fn widening_matches_halfs_bit_for_bit() {
        let src: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let mut fast = vec![0f32; src.len()];
        bf16::widen_into(&src, &mut fast);
        for (s, f) in src.iter().zip(&fast) {
            assert_eq!(f.to_bits(), s.to_f32().to_bits(), "bf16 {:#06x}", s.to_bits());
            assert_eq!(widen_bf16(*s).to_bits(), f.to_bits());
        }
    }
}
