//! The portable GGML kernels: dequantization and the dot products of weight rows with quantized
//! activations, block by block (the reference every SIMD kernel is tested against, and what a
//! CPU without AVX2 runs). Block layouts: [`crate::ggml::formats`].

use crate::ggml::act::ActRow;
use crate::ggml::formats::{f16_at, q4k_scale_min, QK8_0, QK_K};

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

pub(crate) fn dequantize_q8_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, &q) in y.iter_mut().zip(&block[2..34]) {
        *y = d * (q as i8) as f32;
    }
}

pub(crate) fn dequantize_q5_0(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 0);
    for (y, q) in y.iter_mut().zip(q5_0_values(block)) {
        *y = d * q as f32;
    }
}

pub(crate) fn dequantize_q4k(block: &[u8], y: &mut [f32]) {
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

pub(crate) fn dequantize_q6k(block: &[u8], y: &mut [f32]) {
    let d = f16_at(block, 208);
    let scales = &block[192..208];
    for (i, q) in q6k_values(block).into_iter().enumerate() {
        y[i] = d * (scales[i / 16] as i8) as f32 * (q as i32 - 32) as f32;
    }
}

pub(crate) fn dot_q8_0(row: &[u8], x: &ActRow) -> f32 {
    let mut acc = 0f32;
    for (b, block) in row.chunks_exact(34).enumerate() {
        let xq = &x.q[b * QK8_0..(b + 1) * QK8_0];
        let s: i32 = block[2..34].iter().zip(xq).map(|(&w, &v)| (w as i8) as i32 * v as i32).sum();
        acc += f16_at(block, 0) * x.d[b] * s as f32;
    }
    acc
}

pub(crate) fn dot_q5_0(row: &[u8], x: &ActRow) -> f32 {
    let mut acc = 0f32;
    for (b, block) in row.chunks_exact(22).enumerate() {
        let xq = &x.q[b * QK8_0..(b + 1) * QK8_0];
        let s: i32 = q5_0_values(block).iter().zip(xq).map(|(&w, &v)| w as i32 * v as i32).sum();
        acc += f16_at(block, 0) * x.d[b] * s as f32;
    }
    acc
}

pub(crate) fn dot_q4k(row: &[u8], x: &ActRow) -> f32 {
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

pub(crate) fn dot_q6k(row: &[u8], x: &ActRow) -> f32 {
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
