//! The GGML block layouts the kernels multiply natively, read straight from the file's bytes:
//! their sizes, dequantization, and the portable (scalar) dot products with quantized activations.
//!
//! Byte layouts (little endian, as in a GGUF file):
//! - Q8_0, 32 values: f16 `d`, 32 × i8 `q`; value `d * q`.
//! - Q5_0, 32 values: f16 `d`, u32 `qh` (bit j = 5th bit of value j), 16 bytes of nibbles (low
//!   nibble = value j, high nibble = value j + 16); value `d * (q - 16)`.
//! - Q4_K, 256 values in 8 sub-blocks of 32: f16 `d`, f16 `dmin`, 12 bytes of packed 6-bit
//!   (scale, min) pairs, 128 bytes of nibbles; value `d * sc * q - dmin * m`.
//! - Q6_K, 256 values in 16 groups of 16: 128 bytes low nibbles, 64 bytes of 2-bit highs,
//!   16 × i8 scales, f16 `d`; value `d * sc * (q - 32)`.

use half::f16;

use super::act::ActRow;
use crate::generic::ggml;

pub const QK8_0: usize = 32;
pub const QK_K: usize = 256;

/// A natively supported block format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Q8_0,
    Q5_0,
    Q4K,
    Q6K,
}

/// How activations are quantized to meet a format (as llama.cpp pairs them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    /// 32-value blocks, one scale each.
    Q8_0,
    /// 256-value blocks, one scale each, plus sums of every 16 values.
    Q8K,
}

impl Format {
    pub fn block_values(self) -> usize {
        match self {
            Format::Q8_0 | Format::Q5_0 => QK8_0,
            Format::Q4K | Format::Q6K => QK_K,
        }
    }

    pub fn block_bytes(self) -> usize {
        match self {
            Format::Q8_0 => 34,
            Format::Q5_0 => 22,
            Format::Q4K => 144,
            Format::Q6K => 210,
        }
    }

    pub fn act(self) -> ActKind {
        match self {
            Format::Q8_0 | Format::Q5_0 => ActKind::Q8_0,
            Format::Q4K | Format::Q6K => ActKind::Q8K,
        }
    }

    /// Writes the `out.len()` values of the blocks in `row` as f32.
    pub fn dequantize(self, row: &[u8], out: &mut [f32]) {
        let (values, bytes) = (self.block_values(), self.block_bytes());
        for (block, y) in row.chunks_exact(bytes).zip(out.chunks_exact_mut(values)) {
            match self {
                Format::Q8_0 => ggml::dequantize_q8_0(block, y),
                Format::Q5_0 => ggml::dequantize_q5_0(block, y),
                Format::Q4K => ggml::dequantize_q4k(block, y),
                Format::Q6K => ggml::dequantize_q6k(block, y),
            }
        }
    }

    /// Portable dot product of one weight row with one quantized activation row.
    pub fn dot_scalar(self, row: &[u8], x: &ActRow) -> f32 {
        match self {
            Format::Q8_0 => ggml::dot_q8_0(row, x),
            Format::Q5_0 => ggml::dot_q5_0(row, x),
            Format::Q4K => ggml::dot_q4k(row, x),
            Format::Q6K => ggml::dot_q6k(row, x),
        }
    }
}

#[inline]
pub fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The 6-bit (scale, min) of sub-block `j` (0..8) of a Q4_K block's 12 packed bytes.
#[inline]
pub fn q4k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    }
}
