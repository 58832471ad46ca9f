//! SIMD kernels against the scalar ones (and against each other, bit for bit), on blocks that
//! candle's GGML quantizer writes (the reference quantizer; a dev-dependency only).

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::act::QuantizedActs;
use super::*;

const FORMATS: [(Format, GgmlDType); 4] = [
    (Format::Q8_0, GgmlDType::Q8_0),
    (Format::Q5_0, GgmlDType::Q5_0),
    (Format::Q4K, GgmlDType::Q4K),
    (Format::Q6K, GgmlDType::Q6K),
];

/// A deterministic xorshift stream.
fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    std::iter::repeat_with(move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    })
}

/// Deterministic values with a spread of magnitudes and signs (a few large outliers per row).
fn values(n: usize, seed: u64) -> Vec<f32> {
    xorshift(seed)
        .take(n)
        .enumerate()
        .map(|(i, s)| {
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            if i % 97 == 3 {
                u * 8.0
            } else {
                u
            }
        })
        .collect()
}

/// A `rows × cols` matrix of [`values`] quantized to `format`'s blocks.
struct Blocks {
    format: Format,
    bytes: Vec<u8>,
    cols: usize,
}

impl Blocks {
    fn row_bytes(&self) -> usize {
        row_bytes(self.format, self.cols)
    }

    fn row(&self, j: usize) -> &[u8] {
        &self.bytes[j * self.row_bytes()..(j + 1) * self.row_bytes()]
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

fn quantized(format: Format, g: GgmlDType, rows: usize, cols: usize) -> Blocks {
    let w = Tensor::from_vec(values(rows * cols, 7), (rows, cols), &Device::Cpu).unwrap();
    let bytes = QTensor::quantize(&w, g).unwrap().data().unwrap().into_owned();
    Blocks { format, bytes, cols }
}

/// Every instruction set this CPU has, one-row and grouped kernels, against the scalar code;
/// 20 blocks per row for Q8_0/Q5_0 (even: AVX-512 Q5_0) and 21 (odd: its AVX2 fallback).
#[test]
fn simd_kernels_match_scalar() {
    let isas = [Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| i <= isa());
    for isa in isas {
        for (dtype, g) in FORMATS {
            let per_block = dtype.block_values();
            for cols in [640usize.div_ceil(per_block) * per_block, 672usize.div_ceil(per_block) * per_block] {
                let ours = quantized(dtype, g, GROUP, cols);
                let x = values(cols, 5);
                let acts = QuantizedActs::new(ours.format.act(), &x, cols);
                let (dot, group) = (kernel_for(ours.format, isa), group_kernel_for(ours.format, isa));
                let grouped = group(ours.bytes(), ours.row_bytes(), &acts.row(0));
                for (j, grouped) in grouped.into_iter().enumerate() {
                    let slow = ours.format.dot_scalar(ours.row(j), &acts.row(0));
                    let tol = 1e-5 * slow.abs().max(1.0);
                    let fast = dot(ours.row(j), &acts.row(0));
                    assert!((fast - slow).abs() <= tol, "{isa:?} {dtype:?} row {j}: {fast} vs {slow}");
                    assert!((grouped - slow).abs() <= tol, "{isa:?} {dtype:?} grouped row {j}: {grouped} vs {slow}");
                }
            }
        }
    }
}

/// Deterministic pseudo-random bytes.
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    xorshift(seed).take(n).map(|s| (s >> 32) as u8).collect()
}

/// `R` Q8_0 rows from `w` (`rb` bytes each) through the AVX-512 and the AVX2 kernel, bit for bit.
///
/// # Safety
/// The CPU has AVX-512 VNNI; `w` holds `R` rows, `x` as many values as a row.
#[cfg(target_arch = "x86_64")]
unsafe fn assert_q8_0_rows_match<const R: usize>(w: &[u8], rb: usize, x: &ActRow, what: &str) {
    assert!(w.len() >= R * rb && x.q.len() == rb / 34 * 32);
    let bits = |v: [f32; R]| v.map(f32::to_bits);
    let fast = avx512::dot_q8_0_rows::<R>(w.as_ptr(), rb, x);
    let slow = avx2::dot_q8_0_rows::<R>(w.as_ptr(), rb, x);
    assert_eq!(bits(fast), bits(slow), "{what}, {R} rows: {fast:?} vs {slow:?}");
}

/// The AVX-512 Q8_0 kernels give the AVX2 one's results bit for bit: rows one at a time, in
/// pairs, GROUP at once and 3 (a pair and an odd row), and the prefill tiles of 2 and 4
/// activation rows, for even and odd block counts, on raw
/// blocks with the extremes (every third block's weights start with eight -128, every fifth
/// activation block is all 127 or all -127).
#[cfg(target_arch = "x86_64")]
#[test]
fn q8_0_avx512_matches_avx2_bit_for_bit() {
    if isa() < Isa::Avx512 {
        eprintln!("skipped: no AVX-512 VNNI");
        return;
    }
    for nb in [1usize, 2, 3, 20, 21] {
        let rb = nb * 34;
        let mut w = random_bytes(GROUP * rb, nb as u64);
        let scales = values(GROUP * nb, 8 + nb as u64);
        for (i, (blk, d)) in w.chunks_exact_mut(34).zip(scales).enumerate() {
            blk[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
            if i % 3 == 0 {
                blk[2..10].fill(0x80);
            }
        }
        // Activations in -127..=127, as `QuantizedActs` makes them.
        let mut q: Vec<i8> =
            random_bytes(nb * 32, 100 + nb as u64).into_iter().map(|b| ((b % 255) as i16 - 127) as i8).collect();
        for (i, blk) in q.chunks_exact_mut(32).enumerate() {
            if i % 5 == 0 {
                blk.fill(if i % 2 == 0 { 127 } else { -127 });
            }
        }
        let d: Vec<f32> = values(nb, 9 + nb as u64).into_iter().map(|v| v.abs() + 1e-3).collect();
        let x = ActRow { d: &d, q: &q, sums: &[] };
        let what = format!("{nb} blocks");
        // Prefill tiles: WIDE_COLS activation rows (this one, reversed, negated, rescaled).
        let (rev, neg): (Vec<i8>, Vec<i8>) = (q.iter().rev().copied().collect(), q.iter().map(|v| -v).collect());
        let half_d: Vec<f32> = d.iter().map(|v| v * 0.5).collect();
        let xs = [x, ActRow { q: &rev, ..x }, ActRow { q: &neg, ..x }, ActRow { d: &half_d, ..x }];
        // SAFETY: as below.
        unsafe {
            let wide = avx512::tile_q8_0_pairs::<GROUP, WIDE_COLS>(w.as_ptr(), rb, &xs);
            let pair = avx512::tile_q8_0_pairs::<GROUP, TILE_COLS>(w.as_ptr(), rb, xs[2..].try_into().unwrap());
            for (c, x) in xs.iter().enumerate() {
                let want = avx2::dot_q8_0_rows::<GROUP>(w.as_ptr(), rb, x).map(f32::to_bits);
                assert_eq!(wide.map(|r| r[c].to_bits()), want, "{what}: wide tile, activation row {c}");
                if c >= 2 {
                    assert_eq!(pair.map(|r| r[c - 2].to_bits()), want, "{what}: pair tile, activation row {c}");
                }
            }
        }
        // SAFETY: `isa()` checked the features; `w` holds GROUP rows of `rb` bytes.
        unsafe {
            assert_q8_0_rows_match::<GROUP>(&w, rb, &x, &what);
            assert_q8_0_rows_match::<3>(&w[rb..], rb, &x, &what);
            for r in 0..GROUP {
                assert_q8_0_rows_match::<1>(&w[r * rb..], rb, &x, &format!("{what}, row {r}"));
            }
            assert_q8_0_rows_match::<2>(&w[2 * rb..], rb, &x, &what);
        }
    }
}

/// The AVX-512 Q4_K row pairs give the AVX2 one-row kernel's results bit for bit: 1, 4 and 12
/// blocks (rows of 256, 1024 and 3072 values), scales and mins over their whole 6-bit range,
/// f16 d and dmin of both signs and zero, activations at the extremes.
#[cfg(target_arch = "x86_64")]
#[test]
fn q4k_avx512_row_pairs_match_avx2_bit_for_bit() {
    if isa() < Isa::Avx512 {
        eprintln!("skipped: no AVX-512 VNNI");
        return;
    }
    for nb in [1usize, 4, 12] {
        let rb = nb * 144;
        let mut w = random_bytes(GROUP * rb, 40 + nb as u64);
        let scales = values(2 * GROUP * nb, 41 + nb as u64);
        for (i, (blk, d)) in w.chunks_exact_mut(144).zip(scales.chunks_exact(2)).enumerate() {
            let (d, dmin) = if i % 7 == 3 { (0.0, -0.0) } else { (d[0], d[1]) };
            blk[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
            blk[2..4].copy_from_slice(&half::f16::from_f32(dmin).to_le_bytes());
        }
        let mut q: Vec<i8> =
            random_bytes(nb * 256, 50 + nb as u64).into_iter().map(|b| ((b % 255) as i16 - 127) as i8).collect();
        for (i, blk) in q.chunks_exact_mut(32).enumerate() {
            if i % 5 == 0 {
                blk.fill(if i % 2 == 0 { 127 } else { -127 });
            }
        }
        let sums: Vec<i16> = q.chunks_exact(16).map(|c| c.iter().map(|&v| v as i16).sum()).collect();
        let d: Vec<f32> = values(nb, 51 + nb as u64).into_iter().map(|v| v.abs() + 1e-3).collect();
        let x = ActRow { d: &d, q: &q, sums: &sums };
        // SAFETY: `isa()` checked the features; `w` holds GROUP rows of `rb` bytes.
        let (fast, slow) = unsafe {
            let fast = avx512::dot_q4k_row_pairs::<GROUP>(w.as_ptr(), rb, &x);
            let slow: Vec<f32> = (0..GROUP).map(|r| avx2::dot_q4k(&w[r * rb..(r + 1) * rb], &x)).collect();
            (fast, slow)
        };
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fast), bits(&slow), "{nb} blocks: {fast:?} vs {slow:?}");
    }
}

/// The unpack-once Q5_0 prefill (taken on AVX2-only CPUs) equals the AVX2 one-row kernel bit
/// for bit; checked on every CPU with AVX2, since AVX-512 ones do not reach it through matmul.
#[cfg(target_arch = "x86_64")]
#[test]
fn q5_0_panel_tiles_match_avx2_rows_exactly() {
    if isa() < Isa::Avx2 {
        return;
    }
    let (blocks, panel_row) = (21, 21 * avx2_panel::Q5_0_PANEL_BLOCK);
    let ours = quantized(Format::Q5_0, GgmlDType::Q5_0, GROUP, blocks * 32);
    let x = values(PANEL_COLS * blocks * 32, 9);
    let acts = QuantizedActs::new(ours.format.act(), &x, blocks * 32);
    let xs: [ActRow; PANEL_COLS] = std::array::from_fn(|i| acts.row(i));
    let mut panel = vec![0u8; GROUP * panel_row];
    // SAFETY: avx2/fma/f16c checked by `isa()`; the panel holds GROUP rows, each offset row
    // blocks × 16 values.
    let got = unsafe {
        avx2_panel::unpack_q5_0(ours.bytes().as_ptr(), ours.row_bytes(), GROUP, &mut panel);
        let offsets = avx2_panel::q5_0_pair_offsets(&acts.q);
        let offsets: [&[i16]; PANEL_COLS] = std::array::from_fn(|i| &offsets[i * blocks * 16..(i + 1) * blocks * 16]);
        avx2_panel::tile_q5_0::<GROUP, PANEL_COLS>(panel.as_ptr(), panel_row, &xs, &offsets)
    };
    for (r, got) in got.iter().enumerate() {
        for (c, got) in got.iter().enumerate() {
            // SAFETY: as above.
            let want = unsafe { avx2::dot_q5_0(ours.row(r), &xs[c]) };
            assert_eq!(got.to_bits(), want.to_bits(), "row {r}, activation row {c}");
        }
    }
}
