//! Bytes <-> tensors: weights and inputs arrive as little-endian row-major bytes.

use infer_core::{DType, Error, Result};
use tch::{Device, Kind, Tensor};

use crate::error::{OpError, OpResult};
use crate::tensor::{storage_kind, TchTensor};

fn size(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

/// A dense tensor on `device` from little-endian row-major bytes (copied; unaligned is fine).
pub fn from_bytes(bytes: &[u8], dtype: DType, shape: &[usize], device: Device) -> Result<TchTensor> {
    let numel: usize = shape.iter().product();
    let want = dtype.storage_bytes(numel);
    if bytes.len() != want {
        return Err(Error::Shape(format!(
            "from_bytes: {} bytes for a {dtype} tensor of shape {shape:?} (expected {want})",
            bytes.len()
        )));
    }
    let Some(kind) = storage_kind(dtype) else {
        return Err(Error::unsupported(format!(
            "from_bytes: the tch backend has no {dtype} kernels (GGML block formats are dequantized at load)"
        )));
    };
    let build = || -> OpResult<TchTensor> {
        let t = if dtype == DType::U32 {
            // Stored widened to i64 (see tensor.rs).
            let v: Vec<i64> =
                bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect();
            Tensor::f_from_slice(&v)?.f_reshape(size(shape))?
        } else {
            // at_tensor_of_data memcpys from the slice: alignment does not matter.
            Tensor::f_from_data_size(bytes, &size(shape), kind)?
        };
        let t = if device == Device::Cpu { t } else { t.f_to(device)? };
        TchTensor::new(t, dtype == DType::U32)
    };
    build().map_err(|e| Error::backend(format!("from_bytes {dtype}{shape:?}: {}", e.0)))
}

/// Row-major little-endian bytes (copied out of strided views and off the device as needed).
pub fn to_bytes(x: &TchTensor) -> OpResult<Vec<u8>> {
    let t = if x.t.device() == Device::Cpu { x.t.shallow_clone() } else { x.t.f_to(Device::Cpu)? };
    let t = t.f_contiguous()?;
    let numel: usize = x.dims().iter().product();
    if x.dtype == DType::U32 {
        let mut v = vec![0i64; numel];
        t.f_copy_data(&mut v, numel)?;
        return Ok(v.into_iter().flat_map(|i| (i as u32).to_le_bytes()).collect());
    }
    let elem = t.f_kind()?.elt_size_in_bytes();
    let mut out = vec![0u8; numel * elem];
    if numel > 0 {
        t.f_copy_data_u8(&mut out, numel)?;
    }
    if cfg!(target_endian = "big") {
        return Err(OpError("to_bytes: big-endian hosts are not supported".into()));
    }
    Ok(out)
}

/// A tensor filled with `value` (cast like PyTorch's `torch.full`).
pub fn full(value: f64, dtype: DType, shape: &[usize], device: Device) -> Result<TchTensor> {
    let Some(kind) = storage_kind(dtype) else {
        return Err(Error::unsupported(format!("full: cannot fill a quantized {dtype} tensor")));
    };
    let build = || -> OpResult<TchTensor> {
        let t = match kind {
            Kind::Float | Kind::Half | Kind::BFloat16 => Tensor::f_full(size(shape), value, (kind, device))?,
            Kind::Uint8 => Tensor::f_full(size(shape), value as u8 as i64, (kind, device))?,
            _ if dtype == DType::U32 => Tensor::f_full(size(shape), value as u32 as i64, (kind, device))?,
            _ => Tensor::f_full(size(shape), value as i64, (kind, device))?,
        };
        TchTensor::new(t, dtype == DType::U32)
    };
    build().map_err(|e| Error::backend(format!("full {dtype}{shape:?}: {}", e.0)))
}
