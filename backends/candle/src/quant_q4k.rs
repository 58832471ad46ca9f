//! Q4_K weight quantization at load (`--quant q4_k`) into candle's block type: infer-cpu-kernels'
//! `ggml::quantize_q4k` (bit for bit candle's `BlockQ4K::from_float`, vectorized).

use candle_core::quantized::k_quants::BlockQ4K;
use infer_cpu_kernels::ggml::quantize_q4k::{self as kernel, BLOCK_BYTES};

/// Quantizes `xs` (whole blocks) into `ys`, as candle's `BlockQ4K::from_float` does.
pub fn from_float(xs: &[f32], ys: &mut [BlockQ4K]) {
    const _: () = assert!(std::mem::size_of::<BlockQ4K>() == BLOCK_BYTES);
    // SAFETY: `BlockQ4K` is `repr(C)` plain data of BLOCK_BYTES bytes (asserted above), every
    // bit pattern valid.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ys.as_mut_ptr() as *mut u8, std::mem::size_of_val(ys)) };
    kernel::from_float(xs, bytes)
}
