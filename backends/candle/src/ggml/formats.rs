//! The GGML block layouts this backend multiplies natively, read straight from the file's bytes:
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
use infer_core::DType;

use super::act::ActRow;

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
    pub fn from_dtype(dtype: DType) -> Option<Format> {
        match dtype {
            DType::Q8_0 => Some(Format::Q8_0),
            DType::Q5_0 => Some(Format::Q5_0),
            DType::Q4K => Some(Format::Q4K),
            DType::Q6K => Some(Format::Q6K),
            _ => None,
        }
    }

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
                Format::Q8_0 => dequantize_q8_0(block, y),
                Format::Q5_0 => dequantize_q5_0(block, y),
                Format::Q4K => dequantize_q4k(block, y),
                Format::Q6K => dequantize_q6k(block, y),
            }
        }
    }

    /// Portable dot product of one weight row with one quantized activation row.
    pub fn dot_scalar(self, row: &[u8], x: &ActRow) -> f32 {
        match self {
            Format::Q8_0 => dot_q8_0(row, x),
            Format::Q5_0 => dot_q5_0(row, x),
            Format::Q4K => dot_q4k(row, x),
            Format::Q6K => dot_q6k(row, x),
        }
    }
}

#[inline]
pub fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// The 32 values of a Q5_0 block as i8 in [-16, 15].
#[inline]
fn q5_0_values(block: &[u8]) -> [i8; 32] {
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let mut v = [0i8; 32];
    for j in 0..16 {
        let lo = (block[6 + j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        let hi = (block[6 + j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        v[j] = lo as i8 - 16;
        v[j + 16] = hi as i8 - 16;
    }
    v
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

/// The 256 values of a Q6_K block as unsigned 6-bit q (value = d * sc[i / 16] * (q - 32)).
#[inline]
fn q6k_values(block: &[u8]) -> [u8; 256] {
    let (ql, qh) = (&block[..128], &block[128..192]);
    let mut v = [0u8; 256];
    for half in 0..2 {
        let (ql, qh, v) = (&ql[64 * half..], &qh[32 * half..], &mut v[128 * half..]);
        for l in 0..32 {
            v[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
            v[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
            v[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            v[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    v
}

fn dequantize_q8_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, &q) in y.iter_mut().zip(&block[2..34]) {
        *y = d * (q as i8) as f32;
    }
}

fn dequantize_q5_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, q) in y.iter_mut().zip(q5_0_values(block)) {
        *y = d * q as f32;
    }
}

fn dequantize_q4k(block: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let (scales, qs) = (&block[4..16], &block[16..144]);
    for j in 0..4 {
        let (sc1, m1) = q4k_scale_min(scales, 2 * j);
        let (sc2, m2) = q4k_scale_min(scales, 2 * j + 1);
        let (d1, min1, d2, min2) = (d * sc1 as f32, dmin * m1 as f32, d * sc2 as f32, dmin * m2 as f32);
        for l in 0..32 {
            let q = qs[32 * j + l];
            y[64 * j + l] = d1 * (q & 0x0F) as f32 - min1;
            y[64 * j + 32 + l] = d2 * (q >> 4) as f32 - min2;
        }
    }
}

fn dequantize_q6k(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 208);
    let scales = &block[192..208];
    for (i, q) in q6k_values(block).into_iter().enumerate() {
        y[i] = d * (scales[i / 16] as i8) as f32 * (q as i32 - 32) as f32;
    }
}

fn dot_q8_0(row: &[u8], x: &ActRow) -> f32 {
    let mut acc = 0f32;
    for (b, block) in row.chunks_exact(34).enumerate() {
        let xq = &x.q[b * QK8_0..(b + 1) * QK8_0];
        let s: i32 = block[2..34].iter().zip(xq).map(|(&w, &v)| (w as i8) as i32 * v as i32).sum();
        acc += f16_at(block, 0) * x.d[b] * s as f32;
    }
    acc
}

fn dot_q5_0(row: &[u8], x: &ActRow) -> f32 {
    let mut acc = 0f32;
    for (b, block) in row.chunks_exact(22).enumerate() {
        let xq = &x.q[b * QK8_0..(b + 1) * QK8_0];
        let s: i32 = q5_0_values(block).iter().zip(xq).map(|(&w, &v)| w as i32 * v as i32).sum();
        acc += f16_at(block, 0) * x.d[b] * s as f32;
    }
    acc
}

fn dot_q4k(row: &[u8], x: &ActRow) -> f32 {
    let mut acc = 0f32;
    for (b, block) in row.chunks_exact(144).enumerate() {
        let xq = &x.q[b * QK_K..(b + 1) * QK_K];
        let sums = &x.sums[b * 16..(b + 1) * 16];
        let (scales, qs) = (&block[4..16], &block[16..144]);
        let (mut sumi, mut summ) = (0i32, 0i32);
        for j in 0..8 {
            let (sc, m) = q4k_scale_min(scales, j);
            let (half, shift) = (j / 2, 4 * (j % 2));
            let s: i32 = (0..32).map(|l| ((qs[32 * half + l] >> shift) & 0x0F) as i32 * xq[32 * j + l] as i32).sum();
            sumi += sc as i32 * s;
            summ += m as i32 * (sums[2 * j] as i32 + sums[2 * j + 1] as i32);
        }
        acc += x.d[b] * (f16_at(block, 0) * sumi as f32 - f16_at(block, 2) * summ as f32);
    }
    acc
}

fn dot_q6k(row: &[u8], x: &ActRow) -> f32 {
    let mut acc = 0f32;
    for (b, block) in row.chunks_exact(210).enumerate() {
        let xq = &x.q[b * QK_K..(b + 1) * QK_K];
        let sums = &x.sums[b * 16..(b + 1) * 16];
        let q = q6k_values(block);
        let mut sumi = 0i32;
        for g in 0..16 {
            let s: i32 = (16 * g..16 * g + 16).map(|i| q[i] as i32 * xq[i] as i32).sum();
            sumi += (block[192 + g] as i8) as i32 * (s - 32 * sums[g] as i32);
        }
        acc += x.d[b] * f16_at(block, 208) * sumi as f32;
    }
    acc
}
