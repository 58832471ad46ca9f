//! Tensor casts between f32 and bf16 / f16 on infer-cpu-kernels' exact slice conversions
//! (`half_slices`: half's results at vector speed), in parallel pieces on candle's pool.

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};
use half::{bf16, f16};

pub use infer_cpu_kernels::half_slices::HalfElem;

/// `t` as `dtype`, with candle's results: contiguous CPU casts between f32 and bf16 / f16 run
/// here (vectorized, in parallel pieces; candle's cast is serial and was 5% of a bf16 prefill's
/// main thread in the attention's widening alone), any other cast through candle.
pub fn to_dtype(t: &Tensor, dtype: C) -> Result<Tensor> {
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(s), Some((a, z))) = (&*storage, layout.contiguous_offsets()) {
            let (shape, dev) = (t.shape(), t.device());
            match (s, dtype) {
                (CpuStorage::BF16(v), C::F32) => return Tensor::from_vec(widened(&v[a..z]), shape, dev),
                (CpuStorage::F16(v), C::F32) => return Tensor::from_vec(widened(&v[a..z]), shape, dev),
                (CpuStorage::F32(v), C::BF16) => return Tensor::from_vec(narrowed::<bf16>(&v[a..z]), shape, dev),
                (CpuStorage::F32(v), C::F16) => return Tensor::from_vec(narrowed::<f16>(&v[a..z]), shape, dev),
                _ => {}
            }
        }
    }
    t.to_dtype(dtype)
}

/// Values per work item of the tensor casts.
const CAST_PIECE: usize = 1 << 14;

/// `src` widened to f32, in parallel pieces.
pub fn widened<E: HalfElem>(src: &[E]) -> Vec<f32> {
    crate::convert::filled_in_pieces(src.len(), CAST_PIECE, |start, dst| {
        // SAFETY: MaybeUninit<f32> has f32's layout; widen_into writes every element, reads none.
        let dst = unsafe { &mut *(dst as *mut [std::mem::MaybeUninit<f32>] as *mut [f32]) };
        E::widen_into(&src[start..start + dst.len()], dst);
    })
}

/// `src` rounded to `E`, in parallel pieces.
pub fn narrowed<E: HalfElem>(src: &[f32]) -> Vec<E> {
    crate::convert::filled_in_pieces(src.len(), CAST_PIECE, |start, dst| {
        // SAFETY: MaybeUninit<E> has E's layout; narrow_into writes every element and reads none
        // (bf16 and f16 have no invalid bit patterns).
        let dst = unsafe { &mut *(dst as *mut [std::mem::MaybeUninit<E>] as *mut [E]) };
        E::narrow_into(&src[start..start + dst.len()], dst);
    })
}

/// Whether two float tensors of one shape hold the same values bit for bit (each widened to
/// f32 exactly, so bf16 / f16 bits compare too). For the tests of the exact kernels.
#[cfg(test)]
pub(crate) fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    let bits = |t: &Tensor| t.to_dtype(C::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let (x, y) = (bits(a), bits(b));
    x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tensor casts between f32 and bf16 / f16 give candle's bits, both ways: ties,
    /// subnormals, infinities and NaN included, over several pieces and a short last one.
    #[test]
    fn tensor_casts_match_candles() {
        let n = 2 * CAST_PIECE + 77;
        let mut v: Vec<f32> = (0..n as u32).map(|i| f32::from_bits(i.wrapping_mul(2654435761))).collect();
        v[..6].copy_from_slice(&[f32::NAN, f32::INFINITY, -f32::INFINITY, 1.0 + f32::EPSILON * 32768.0, 1e-40, -0.0]);
        let x = Tensor::from_vec(v, (n,), &candle_core::Device::Cpu).unwrap();
        let bits = |t: &Tensor| -> Vec<u32> {
            match t.dtype() {
                C::BF16 => t.to_vec1::<bf16>().unwrap().iter().map(|x| x.to_bits() as u32).collect(),
                C::F16 => t.to_vec1::<f16>().unwrap().iter().map(|x| x.to_bits() as u32).collect(),
                _ => t.to_vec1::<f32>().unwrap().iter().map(|x| x.to_bits()).collect(),
            }
        };
        for dtype in [C::BF16, C::F16] {
            let (want, got) = (x.to_dtype(dtype).unwrap(), to_dtype(&x, dtype).unwrap());
            assert_eq!(bits(&got), bits(&want), "f32 -> {dtype:?}");
            let (back_want, back_got) = (want.to_dtype(C::F32).unwrap(), to_dtype(&want, C::F32).unwrap());
            assert_eq!(bits(&back_got), bits(&back_want), "{dtype:?} -> f32");
        }
    }
}
