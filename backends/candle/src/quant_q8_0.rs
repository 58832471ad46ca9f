//! Q8_0 weight quantization at load (`--quant q8_0`) into candle's block type: infer-cpu-kernels'
//! `ggml::quantize_q8_0` (bit for bit candle's `BlockQ8_0::from_float`, vectorized).

use candle_core::quantized::k_quants::BlockQ8_0;
use infer_cpu_kernels::ggml::quantize_q8_0::{self as kernel, BLOCK_BYTES};

/// Quantizes `xs` (whole blocks) into `ys`, as candle's `BlockQ8_0::from_float` does.
pub fn from_float(xs: &[f32], ys: &mut [BlockQ8_0]) {
    const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == BLOCK_BYTES);
    // SAFETY: `BlockQ8_0` is `repr(C)` plain data of BLOCK_BYTES bytes (asserted above, no
    // padding), every bit pattern valid.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ys.as_mut_ptr() as *mut u8, std::mem::size_of_val(ys)) };
    kernel::from_float(xs, bytes)
}
