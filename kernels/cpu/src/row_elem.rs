//! The element types the row kernels ([`crate::rms_norm`], [`crate::rope`]) read and write.

use half::{bf16, f16};

use crate::half_slices::{round_bf16, widen_bf16};

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
