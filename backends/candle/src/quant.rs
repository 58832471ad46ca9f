//! GGML block-quantized weights: loading raw blocks, quantized matmul, row lookup, dequantize
//! (native kernels in [`crate::ggml`], candle's `QTensor` for the other types).

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{CpuStorage, DType as C, Device, Storage, Tensor};
use infer_core::{DType, Error, Result, SharedBytes};

use crate::ggml::{GgmlMatrix, OwnedBlocks};
use crate::tensor::{QuantRepr, QuantTensor};
use crate::weight_rows::{with_rows, WeightRows};
use infer_cpu_kernels::out_ptr::OutPtr;

pub use infer_core::gguf::to_ggml;

/// Builds a quantized tensor of logical `shape` (e.g. (out, in)) from raw GGML blocks.
///
/// Q8_0, Q5_0, Q4_K and Q6_K matrices keep the file's blocks for the native kernels of
/// [`crate::ggml`]; other types go to candle's `QTensor`.
pub fn from_bytes(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<QuantTensor> {
    if let Some(m) = GgmlMatrix::new(bytes, dtype, shape)? {
        return Ok(QuantTensor { repr: QuantRepr::Native(Arc::new(m)), dtype });
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
    let data: &[u8] = if (bytes.as_ptr() as usize).is_multiple_of(8) {
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
    Ok(QuantTensor { repr: QuantRepr::Candle(Arc::new(q)), dtype })
}

/// A quantized tensor over `owner.bytes()[start..end]`: GGML matrices with native kernels keep
/// the owner's bytes in place (a mapped checkpoint stays the only copy), others are copied.
pub fn from_shared(owner: SharedBytes, start: usize, end: usize, dtype: DType, shape: &[usize]) -> Result<QuantTensor> {
    if let Some(m) = GgmlMatrix::shared(owner.clone(), start, end, dtype, shape)? {
        return Ok(QuantTensor { repr: QuantRepr::Native(Arc::new(m)), dtype });
    }
    from_bytes(&owner.bytes().as_slice()[start..end], dtype, shape)
}

/// Quantizes a float matrix (out, in) to the GGML block format `dtype` with candle's quantizer
/// (round to nearest, as llama.cpp's reference quantization); formats with native kernels then
/// run on those ([`from_bytes`]).
pub fn quantize(t: &Tensor, dtype: DType) -> candle_core::Result<QuantTensor> {
    let g = quantizable(dtype, t.dims())?;
    if !t.dtype().is_float() {
        candle_core::bail!("only float tensors can be quantized, got {:?}", t.dtype());
    }
    let t = if matches!(t.dtype(), C::F32 | C::BF16 | C::F16) { t.contiguous()? } else { t.to_dtype(C::F32)? };
    let k = t.dims()[1];
    let blocks = match with_rows(&t, |rows| quantize_rows(rows, k, g)).flatten() {
        Some(blocks) => blocks,
        None => Box::new(QTensor::quantize(&t, g)?.data()?.into_owned()),
    };
    owned_blocks(blocks, dtype, t.dims()).map_err(|e| candle_core::Error::Msg(e.to_string()))
}

/// Quantizes the little-endian float matrix `bytes` (`stored`, shape (out, in)) to `dtype`
/// straight from those bytes: no float tensor is made first (the weight loader's path for a
/// mapped checkpoint). Blocks as [`quantize`] makes them.
pub fn quantize_bytes(bytes: &[u8], stored: DType, dtype: DType, shape: &[usize]) -> Result<QuantTensor> {
    let located = |e: candle_core::Error| {
        Error::backend(format!("quantize {stored}{shape:?} to {dtype}: {}", crate::error::message(&e)))
    };
    let g = quantizable(dtype, shape).map_err(located)?;
    let numel: usize = shape.iter().product();
    if bytes.len() != stored.storage_bytes(numel) {
        return Err(Error::Shape(format!("{} bytes for a {stored} tensor of shape {shape:?}", bytes.len())));
    }
    let rows = crate::convert::to_candle_dtype(stored).and_then(|d| WeightRows::of_bytes(bytes, d));
    let blocks = rows.and_then(|r| quantize_rows(r, shape[1], g));
    match blocks {
        Some(blocks) => owned_blocks(blocks, dtype, shape),
        // Unaligned bytes or a format without a banded quantizer: through a tensor.
        None => quantize(&crate::convert::dense_from_bytes(bytes, stored, shape)?, dtype).map_err(located),
    }
}

/// candle's GGML type for `dtype`, if a (rows, in) matrix of `dims` can be quantized to it.
fn quantizable(dtype: DType, dims: &[usize]) -> candle_core::Result<GgmlDType> {
    let Some(g) = to_ggml(dtype) else { candle_core::bail!("{dtype} is not a GGML block format") };
    let (per_block, _) = dtype.block();
    match *dims {
        [_, k] if k % per_block == 0 => Ok(g),
        ref d => candle_core::bail!("{dtype} needs a matrix whose rows are whole blocks of {per_block}, got {d:?}"),
    }
}

/// A quantized tensor over blocks just made: native formats keep them without a copy.
fn owned_blocks(blocks: OwnedBlocks, dtype: DType, shape: &[usize]) -> Result<QuantTensor> {
    match GgmlMatrix::from_owned(blocks, dtype, shape)? {
        Ok(m) => Ok(QuantTensor { repr: QuantRepr::Native(Arc::new(m)), dtype }),
        Err(blocks) => from_bytes((*blocks).as_ref(), dtype, shape),
    }
}

/// Rows below this many values a band are quantized on the calling thread.
const QUANT_BAND_MIN: usize = 1 << 16;

/// The GGML blocks of float rows of `k` values, bit for bit those of candle's
/// `QTensor::quantize`, or `None` for a format without a per-block quantizer here. candle's
/// quantizer runs on one thread, and at load it was a third of a quantized speech model's
/// start-up; rows are whole blocks, so bands of rows are quantized across candle's pool
/// (half-precision rows widened band by band, never the whole matrix at once).
fn quantize_rows(rows: WeightRows<'_>, k: usize, g: GgmlDType) -> Option<OwnedBlocks> {
    use candle_core::quantized::k_quants::*;
    Some(match g {
        GgmlDType::Q4_0 => quantize_rows_as(rows, k, BlockQ4_0::from_float),
        GgmlDType::Q4_1 => quantize_rows_as(rows, k, BlockQ4_1::from_float),
        GgmlDType::Q5_0 => quantize_rows_as(rows, k, BlockQ5_0::from_float),
        GgmlDType::Q5_1 => quantize_rows_as(rows, k, BlockQ5_1::from_float),
        GgmlDType::Q8_0 => quantize_rows_as(rows, k, crate::quant_q8_0::from_float),
        GgmlDType::Q2K => quantize_rows_as(rows, k, BlockQ2K::from_float),
        GgmlDType::Q3K => quantize_rows_as(rows, k, BlockQ3K::from_float),
        GgmlDType::Q4K => quantize_rows_as(rows, k, crate::quant_q4k::from_float),
        GgmlDType::Q5K => quantize_rows_as(rows, k, BlockQ5K::from_float),
        GgmlDType::Q6K => quantize_rows_as(rows, k, BlockQ6K::from_float),
        _ => return None,
    })
}

/// Rows of `k` values quantized to blocks `B` by `from_float` (candle's, or a vectorized
/// equivalent), in bands across the pool.
fn quantize_rows_as<B: candle_core::quantized::k_quants::GgmlType + Send + Sync + 'static>(
    rows: WeightRows<'_>,
    k: usize,
    from_float: fn(&[f32], &mut [B]),
) -> OwnedBlocks {
    let n = rows.numel() / k;
    let per_row = k / B::BLCK_SIZE;
    let mut blocks = vec![B::zeros(); n * per_row];
    // Rows r0..r1 into their blocks `out`.
    let quantize = |r0: usize, r1: usize, out: &mut [B]| rows.with_f32_range(r0 * k, r1 * k, |x| from_float(x, out));
    let band_rows = QUANT_BAND_MIN.div_ceil(k).max(1);
    if n <= band_rows {
        quantize(0, n, &mut blocks);
    } else {
        let dst = OutPtr(blocks.as_mut_ptr());
        candle_core::utils::barrier_pool().execute_chunked(n.div_ceil(band_rows), |r| {
            for band in r {
                let (r0, r1) = (band * band_rows, ((band + 1) * band_rows).min(n));
                // SAFETY: each band index goes to one worker; its rows' blocks are in bounds and
                // written by no other band.
                let out = unsafe { std::slice::from_raw_parts_mut(dst.at(r0 * per_row), (r1 - r0) * per_row) };
                quantize(r0, r1, out);
            }
        });
    }
    Box::new(BlockVec(blocks))
}

/// Quantized blocks as the quantizer wrote them, read as their bytes.
struct BlockVec<B>(Vec<B>);

impl<B> AsRef<[u8]> for BlockVec<B> {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: GGML blocks are plain `repr(C)` data of `type_size` bytes each (what candle's
        // own `data()` hands out the same way).
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const u8, std::mem::size_of_val(&self.0[..])) }
    }
}

/// Quantized matrices of one format and width stacked along their rows: GGML blocks never span
/// rows, so the result is the blocks one after the other, as quantizing the stacked floats gives.
pub fn concat_rows(parts: &[&QuantTensor]) -> candle_core::Result<QuantTensor> {
    let Some(first) = parts.first() else { candle_core::bail!("concat of no tensors") };
    let (dtype, cols) = (first.dtype, first.dims().get(1).copied());
    let mut rows = 0;
    for q in parts {
        match *q.dims() {
            [r, c] if q.dtype == dtype && Some(c) == cols => rows += r,
            ref d => candle_core::bail!(
                "quantized tensors stack along dim 0 only as matrices of one format and width: {dtype}{:?} and {}{d:?}",
                first.dims(),
                q.dtype
            ),
        }
    }
    let mut bytes = Vec::new();
    for q in parts {
        match &q.repr {
            QuantRepr::Native(m) => bytes.extend_from_slice(m.bytes()),
            QuantRepr::Candle(t) => bytes.extend_from_slice(&t.data()?),
        }
    }
    let shape = [rows, cols.unwrap_or(0)];
    owned_blocks(Box::new(bytes), dtype, &shape).map_err(|e| candle_core::Error::Msg(e.to_string()))
}

/// The raw GGML blocks (the inverse of [`from_bytes`]).
pub fn to_bytes(q: &QuantTensor) -> candle_core::Result<Vec<u8>> {
    match &q.repr {
        QuantRepr::Native(m) => Ok(m.bytes().to_vec()),
        QuantRepr::Candle(t) => Ok(t.data()?.into_owned()),
    }
}

/// Dequantizes the whole tensor to f32.
pub fn dequantize(q: &QuantTensor) -> candle_core::Result<Tensor> {
    match &q.repr {
        QuantRepr::Native(m) => Tensor::from_vec(m.dequantize(), m.shape(), &Device::Cpu),
        QuantRepr::Candle(t) => t.dequantize(&Device::Cpu),
    }
}

/// `x @ wᵀ` with a quantized `w` (out, in), the result in `x`'s dtype.
///
/// Native matrices: `x` is read as f32 (f16 / bf16 widened) and quantized to 8 bits per call.
/// Others: candle's kernel, which takes f32 or bf16 activations and a contiguous `x`.
pub fn linear(x: &Tensor, w: &QuantTensor) -> candle_core::Result<Tensor> {
    let dims = x.dims().to_vec();
    let (n, k) = match *w.dims() {
        [n, k] => (n, k),
        ref other => candle_core::bail!("a quantized linear weight must be 2-D, got {other:?}"),
    };
    if dims.last() != Some(&k) {
        candle_core::bail!("input {:?} does not end with the weight's in-features {k} (weight {:?})", dims, [n, k]);
    }
    let in_dtype = x.dtype();
    if !matches!(in_dtype, C::F32 | C::BF16 | C::F16) {
        candle_core::bail!("activations must be float, got {in_dtype:?}");
    }
    let mut out = dims.clone();
    *out.last_mut().expect("rank >= 1") = n;
    let y = match &w.repr {
        QuantRepr::Native(m) => {
            let rows = x.elem_count() / k.max(1);
            // A contiguous f32 input (every decode step's) is read in place, not copied out.
            let in_place = {
                let (storage, layout) = x.storage_and_layout();
                match (&*storage, layout.contiguous_offsets()) {
                    (Storage::Cpu(CpuStorage::F32(v)), Some((a, z))) => Some(m.matmul(&v[a..z], rows)),
                    _ => None,
                }
            };
            let y = match in_place {
                Some(y) => y,
                None => m.matmul(&x.flatten_all()?.to_dtype(C::F32)?.to_vec1::<f32>()?, rows),
            };
            Tensor::from_vec(y, out, &Device::Cpu)?
        }
        QuantRepr::Candle(q) => {
            let xc = if in_dtype == C::F16 { x.to_dtype(C::F32)? } else { x.clone() }.contiguous()?;
            // candle's kernel needs rank >= 2.
            let x2 = if dims.len() == 1 { xc.reshape((1, k))? } else { xc };
            let y = x2.apply_op1_no_bwd(q.as_ref())?;
            if y.dims() != out.as_slice() {
                y.reshape(out)?
            } else {
                y
            }
        }
    };
    if y.dtype() != in_dtype {
        y.to_dtype(in_dtype)
    } else {
        Ok(y)
    }
}

/// Rows of a quantized table (vocab, dim): only the selected rows are dequantized (to f32).
pub fn embedding(ids: &Tensor, table: &QuantTensor) -> candle_core::Result<Tensor> {
    match &table.repr {
        QuantRepr::Native(m) => {
            let ids_flat = ids.flatten_all()?.to_dtype(C::I64)?.to_vec1::<i64>()?;
            let dim = m.cols();
            let mut out = vec![0f32; ids_flat.len() * dim];
            for (&id, y) in ids_flat.iter().zip(out.chunks_exact_mut(dim.max(1))) {
                if id < 0 || id as usize >= m.rows() {
                    candle_core::bail!("embedding: id {id} is outside the table's {} rows", m.rows());
                }
                m.dequantize_row(id as usize, y);
            }
            let mut shape = ids.dims().to_vec();
            shape.push(dim);
            Tensor::from_vec(out, shape, &Device::Cpu)
        }
        QuantRepr::Candle(q) => q.embedding(ids),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The banded quantizer writes candle's blocks bit for bit, for every block format, from
    /// f32, bf16 and f16 rows, with bands that split the matrix and with one band.
    #[test]
    fn banded_quantization_matches_candle() {
        let dev = Device::Cpu;
        for (n, k) in [(3, 256), (300, 512)] {
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
            for dtype in [C::F32, C::BF16, C::F16] {
                let w = w.to_dtype(dtype).unwrap();
                for g in [
                    GgmlDType::Q4_0,
                    GgmlDType::Q4_1,
                    GgmlDType::Q5_0,
                    GgmlDType::Q5_1,
                    GgmlDType::Q8_0,
                    GgmlDType::Q2K,
                    GgmlDType::Q3K,
                    GgmlDType::Q4K,
                    GgmlDType::Q5K,
                    GgmlDType::Q6K,
                ] {
                    let want = QTensor::quantize(&w, g).unwrap().data().unwrap().into_owned();
                    let flat = w.flatten_all().unwrap();
                    let got = match dtype {
                        C::F32 => quantize_rows(WeightRows::F32(&flat.to_vec1().unwrap()), k, g),
                        C::BF16 => quantize_rows(WeightRows::Bf16(&flat.to_vec1().unwrap()), k, g),
                        _ => quantize_rows(WeightRows::F16(&flat.to_vec1().unwrap()), k, g),
                    };
                    assert_eq!((*got.unwrap()).as_ref(), want, "{g:?} from {dtype:?}, {n}x{k}");
                }
            }
        }
    }

    /// Quantizing a checkpoint's bytes in place gives the blocks of quantizing the tensor made
    /// from them, for each stored float type, from aligned and unaligned bytes alike.
    #[test]
    fn quantizing_bytes_matches_quantizing_the_tensor() {
        let (n, k) = (40, 256);
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
        for stored in [DType::F32, DType::BF16, DType::F16] {
            let t = w.to_dtype(crate::convert::to_candle_dtype(stored).unwrap()).unwrap();
            let bytes = crate::convert::dense_to_bytes(&t).unwrap();
            for q in [DType::Q8_0, DType::Q4K, DType::Q6K] {
                let want = to_bytes(&quantize(&t, q).unwrap()).unwrap();
                let mut shifted = vec![0u8; bytes.len() + 1];
                shifted[1..].copy_from_slice(&bytes);
                for (what, b) in [("aligned", &bytes[..]), ("unaligned", &shifted[1..])] {
                    let got = quantize_bytes(b, stored, q, &[n, k]).unwrap();
                    assert_eq!(to_bytes(&got).unwrap(), want, "{stored} -> {q}, {what}");
                }
            }
        }
        assert!(quantize_bytes(&[0; 10], DType::F32, DType::Q8_0, &[1, 32]).is_err(), "short bytes");
    }

    /// Stacking quantized matrices gives the blocks of quantizing the stacked floats; other
    /// shapes and mixed formats are refused.
    #[test]
    fn stacked_quantized_rows_match_quantized_stack() {
        let dev = &Device::Cpu;
        let (a, b) =
            (Tensor::randn(0f32, 1.0, (8, 256), dev).unwrap(), Tensor::randn(0f32, 1.0, (5, 256), dev).unwrap());
        for q in [DType::Q8_0, DType::Q4K, DType::Q4_0] {
            let want = to_bytes(&quantize(&Tensor::cat(&[&a, &b], 0).unwrap(), q).unwrap()).unwrap();
            let (qa, qb) = (quantize(&a, q).unwrap(), quantize(&b, q).unwrap());
            let got = concat_rows(&[&qa, &qb]).unwrap();
            assert_eq!((got.dims(), to_bytes(&got).unwrap()), (&[13, 256][..], want), "{q}");
        }
        let narrow = quantize(&Tensor::randn(0f32, 1.0, (2, 512), dev).unwrap(), DType::Q8_0).unwrap();
        let qa = quantize(&a, DType::Q8_0).unwrap();
        assert!(concat_rows(&[&qa, &narrow]).is_err(), "different widths");
        assert!(concat_rows(&[&qa, &quantize(&b, DType::Q4K).unwrap()]).is_err(), "different formats");
    }
}
