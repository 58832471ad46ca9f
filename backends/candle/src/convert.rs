//! Bytes <-> tensors and dtype mapping between infer and candle.

use std::mem::MaybeUninit;

use candle_core::{CpuStorage, DType as C, Device, Storage, Tensor};
use half::{bf16, f16};
use infer_core::{DType, Error, Result};

/// The candle dtype of a dense infer dtype; `None` for block-quantized dtypes.
pub fn to_candle_dtype(d: DType) -> Option<C> {
    Some(match d {
        DType::F32 => C::F32,
        DType::F16 => C::F16,
        DType::BF16 => C::BF16,
        DType::U8 => C::U8,
        DType::U32 => C::U32,
        DType::I64 => C::I64,
        _ => return None,
    })
}

/// The infer dtype of a candle dtype; `None` for those infer does not expose.
pub fn from_candle_dtype(d: C) -> Option<DType> {
    Some(match d {
        C::F32 => DType::F32,
        C::F16 => DType::F16,
        C::BF16 => DType::BF16,
        C::U8 => DType::U8,
        C::U32 => DType::U32,
        C::I64 => DType::I64,
        _ => return None,
    })
}

/// Plain element types whose every bit pattern is a valid value.
trait Pod: candle_core::WithDType + Copy {
    const SIZE: usize;
    #[allow(dead_code)] // big-endian targets only
    fn from_le(b: &[u8]) -> Self;
    #[allow(dead_code)] // big-endian targets only
    fn to_le(self, out: &mut Vec<u8>);
}

macro_rules! pod {
    ($t:ty, $n:expr, $from:expr, $to:expr) => {
        impl Pod for $t {
            const SIZE: usize = $n;
            #[inline]
            fn from_le(b: &[u8]) -> Self {
                let a: [u8; $n] = b.try_into().expect("chunk of element size");
                ($from)(a)
            }
            #[inline]
            fn to_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&($to)(self))
            }
        }
    };
}

pod!(f32, 4, f32::from_le_bytes, f32::to_le_bytes);
pod!(u32, 4, u32::from_le_bytes, u32::to_le_bytes);
pod!(i64, 8, i64::from_le_bytes, i64::to_le_bytes);
pod!(u8, 1, |a: [u8; 1]| a[0], |v: u8| [v]);
pod!(f16, 2, |a| f16::from_bits(u16::from_le_bytes(a)), |v: f16| v.to_bits().to_le_bytes());
pod!(bf16, 2, |a| bf16::from_bits(u16::from_le_bytes(a)), |v: bf16| v.to_bits().to_le_bytes());

/// Elements per piece when a large buffer is filled by the pool's threads: a loaded weight's
/// time goes mostly to faulting in its fresh pages, which the threads then share.
const PIECE: usize = 1 << 18;

/// A `Vec` of `n` elements, `fill(start, out)` writing every element of `out` (elements
/// `start..start + out.len()`), in parallel pieces of [`PIECE`] when large.
fn filled<T: Send>(n: usize, fill: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync) -> Vec<T> {
    filled_in_pieces(n, PIECE, fill)
}

/// [`filled`] with pieces of `piece` elements: one call below two pieces.
pub(crate) fn filled_in_pieces<T: Send>(
    n: usize,
    piece: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync,
) -> Vec<T> {
    infer_cpu_kernels::pool::filled_in_pieces(&crate::pool::CandlePool, n, piece, fill)
}

/// Decodes little-endian elements from a possibly unaligned byte slice.
fn decode<T: Pod + Send>(bytes: &[u8]) -> Vec<T> {
    #[cfg(target_endian = "little")]
    {
        filled(bytes.len() / T::SIZE, |start, out: &mut [MaybeUninit<T>]| {
            let src = &bytes[start * T::SIZE..(start + out.len()) * T::SIZE];
            // SAFETY: `out` spans `src.len()` bytes; every bit pattern is a valid `T` (plain
            // numbers); the copy is bytewise, so the source alignment does not matter; on
            // little-endian targets the in-memory layout equals the little-endian encoding.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr() as *mut u8, src.len()) };
        })
    }
    #[cfg(not(target_endian = "little"))]
    {
        bytes.chunks_exact(T::SIZE).map(T::from_le).collect()
    }
}

fn encode<T: Pod>(values: &[T]) -> Vec<u8> {
    #[cfg(target_endian = "little")]
    {
        let n = std::mem::size_of_val(values);
        let mut out = Vec::<u8>::with_capacity(n);
        // SAFETY: plain numbers; little-endian memory layout is the wire layout.
        unsafe {
            std::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, out.as_mut_ptr(), n);
            out.set_len(n);
        }
        out
    }
    #[cfg(not(target_endian = "little"))]
    {
        let mut out = Vec::with_capacity(values.len() * T::SIZE);
        for v in values {
            v.to_le(&mut out);
        }
        out
    }
}

fn dense_from<T: Pod + Send>(bytes: &[u8], shape: &[usize]) -> candle_core::Result<Tensor> {
    Tensor::from_vec(decode::<T>(bytes), shape, &Device::Cpu)
}

/// A dense tensor from little-endian row-major bytes.
pub fn dense_from_bytes(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Tensor> {
    let numel: usize = shape.iter().product();
    let want = dtype.storage_bytes(numel);
    if bytes.len() != want {
        return Err(Error::Shape(format!(
            "from_bytes: {} bytes for a {dtype} tensor of shape {shape:?} (expected {want})",
            bytes.len()
        )));
    }
    let r = match dtype {
        DType::F32 => dense_from::<f32>(bytes, shape),
        DType::F16 => dense_from::<f16>(bytes, shape),
        DType::BF16 => dense_from::<bf16>(bytes, shape),
        DType::U8 => dense_from::<u8>(bytes, shape),
        DType::U32 => dense_from::<u32>(bytes, shape),
        DType::I64 => dense_from::<i64>(bytes, shape),
        q => return Err(Error::unsupported(format!("from_bytes: {q} is not a dense dtype"))),
    };
    r.map_err(|e| Error::backend(format!("from_bytes {dtype}{shape:?}: {}", crate::error::message(&e))))
}

/// `bytes` of float `dtype` as a float tensor of dtype `to`, converted in one pass: the weight
/// loader's path for checkpoints stored in another float type (a bf16 file computed in f32
/// would otherwise be copied as bf16, then converted into a second buffer). Conversions round
/// like candle's `to_dtype`.
pub fn dense_from_bytes_as(bytes: &[u8], dtype: DType, to: DType, shape: &[usize]) -> Result<Tensor> {
    let numel: usize = shape.iter().product();
    if to == dtype || bytes.len() != dtype.storage_bytes(numel) {
        // Nothing to convert, or a length error `dense_from_bytes` reports.
        return dense_from_bytes(bytes, dtype, shape);
    }
    let r = match dtype {
        DType::F32 => convert_all(bytes, f32::from_le_bytes, to, shape),
        DType::BF16 => convert_all(bytes, |b| bf16::from_bits(u16::from_le_bytes(b)).to_f32(), to, shape),
        DType::F16 => convert_all(bytes, |b| f16::from_bits(u16::from_le_bytes(b)).to_f32(), to, shape),
        _ => return Err(Error::invalid(format!("from_bytes_as: {dtype} is not a float type"))),
    };
    r.map_err(|e| Error::backend(format!("from_bytes_as {dtype}{shape:?} -> {to}: {}", crate::error::message(&e))))
}

/// Every `N`-byte element of `bytes`, read as f32 by `read`, stored as `to`.
fn convert_all<const N: usize>(
    bytes: &[u8],
    read: impl Fn([u8; N]) -> f32 + Sync,
    to: DType,
    shape: &[usize],
) -> candle_core::Result<Tensor> {
    let dev = &Device::Cpu;
    match to {
        DType::F32 => Tensor::from_vec(convert_with(bytes, &read, |v| v), shape, dev),
        DType::BF16 => Tensor::from_vec(convert_with(bytes, &read, bf16::from_f32), shape, dev),
        DType::F16 => Tensor::from_vec(convert_with(bytes, &read, f16::from_f32), shape, dev),
        _ => candle_core::bail!("{to:?} is not a float type"),
    }
}

fn convert_with<const N: usize, T: Send>(
    bytes: &[u8],
    read: &(impl Fn([u8; N]) -> f32 + Sync),
    store: impl Fn(f32) -> T + Sync,
) -> Vec<T> {
    filled(bytes.len() / N, |start, out| {
        let src = bytes[start * N..(start + out.len()) * N].chunks_exact(N);
        for (o, c) in out.iter_mut().zip(src) {
            o.write(store(read(c.try_into().expect("chunk of N bytes"))));
        }
    })
}

/// Row-major little-endian bytes of a dense tensor (copied out of strided views as needed).
pub fn dense_to_bytes(t: &Tensor) -> candle_core::Result<Vec<u8>> {
    // A contiguous tensor's values are encoded straight from its storage (one copy, not two:
    // the logits of every decode step come out this way).
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(cpu), Some((a, z))) = (&*storage, layout.contiguous_offsets()) {
            match cpu {
                CpuStorage::F32(v) => return Ok(encode(&v[a..z])),
                CpuStorage::F16(v) => return Ok(encode(&v[a..z])),
                CpuStorage::BF16(v) => return Ok(encode(&v[a..z])),
                CpuStorage::U8(v) => return Ok(encode(&v[a..z])),
                CpuStorage::U32(v) => return Ok(encode(&v[a..z])),
                CpuStorage::I64(v) => return Ok(encode(&v[a..z])),
                _ => {}
            }
        }
    }
    let flat = t.flatten_all()?;
    Ok(match t.dtype() {
        C::F32 => encode(&flat.to_vec1::<f32>()?),
        C::F16 => encode(&flat.to_vec1::<f16>()?),
        C::BF16 => encode(&flat.to_vec1::<bf16>()?),
        C::U8 => encode(&flat.to_vec1::<u8>()?),
        C::U32 => encode(&flat.to_vec1::<u32>()?),
        C::I64 => encode(&flat.to_vec1::<i64>()?),
        other => candle_core::bail!("to_bytes: unexpected candle dtype {other:?}"),
    })
}

/// A dense tensor filled with `value` (cast like PyTorch's `torch.full`).
pub fn full(value: f64, dtype: DType, shape: &[usize]) -> Result<Tensor> {
    let dev = &Device::Cpu;
    let r = match dtype {
        DType::F32 => Tensor::full(value as f32, shape, dev),
        DType::F16 => Tensor::full(f16::from_f64(value), shape, dev),
        DType::BF16 => Tensor::full(bf16::from_f64(value), shape, dev),
        DType::U8 => Tensor::full(value as u8, shape, dev),
        DType::U32 => Tensor::full(value as u32, shape, dev),
        DType::I64 => Tensor::full(value as i64, shape, dev),
        q => return Err(Error::unsupported(format!("full: cannot fill a quantized {q} tensor"))),
    };
    // `Tensor::full` allocates an owned contiguous buffer, so a KV cache may write into it.
    r.map_err(|e| Error::backend(format!("full {dtype}{shape:?}: {}", crate::error::message(&e))))
}
