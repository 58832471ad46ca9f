//! Bytes <-> arrays: weights and inputs arrive as little-endian row-major bytes.

use std::ffi::c_void;

use half::{bf16, f16};
use infer_core::{DType, Error, Result};
use mlx_rs::{Array, ArrayElement, Dtype};

use crate::error::{bail, OpResult};
use crate::tensor::{mlx_dtype, shape_i32, MlxTensor};

/// An array from little-endian row-major bytes. MLX copies them into its own buffer; an
/// unaligned slice (a safetensors tensor at an odd offset) is first copied to an aligned one,
/// since MLX reads the source as typed elements.
pub fn from_bytes(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<MlxTensor> {
    let numel: usize = shape.iter().product();
    let want = dtype.storage_bytes(numel);
    if bytes.len() != want {
        return Err(Error::Shape(format!(
            "from_bytes: {} bytes for a {dtype} tensor of shape {shape:?} (expected {want})",
            bytes.len()
        )));
    }
    let Some(mdt) = mlx_dtype(dtype) else {
        return Err(Error::unsupported(format!(
            "from_bytes: the mlx backend has no {dtype} kernels (GGML block formats are dequantized at load)"
        )));
    };
    if cfg!(target_endian = "big") {
        return Err(Error::unsupported("from_bytes: big-endian hosts are not supported"));
    }
    let build = || -> OpResult<MlxTensor> {
        let dims = shape_i32(shape)?;
        let align = dtype.block().1;
        let aligned: Vec<u64>;
        let ptr = if (bytes.as_ptr() as usize).is_multiple_of(align) {
            bytes.as_ptr()
        } else {
            let mut v = vec![0u64; bytes.len().div_ceil(8)];
            // SAFETY: `v` holds at least bytes.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr() as *mut u8, bytes.len()) };
            aligned = v;
            aligned.as_ptr() as *const u8
        };
        // A zero-sized array still needs a valid pointer.
        let one = 0u64;
        let ptr = if numel == 0 { &one as *const u64 as *const u8 } else { ptr };
        // SAFETY: `ptr` points at numel elements of `mdt` (checked above), aligned; MLX copies them.
        let a = unsafe { Array::from_raw_data(ptr as *const c_void, &dims, mdt) };
        MlxTensor::new(a)
    };
    build().map_err(|e| Error::backend(format!("from_bytes {dtype}{shape:?}: {}", e.0)))
}

/// Row-major little-endian bytes (evaluates the array; strided views are copied row-major).
pub fn to_bytes(x: &MlxTensor) -> OpResult<Vec<u8>> {
    if cfg!(target_endian = "big") {
        bail!("big-endian hosts are not supported");
    }
    if x.dims().iter().product::<usize>() == 0 {
        return Ok(Vec::new());
    }
    let a = x.a.contiguous()?;
    a.eval()?;
    match a.dtype() {
        Dtype::Float32 => raw::<f32>(&a),
        Dtype::Float16 => raw::<f16>(&a),
        Dtype::Bfloat16 => raw::<bf16>(&a),
        Dtype::Uint8 => raw::<u8>(&a),
        Dtype::Uint32 => raw::<u32>(&a),
        Dtype::Int64 => raw::<i64>(&a),
        other => bail!("cannot read back a {other:?} array"),
    }
}

fn raw<T: ArrayElement + Copy>(a: &Array) -> OpResult<Vec<u8>> {
    let s = a.try_as_slice::<T>().map_err(|e| crate::error::OpError(e.to_string()))?;
    let n = std::mem::size_of_val(s);
    let mut out = vec![0u8; n];
    // SAFETY: plain numbers; `out` has room for the n bytes copied.
    unsafe { std::ptr::copy_nonoverlapping(s.as_ptr() as *const u8, out.as_mut_ptr(), n) };
    Ok(out)
}

/// A 0-d array holding `value` in `dtype`, converted as a cast would (floats truncate toward
/// zero into integers). Built in the exact type, so integers keep all their bits.
pub fn scalar(value: f64, dtype: DType) -> OpResult<Array> {
    Ok(match dtype {
        DType::F32 => Array::from_f32(value as f32),
        DType::F16 | DType::BF16 => Array::from_f32(value as f32).as_dtype(mlx_dtype(dtype).expect("float"))?,
        DType::U8 => Array::from_slice(&[value as u8], &[]),
        DType::U32 => Array::from_slice(&[value as u32], &[]),
        DType::I64 => Array::from_slice(&[value as i64], &[]),
        d => bail!("cannot make a {d} scalar; quantize at load"),
    })
}

/// An array filled with `value` (cast like PyTorch's `torch.full`).
pub fn full(value: f64, dtype: DType, shape: &[usize]) -> Result<MlxTensor> {
    if mlx_dtype(dtype).is_none() {
        return Err(Error::unsupported(format!("full: cannot fill a quantized {dtype} tensor")));
    }
    let build = || -> OpResult<MlxTensor> {
        let s = scalar(value, dtype)?;
        // Materialized (not a broadcast view) so a later slice update can write into it.
        let a = mlx_rs::ops::broadcast_to(&s, &shape_i32(shape)?)?.contiguous()?;
        MlxTensor::new(a)
    };
    build().map_err(|e| Error::backend(format!("full {dtype}{shape:?}: {}", e.0)))
}
