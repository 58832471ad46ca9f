//! The element types the row kernels ([`crate::rms_norm`], [`crate::rope`]) read and write.

use half::{bf16, f16};

/// Values below which a row kernel does all its rows on the calling thread.
pub(crate) const ROW_PARALLEL_MIN: usize = 1 << 14;

/// A float element the row kernels read and write: widened to f32 exactly, rounded back to
/// nearest (ties to even) as half's arithmetic rounds.
pub trait RowElem: Copy + Send + Sync + 'static {
    fn widen(self) -> f32;
    fn narrow(v: f32) -> Self;
    /// `v` rounded to this type and widened again (the identity for f32).
    fn round(v: f32) -> f32 {
        Self::narrow(v).widen()
    }
}

impl RowElem for f32 {
    fn widen(self) -> f32 {
        self
    }
    fn narrow(v: f32) -> f32 {
        v
    }
}

impl RowElem for bf16 {
    fn widen(self) -> f32 {
        widen_bf16(self)
    }
    fn narrow(v: f32) -> bf16 {
        round_bf16(v)
    }
}

impl RowElem for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

/// `v` rounded to bf16 exactly as `bf16::from_f32` rounds, branch-free (so row loops vectorize).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free conversions give half's bits, NaNs and ties included.
    #[test]
    fn bf16_conversions_match_half() {
        let specials = [0x7f80_0001u32, 0xffc0_0000, 0x3f80_8000, 0x3f81_8000, 0x7f7f_ffff, 0x0000_8000];
        let mut s = 1u64;
        let bits = (0..100_000).map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 32) as u32
        });
        for b in bits.chain(specials) {
            let v = f32::from_bits(b);
            assert_eq!(round_bf16(v).to_bits(), bf16::from_f32(v).to_bits(), "{b:#x}");
            let h = bf16::from_bits(b as u16);
            assert_eq!(widen_bf16(h).to_bits(), h.to_f32().to_bits(), "{:#x}", b as u16);
        }
    }
}
