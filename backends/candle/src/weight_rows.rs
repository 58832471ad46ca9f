//! A row-major (n, k) float weight as the dense product kernels and the quantizer read it: a slice of a candle
//! tensor's storage, or of a checkpoint's mapped bytes ([`crate::mapped`]), never copied.

use std::cell::RefCell;

use candle_core::{CpuStorage, DType as C, Storage, Tensor};
use half::{bf16, f16};

use crate::half_slices::HalfElem;

thread_local! {
    /// The thread's widened rows ([`WeightRows::with_f32_range`]), kept for its next call.
    static WIDE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

#[derive(Clone, Copy)]
pub enum WeightRows<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

impl<'a> WeightRows<'a> {
    /// The `len` elements from `offset` of a CPU float storage.
    pub fn of_storage(storage: &'a Storage, offset: usize, len: usize) -> Option<WeightRows<'a>> {
        match storage {
            Storage::Cpu(CpuStorage::F32(v)) => v.get(offset..offset + len).map(WeightRows::F32),
            Storage::Cpu(CpuStorage::BF16(v)) => v.get(offset..offset + len).map(WeightRows::Bf16),
            Storage::Cpu(CpuStorage::F16(v)) => v.get(offset..offset + len).map(WeightRows::F16),
            _ => None,
        }
    }

    /// Little-endian float `bytes` read in place, where they are aligned for the element type
    /// (this crate targets little-endian CPUs, where the bytes are the values).
    pub fn of_bytes(bytes: &'a [u8], dtype: C) -> Option<WeightRows<'a>> {
        let size = dtype.size_in_bytes();
        if !cfg!(target_endian = "little")
            || !(bytes.as_ptr() as usize).is_multiple_of(size)
            || !bytes.len().is_multiple_of(size)
        {
            return None;
        }
        let n = bytes.len() / size;
        let p = bytes.as_ptr();
        // SAFETY: aligned and sized for `n` elements (checked above); every bit pattern is a
        // valid f32 / bf16 / f16; the slice borrows `bytes`.
        unsafe {
            match dtype {
                C::F32 => Some(WeightRows::F32(std::slice::from_raw_parts(p as *const f32, n))),
                C::BF16 => Some(WeightRows::Bf16(std::slice::from_raw_parts(p as *const bf16, n))),
                C::F16 => Some(WeightRows::F16(std::slice::from_raw_parts(p as *const f16, n))),
                _ => None,
            }
        }
    }

    pub fn dtype(&self) -> C {
        match self {
            WeightRows::F32(_) => C::F32,
            WeightRows::Bf16(_) => C::BF16,
            WeightRows::F16(_) => C::F16,
        }
    }

    /// `f` on elements `lo..hi` as f32: borrowed where they already are, else widened (the
    /// vectorized casts of [`crate::half_slices`]) into a buffer the thread keeps for its next
    /// call. A fresh buffer per band of a quantized load was a page-faulted allocation each
    /// time, and `half`'s scalar bf16 widening a sixth of a 4B model's load.
    pub fn with_f32_range<R>(&self, lo: usize, hi: usize, f: impl FnOnce(&[f32]) -> R) -> R {
        fn widened<E: HalfElem, R>(src: &[E], f: impl FnOnce(&[f32]) -> R) -> R {
            WIDE.with_borrow_mut(|buf| {
                buf.resize(src.len(), 0.0);
                E::widen_into(src, buf);
                f(buf)
            })
        }
        match *self {
            WeightRows::F32(v) => f(&v[lo..hi]),
            WeightRows::Bf16(v) => widened(&v[lo..hi], f),
            WeightRows::F16(v) => widened(&v[lo..hi], f),
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        match self {
            WeightRows::F32(v) => v.len(),
            WeightRows::Bf16(v) => v.len(),
            WeightRows::F16(v) => v.len(),
        }
    }
}

/// Runs `f` on the rows of a contiguous 2-D float tensor `w` (its storage read-locked meanwhile);
/// `None` for another layout or dtype.
pub fn with_rows<R>(w: &Tensor, f: impl FnOnce(WeightRows<'_>) -> R) -> Option<R> {
    let (n, k) = w.dims2().ok()?;
    if !w.is_contiguous() {
        return None;
    }
    let (storage, layout) = w.storage_and_layout();
    WeightRows::of_storage(&storage, layout.start_offset(), n * k).map(f)
}
