//! Q4_K weight quantization at load (`--quant q4_k`), bit for bit candle's
//! `BlockQ4K::from_float`: per 32 values a scale and a min found by candle's iterative search
//! (`make_qkx1_quants`, 15 levels, up to 5 rounds), both stored as 6-bit multiples of the
//! block's f16 `d` / `dmin`, then 4-bit values. The arithmetic is candle's, expression for
//! expression (the same f32 operations in the same order); what changes is cost: candle
//! allocates a vector per 32 values and calls libm `roundf` for every value of every round,
//! which made loading the 0.6B speech model with `--quant q4_k` take ~13 s. The sub-blocks'
//! least and greatest values (`total_cmp` order) and the final levels are vectorized too
//! (4.3-4.8 s -> 2.2 s for that load on a 2-core Xeon), and with AVX-512 two blocks' searches
//! share a 16-lane register (2.2 -> 1.8 s).
//!
//! The scalar search is here (the reference); its lane-parallel forms are
//! `x86/avx2/quantize_q4k.rs` and `x86/avx512/quantize_q4k.rs`.

use half::f16;

use crate::ggml::formats::q4k_scale_min;
#[cfg(target_arch = "x86_64")]
use crate::x86::{avx2::quantize_q4k as avx2, avx512::quantize_q4k as avx512};

/// Values per block and per sub-block.
pub(crate) const QK_K: usize = 256;
pub(crate) const SUB: usize = 32;
/// Bytes per block: d, dmin (f16), 12 packed 6-bit scales and mins, 128 bytes of nibbles
/// (GGML's layout, candle's `repr(C)` `BlockQ4K`).
pub const BLOCK_BYTES: usize = 144;

/// Quantizes `xs` (whole blocks of 256 values) into `ys`, `BLOCK_BYTES` bytes per block in
/// GGML's layout, as candle's `BlockQ4K::from_float` does.
pub fn from_float(xs: &[f32], ys: &mut [u8]) {
    assert_eq!(xs.len() / QK_K * BLOCK_BYTES, ys.len(), "Q4_K: {} values for {} bytes", xs.len(), ys.len());
    assert!(xs.len().is_multiple_of(QK_K), "Q4_K: {} values are not whole blocks", xs.len());
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::half_slices::has_avx512() {
        // Two blocks' searches in one 16-lane register.
        for (x, y) in xs.chunks_exact(2 * QK_K).zip(ys.chunks_exact_mut(2 * BLOCK_BYTES)) {
            let (a, b) = x.split_at(QK_K);
            let (a, b): (&[f32; QK_K], &[f32; QK_K]) = (a.try_into().expect("QK_K"), b.try_into().expect("QK_K"));
            // SAFETY: AVX-512 F/BW checked by `has_avx512`.
            let [found_a, found_b] = unsafe { avx512::scales_mins_pair(a, b) };
            let (ya, yb) = y.split_at_mut(BLOCK_BYTES);
            block(a, found_a, block_bytes(ya));
            block(b, found_b, block_bytes(yb));
        }
        done = xs.len() / (2 * QK_K) * 2;
    }
    for (x, y) in xs[done * QK_K..].chunks_exact(QK_K).zip(ys[done * BLOCK_BYTES..].chunks_exact_mut(BLOCK_BYTES)) {
        let x: &[f32; QK_K] = x.try_into().expect("QK_K values");
        block(x, scales_mins(x), block_bytes(y));
    }
}

/// One block's bytes of the output.
fn block_bytes(y: &mut [u8]) -> &mut [u8; BLOCK_BYTES] {
    y.try_into().expect("BLOCK_BYTES")
}

/// `f32::round` (half away from zero) then `as i32` (saturating; NaN gives 0), which is
/// candle's `nearest_int`, without the libm call: below 2^23 the truncation and the remainder
/// are exact, above it every f32 is already an integer.
#[inline]
fn nearest_int(v: f32) -> i32 {
    // 2^23 and beyond, infinities and NaN (which compares false).
    if v.abs() >= 8_388_608.0 || v.is_nan() {
        return v as i32;
    }
    let t = v as i32;
    let frac = v - t as f32;
    // Branch-free: rounding directions are data-dependent and would mispredict.
    t + (frac >= 0.5) as i32 - (frac <= -0.5) as i32
}

/// candle's `make_qkx1_quants(nmax, ntry, x)` for one sub-block: (scale, -min).
fn scale_min(nmax: i32, ntry: usize, x: &[f32; SUB]) -> (f32, f32) {
    let n = x.len();
    let mut l = [0u8; SUB];
    let min = *x.iter().min_by(|a, b| a.total_cmp(b)).unwrap_or(&x[0]);
    let max = *x.iter().max_by(|a, b| a.total_cmp(b)).unwrap_or(&x[0]);
    if max == min {
        return (0.0, 0.0);
    }
    let mut min = min.min(0.);
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    for _ in 0..ntry {
        let mut sumlx = 0.0;
        let mut suml2 = 0;
        let mut did_change = false;
        for (value, l) in x.iter().zip(l.iter_mut()) {
            let li = nearest_int(iscale * (value - min)).clamp(0, nmax);
            if li as u8 != *l {
                *l = li as u8;
                did_change = true;
            }
            sumlx += (value - min) * li as f32;
            suml2 += li * li;
        }
        scale = sumlx / suml2 as f32;
        let sum: f32 = x.iter().zip(l.iter()).map(|(xi, &li)| xi - scale * li as f32).sum();
        min = sum / n as f32;
        if min > 0.0 {
            min = 0.0;
        }
        iscale = 1.0 / scale;
        if !did_change {
            break;
        }
    }
    (scale, -min)
}

/// The (scale, -min) of each of a block's 8 sub-blocks.
fn scales_mins(x: &[f32; QK_K]) -> ([f32; 8], [f32; 8]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::features().avx2 {
        // SAFETY: AVX2 was just detected.
        return unsafe { avx2::scales_mins(x) };
    }
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    for (j, sub) in x.chunks_exact(SUB).enumerate() {
        (scales[j], mins[j]) = scale_min(15, 5, sub.try_into().expect("SUB values"));
    }
    (scales, mins)
}

/// One block of 256 values into its 144 bytes, given its sub-blocks' (scale, -min).
fn block(x: &[f32; QK_K], (scales, mins): ([f32; 8], [f32; 8]), out: &mut [u8; BLOCK_BYTES]) {
    let max_scale = scales.iter().fold(0.0, |max, &val| val.max(max));
    let max_min = mins.iter().fold(0.0, |max, &val| val.max(max));
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };

    let mut packed = [0u8; 12];
    for j in 0..QK_K / SUB {
        let ls = nearest_int(inv_scale * scales[j]).min(63) as u8;
        let lm = nearest_int(inv_min * mins[j]).min(63) as u8;
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (f16::from_f32(max_scale / 63.0), f16::from_f32(max_min / 63.0));

    let mut l = [0u8; QK_K];
    for j in 0..QK_K / SUB {
        let (sc, m) = q4k_scale_min(&packed, j);
        let d = d.to_f32() * sc as f32;
        if d != 0.0 {
            let dm = dmin.to_f32() * m as f32;
            let (xs, ls) = (&x[SUB * j..SUB * (j + 1)], &mut l[SUB * j..SUB * (j + 1)]);
            #[cfg(target_arch = "x86_64")]
            if crate::cpu_features::features().avx2 {
                // SAFETY: AVX2 was just detected.
                unsafe { avx2::levels(xs, dm, d, ls) };
                continue;
            }
            for (l, &x) in ls.iter_mut().zip(xs) {
                *l = nearest_int((x + dm) / d).clamp(0, 15) as u8;
            }
        }
    }

    out[0..2].copy_from_slice(&d.to_le_bytes());
    out[2..4].copy_from_slice(&dmin.to_le_bytes());
    out[4..16].copy_from_slice(&packed);
    // Nibbles: low halves hold values 64i..64i+32, high halves 64i+32..64i+64.
    for (i, q) in out[16..].chunks_exact_mut(32).enumerate() {
        for (v, q) in q.iter_mut().enumerate() {
            *q = l[64 * i + v] | (l[64 * i + v + 32] << 4);
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::k_quants::GgmlType;

    use super::*;

    use candle_core::quantized::k_quants::BlockQ4K;

    fn bytes(ys: &[BlockQ4K]) -> &[u8] {
        // SAFETY: repr(C) plain data, BLOCK_BYTES each.
        unsafe { std::slice::from_raw_parts(ys.as_ptr() as *const u8, std::mem::size_of_val(ys)) }
    }

    #[test]
    fn nearest_int_is_round_then_saturating_cast() {
        let cases = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            0.49999997,
            -0.49999997,
            8_388_607.5,
            -8_388_607.5,
            8_388_608.0,
            1e10,
            -1e10,
            f32::MAX,
            f32::MIN,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
        ];
        for v in cases {
            assert_eq!(nearest_int(v), v.round() as i32, "{v}");
        }
    }

    /// Blocks that hit every branch (constant and all-zero sub-blocks, all-negative and
    /// all-positive data, tiny and huge magnitudes, NaN and infinities) and random data with
    /// outliers.
    #[test]
    fn quantization_matches_candle_bit_for_bit() {
        let mut xs = Vec::new();
        let mut block = |f: &dyn Fn(usize) -> f32| xs.extend((0..QK_K).map(f));
        block(&|_| 0.0);
        block(&|_| -0.0);
        block(&|i| if i < 32 { 1.25 } else { (i as f32 * 0.3).sin() });
        block(&|i| if i < 128 { 0.0 } else { (i as f32 * 0.7).cos() });
        block(&|i| if i % 32 == 0 { 0.5 } else { 0.25 });
        block(&|i| -(i as f32) - 0.5);
        block(&|i| i as f32 * 0.125 + 3.0);
        block(&|i| (i as f32 * 0.37).sin() * 1e-30);
        block(&|i| (i as f32 * 0.91).cos() * 3e30);
        block(&|i| if i == 7 { f32::NAN } else { i as f32 });
        block(&|i| if i == 40 { f32::INFINITY } else { -(i as f32) });
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for b in 0..512 {
            block(&|i| {
                let mut s = state ^ (b as u64).wrapping_mul(0x9E37_79B9) ^ i as u64;
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                if i % 61 == 5 {
                    u * 12.0
                } else {
                    u * 0.05
                }
            });
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
        // The lane-parallel search gives the scalar search's floats exactly (before the 6-bit
        // rounding of the block could hide a difference), 8 lanes and 16.
        #[cfg(target_arch = "x86_64")]
        if crate::half_slices::has_avx512() {
            for pair in xs.chunks_exact(2 * QK_K) {
                let (a, b) = pair.split_at(QK_K);
                // SAFETY: AVX-512 F/BW checked just above.
                let found = unsafe { avx512::scales_mins_pair(a.try_into().unwrap(), b.try_into().unwrap()) };
                for (x, (scales, mins)) in [a, b].into_iter().zip(found) {
                    for (j, sub) in x.chunks_exact(SUB).enumerate() {
                        let (scale, min) = scale_min(15, 5, sub.try_into().unwrap());
                        assert_eq!(
                            (scales[j].to_bits(), mins[j].to_bits()),
                            (scale.to_bits(), min.to_bits()),
                            "{sub:?}"
                        );
                    }
                }
            }
        }
        for x in xs.chunks_exact(QK_K) {
            let (scales, mins) = scales_mins(x.try_into().unwrap());
            for (j, sub) in x.chunks_exact(SUB).enumerate() {
                let (scale, min) = scale_min(15, 5, sub.try_into().unwrap());
                assert_eq!((scales[j].to_bits(), mins[j].to_bits()), (scale.to_bits(), min.to_bits()), "{sub:?}");
            }
        }
        let n = xs.len() / QK_K;
        let (mut ours, mut theirs) = (vec![0u8; n * BLOCK_BYTES], vec![BlockQ4K::zeros(); n]);
        from_float(&xs, &mut ours);
        BlockQ4K::from_float(&xs, &mut theirs);
        for (i, (a, b)) in ours.chunks(BLOCK_BYTES).zip(bytes(&theirs).chunks(BLOCK_BYTES)).enumerate() {
            assert_eq!(a, b, "block {i}");
        }
    }
}
