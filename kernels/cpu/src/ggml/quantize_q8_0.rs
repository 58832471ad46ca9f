//! Q8_0 weight quantization at load (`--quant q8_0`), vectorized and bit for bit candle's
//! `BlockQ8_0::from_float`: scale `amax / 127` stored as f16, values `round(x / d)` rounded
//! half away from zero (Rust's `f32::round`) and saturated to i8. candle's scalar loop calls libm
//! `roundf` per value and was most of a quantized speech model's start-up. The scalar block
//! here is candle's arithmetic (the reference, and what a block with NaN or infinities takes);
//! the AVX2 block is `x86/avx2/quantize_q8_0.rs`.

use half::f16;

/// Values per block.
pub(crate) const QK: usize = 32;
/// Bytes per block: the f16 scale, then 32 signed values (GGML's layout, candle's `repr(C)`
/// `BlockQ8_0`).
pub const BLOCK_BYTES: usize = 34;

/// Quantizes `xs` (whole blocks of 32 values) into `ys`, `BLOCK_BYTES` bytes per block, as
/// candle's `BlockQ8_0::from_float` does.
pub fn from_float(xs: &[f32], ys: &mut [u8]) {
    assert_eq!(xs.len() / QK * BLOCK_BYTES, ys.len(), "Q8_0: {} values for {} bytes", xs.len(), ys.len());
    assert!(xs.len().is_multiple_of(QK), "Q8_0: {} values are not whole blocks", xs.len());
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::features().avx2 {
        for (x, y) in xs.chunks_exact(QK).zip(ys.chunks_exact_mut(BLOCK_BYTES)) {
            // SAFETY: AVX2 was just detected; x holds QK values, y BLOCK_BYTES bytes.
            if !unsafe { crate::x86::avx2::quantize_q8_0::block(x, y) } {
                block(x, y);
            }
        }
        return;
    }
    for (x, y) in xs.chunks_exact(QK).zip(ys.chunks_exact_mut(BLOCK_BYTES)) {
        block(x, y);
    }
}

/// One block, as candle's scalar loop computes it (its `max` skips NaN, `as i8` saturates and
/// maps NaN to 0).
fn block(x: &[f32], y: &mut [u8]) {
    let amax = x.iter().fold(0f32, |amax, &v| amax.max(v.abs()));
    let d = amax / ((1 << 7) - 1) as f32;
    let id = if d != 0f32 { 1. / d } else { 0. };
    y[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (q, &v) in y[2..].iter_mut().zip(x) {
        *q = f32::round(v * id) as i8 as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use candle_core::quantized::k_quants::{BlockQ8_0, GgmlType};

    fn candle_blocks(xs: &[f32]) -> Vec<BlockQ8_0> {
        let mut ys = vec![BlockQ8_0::zeros(); xs.len() / QK];
        BlockQ8_0::from_float(xs, &mut ys);
        ys
    }

    fn bytes(ys: &[BlockQ8_0]) -> &[u8] {
        // SAFETY: repr(C) plain data, BLOCK_BYTES each.
        unsafe { std::slice::from_raw_parts(ys.as_ptr() as *const u8, std::mem::size_of_val(ys)) }
    }

    /// Blocks that hit every branch: exact halves (amax 127 gives scale 1), negative halves,
    /// all zeros, a saturating value, tiny and huge magnitudes, NaN and infinities, random data.
    #[test]
    fn vectorized_quantization_matches_candle_bit_for_bit() {
        let mut xs = Vec::new();
        let mut block = |f: &dyn Fn(usize) -> f32| xs.extend((0..QK).map(f));
        block(&|i| if i == 0 { 127.0 } else { i as f32 - 16.5 });
        block(&|i| if i == 31 { -127.0 } else { -(i as f32) - 0.5 });
        block(&|_| 0.0);
        block(&|i| if i == 3 { -0.0 } else { 0.0 });
        block(&|i| (i as f32 * 0.37).sin() * 1e-30);
        block(&|i| (i as f32 * 0.91).cos() * 3e37);
        block(&|i| if i == 7 { f32::NAN } else { i as f32 });
        block(&|i| if i == 9 { f32::INFINITY } else { -(i as f32) });
        block(&|i| if i == 2 { f32::NEG_INFINITY } else { 1.0 });
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..4096 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let scale = f32::from_bits(((state >> 40) as u32 % 60 + 100) << 23);
            block(&|i| {
                let h = state.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(i as u32 * 2);
                ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            });
        }
        let want = candle_blocks(&xs);
        let mut got = vec![0u8; xs.len() / QK * BLOCK_BYTES];
        from_float(&xs, &mut got);
        for (b, (g, w)) in got.chunks(BLOCK_BYTES).zip(bytes(&want).chunks(BLOCK_BYTES)).enumerate() {
            assert_eq!(g, w, "block {b}: {:?}", &xs[b * QK..(b + 1) * QK]);
            let mut scalar = [0u8; BLOCK_BYTES];
            super::block(&xs[b * QK..(b + 1) * QK], &mut scalar);
            assert_eq!(&scalar[..], w, "scalar block {b}");
        }
    }
}
