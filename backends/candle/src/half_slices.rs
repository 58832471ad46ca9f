//! f32 <-> bf16 / f16 slice conversion with half's exact results, at vector speed.
//!
//! half converts bf16 one value at a time through a branchy function (its SIMD paths are f16
//! only): rounding a bf16 prefill's activations that way cost 8% of it. Here the same rounding
//! (to nearest, ties to even, NaN kept quiet) is written without branches so that the loops
//! vectorize, compiled for AVX-512 or AVX2 where the CPU has them. f16 keeps half's own slice
//! conversions (F16C where the CPU has it).

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};
use half::{bf16, f16, slice::HalfFloatSliceExt};

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

/// Runs `$f($args)` compiled for the widest vector ISA the CPU has.
macro_rules! dispatch {
    ($f:ident($($a:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if isa() == Build::Avx512 {
                // SAFETY: the CPU has AVX-512 F/BW (checked once by `isa`).
                return unsafe { avx512::$f($($a),*) };
            }
            if isa() == Build::Avx2 {
                // SAFETY: the CPU has AVX2 (checked once by `isa`).
                return unsafe { avx2::$f($($a),*) };
            }
        }
        $f($($a),*)
    }};
}

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

/// Each value rounded to `E` and widened back, in place (what a cast there and back gives).
pub fn round_through<E: HalfElem>(values: &mut [f32]) {
    let mut halves = [E::default(); 256];
    for chunk in values.chunks_mut(256) {
        let halves = &mut halves[..chunk.len()];
        E::narrow_into(chunk, halves);
        E::widen_into(halves, chunk);
    }
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
        dispatch!(widen_body(src, dst))
    }
    fn narrow_into(src: &[f32], dst: &mut [bf16]) {
        assert_eq!(src.len(), dst.len());
        dispatch!(narrow_body(src, dst))
    }
}

#[inline(always)]
fn widen_body(src: &[bf16], dst: &mut [f32]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = widen_bf16(s));
}

#[inline(always)]
fn narrow_body(src: &[f32], dst: &mut [bf16]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d = round_bf16(s));
}

/// Whether the CPU has AVX-512 F/BW (the row kernels' fast build).
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        isa() == Build::Avx512
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The build of the slice kernels this CPU runs (not capped by `INFER_GGML_ISA`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Build {
    Avx512,
    Avx2,
    Baseline,
}

#[cfg(target_arch = "x86_64")]
fn isa() -> Build {
    let f = infer_cpu_kernels::features();
    if f.avx512() {
        Build::Avx512
    } else if f.avx2 {
        Build::Avx2
    } else {
        Build::Baseline
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use half::bf16;

    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn widen_body(src: &[bf16], dst: &mut [f32]) {
        super::widen_body(src, dst)
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn narrow_body(src: &[f32], dst: &mut [bf16]) {
        super::narrow_body(src, dst)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use half::bf16;

    #[target_feature(enable = "avx2")]
    pub unsafe fn widen_body(src: &[bf16], dst: &mut [f32]) {
        super::widen_body(src, dst)
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn narrow_body(src: &[f32], dst: &mut [bf16]) {
        super::narrow_body(src, dst)
    }
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

    #[test]
    fn widening_matches_halfs_bit_for_bit() {
        let src: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let mut fast = vec![0f32; src.len()];
        bf16::widen_into(&src, &mut fast);
        for (s, f) in src.iter().zip(&fast) {
            assert_eq!(f.to_bits(), s.to_f32().to_bits(), "bf16 {:#06x}", s.to_bits());
        }
    }
}
