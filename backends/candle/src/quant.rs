//! GGML block-quantized weights: loading raw blocks, quantized matmul, row lookup, dequantize.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{QStorage, QTensor};
use candle_core::{DType as C, Device, Tensor};
use infer_core::{DType, Error, Result};

use crate::tensor::QuantTensor;

pub use infer_core::gguf::to_ggml;

/// Builds a quantized tensor of logical `shape` (e.g. (out, in)) from raw GGML blocks.
///
/// Q5_0 is stored as Q8_0: candle has no SIMD kernel for Q5_0 (its scalar one ran Gemma 3 270M,
/// mostly Q5_0, at 2 tok/s), and every Q5_0 value `d * (q - 16)` with `q - 16` in [-16, 15] is
/// exactly a Q8_0 value with the same scale, so the repack is lossless (+55% bytes for those
/// tensors) and both formats multiply against Q8_0-quantized activations, as in llama.cpp.
pub fn from_bytes(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<QuantTensor> {
    if dtype == DType::Q5_0 && bytes.len() % Q5_0_BLOCK == 0 {
        let numel: usize = shape.iter().product();
        if bytes.len() == numel / 32 * Q5_0_BLOCK {
            return from_bytes(&repack_q5_0_as_q8_0(bytes), DType::Q8_0, shape);
        }
    }
    let g = to_ggml(dtype).ok_or_else(|| Error::unsupported(format!("from_bytes: {dtype} is not a GGML type")))?;
    let (per_block, block_bytes) = dtype.block();
    if g.block_size() != per_block || g.type_size() != block_bytes {
        return Err(Error::backend(format!(
            "from_bytes: candle's {g:?} blocks are {} elements / {} bytes, infer's {dtype} {per_block} / {block_bytes}",
            g.block_size(),
            g.type_size()
        )));
    }
    let last = shape.last().copied().unwrap_or(0);
    if shape.is_empty() || last % per_block != 0 {
        return Err(Error::Shape(format!(
            "from_bytes: a {dtype} tensor needs its last dim divisible by {per_block}, got shape {shape:?}"
        )));
    }
    let numel: usize = shape.iter().product();
    let want = numel / per_block * block_bytes;
    if bytes.len() != want {
        return Err(Error::Shape(format!(
            "from_bytes: {} bytes for a {dtype} tensor of shape {shape:?} (expected {want})",
            bytes.len()
        )));
    }
    // candle reinterprets the bytes as a slice of blocks and asserts their alignment (f32 scales
    // in Q8K: 4 bytes). Checkpoint slices (mmapped GGUF) may be unaligned: copy those into an
    // 8-byte aligned buffer first. candle then copies the blocks into its own storage.
    let aligned: Vec<u64>;
    let data: &[u8] = if (bytes.as_ptr() as usize) % 8 == 0 {
        bytes
    } else {
        let mut buf = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `buf` spans at least `bytes.len()` bytes; u64 has no invalid bit patterns.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_mut_ptr() as *mut u8, bytes.len());
        }
        aligned = buf;
        // SAFETY: the first `bytes.len()` bytes of `aligned` were just initialized.
        unsafe { std::slice::from_raw_parts(aligned.as_ptr() as *const u8, bytes.len()) }
    };
    let storage = QStorage::from_data(Cow::Borrowed(data), &Device::Cpu, g)
        .map_err(|e| Error::backend(format!("from_bytes {dtype}{shape:?}: {}", crate::error::message(&e))))?;
    let q = QTensor::new(storage, shape)
        .map_err(|e| Error::backend(format!("from_bytes {dtype}{shape:?}: {}", crate::error::message(&e))))?;
    Ok(QuantTensor { q: Arc::new(q), dtype })
}

const Q5_0_BLOCK: usize = 22;
const Q8_0_BLOCK: usize = 34;

/// Q5_0 blocks (f16 d, u32 high bits, 16 bytes of nibbles) -> Q8_0 blocks (f16 d, 32 × i8).
fn repack_q5_0_as_q8_0(q5: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; q5.len() / Q5_0_BLOCK * Q8_0_BLOCK];
    for (src, dst) in q5.chunks_exact(Q5_0_BLOCK).zip(out.chunks_exact_mut(Q8_0_BLOCK)) {
        dst[..2].copy_from_slice(&src[..2]);
        let qh = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
        for j in 0..16 {
            let lo = (src[6 + j] & 0x0F) | ((((qh >> j) << 4) & 0x10) as u8);
            let hi = (src[6 + j] >> 4) | (((qh >> (j + 12)) & 0x10) as u8);
            dst[2 + j] = (lo as i8 - 16) as u8;
            dst[2 + 16 + j] = (hi as i8 - 16) as u8;
        }
    }
    out
}

/// The raw GGML blocks (the inverse of [`from_bytes`]).
pub fn to_bytes(q: &QuantTensor) -> candle_core::Result<Vec<u8>> {
    Ok(q.q.data()?.into_owned())
}

/// Dequantizes the whole tensor to f32.
pub fn dequantize(q: &QuantTensor) -> candle_core::Result<Tensor> {
    q.q.dequantize(&Device::Cpu)
}

/// `x @ wᵀ` with a quantized `w` (out, in) through candle's k-quant kernels.
///
/// candle's kernel takes f32 or bf16 activations (bf16 is widened to f32 inside); f16 is
/// converted to f32 here and the result back. `x` must be contiguous, so it is copied if not.
pub fn linear(x: &Tensor, w: &QuantTensor) -> candle_core::Result<Tensor> {
    let (n, k) = w.q.shape().dims2()?;
    let dims = x.dims().to_vec();
    if dims.last() != Some(&k) {
        candle_core::bail!("input {:?} does not end with the weight's in-features {k} (weight {:?})", dims, [n, k]);
    }
    let in_dtype = x.dtype();
    let xc = match in_dtype {
        C::F32 | C::BF16 => x.clone(),
        C::F16 => x.to_dtype(C::F32)?,
        other => candle_core::bail!("activations must be float, got {other:?}"),
    };
    let xc = xc.contiguous()?;
    // candle's kernel needs rank >= 2.
    let x2 = if dims.len() == 1 { xc.reshape((1, k))? } else { xc };
    let y = x2.apply_op1_no_bwd(w.q.as_ref())?;
    let mut out = dims;
    *out.last_mut().expect("rank >= 1") = n;
    let y = if y.dims() != out.as_slice() { y.reshape(out)? } else { y };
    if y.dtype() != in_dtype {
        y.to_dtype(in_dtype)
    } else {
        Ok(y)
    }
}

/// Rows of a quantized table (vocab, dim): only the selected rows are dequantized (to f32).
pub fn embedding(ids: &Tensor, table: &QuantTensor) -> candle_core::Result<Tensor> {
    table.q.embedding(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::GgmlDType;

    #[test]
    fn q5_0_repack_is_lossless() {
        let values: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
        let t = Tensor::from_vec(values, (4, 64), &Device::Cpu).unwrap();
        let q5 = QTensor::quantize(&t, GgmlDType::Q5_0).unwrap();
        let bytes = q5.data().unwrap().into_owned();
        let want = q5.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let q8 = from_bytes(&bytes, DType::Q5_0, &[4, 64]).unwrap();
        assert_eq!(q8.q.dtype(), GgmlDType::Q8_0);
        let got = dequantize(&q8).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(got, want);
    }
}
