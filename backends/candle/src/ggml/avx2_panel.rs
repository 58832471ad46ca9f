//! AVX2 prefill over weights unpacked once. The fused tiles of `avx2.rs` unpack every weight
//! block again for each pair of activation rows, and with the unpacking constants, 8
//! accumulators and both activation rows live they run out of AVX2's 16 vector registers (the
//! Q5_0 tile spent a third of its time on spills). Here a group of weight rows is first
//! unpacked into a small buffer that stays in L1/L2 (a "panel": per block its f32 scale and 32
//! ready-to-multiply bytes), and the tiles over all activation rows read that. Results are bit
//! for bit those of the one-row kernels: the same integer lane sums, scale products and f32
//! accumulation order.

use std::arch::x86_64::*;

use super::act::ActRow;
use super::avx2::{f16_at, hsum, q5_0_unsigned};

/// Bytes of one unpacked block: the f32 scale, then 32 weight bytes.
pub const Q5_0_PANEL_BLOCK: usize = 36;

/// Unpacks `rows` Q5_0 rows (`row_bytes` each) into `panel` (`rows × blocks × 36` bytes): per
/// block the scale as f32 and the weights as unsigned 5-bit bytes (value + 16).
///
/// # Safety
/// The CPU has avx2, fma and f16c; `w` holds `rows` rows; `panel` is large enough.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unpack_q5_0(w: *const u8, row_bytes: usize, rows: usize, panel: &mut [u8]) {
    let blocks = rows * (row_bytes / 22);
    assert!(panel.len() >= blocks * Q5_0_PANEL_BLOCK, "panel too small");
    let out = panel.as_mut_ptr();
    for i in 0..blocks {
        // Rows are contiguous, so block i of the group is at i × 22.
        let blk = w.add(i * 22);
        let dst = out.add(i * Q5_0_PANEL_BLOCK);
        (dst as *mut f32).write_unaligned(f16_at(blk));
        _mm256_storeu_si256(dst.add(4) as *mut __m256i, q5_0_unsigned(blk));
    }
}

/// `R` unpacked Q5_0 rows (`panel_row` bytes apart) × `C` activation rows. Per block and
/// activation row, `16 Σ x` is formed once (i16 pairs) for all `R` weight rows; per pair,
/// `Σ (q − 16) x` is `maddubs(q, x) − 16 (x₀ + x₁)` in i16 (exact: |·| < 12000), widened by
/// `madd`: the lane sums of `dot_q5_0_rows`.
///
/// # Safety
/// The CPU has avx2, fma and f16c; `panel` holds `R` rows written by [`unpack_q5_0`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_q5_0<const R: usize, const C: usize>(
    panel: *const u8,
    panel_row: usize,
    xs: &[ActRow; C],
) -> [[f32; C]; R] {
    let nb = panel_row / Q5_0_PANEL_BLOCK;
    let (ones, sixteen) = (_mm256_set1_epi16(1), _mm256_set1_epi8(16));
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    for b in 0..nb {
        let mut xv = [_mm256_setzero_si256(); C];
        let mut offset = [_mm256_setzero_si256(); C];
        for c in 0..C {
            xv[c] = _mm256_loadu_si256(xs[c].q.as_ptr().add(b * 32) as *const __m256i);
            offset[c] = _mm256_maddubs_epi16(sixteen, xv[c]);
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let blk = panel.add(r * panel_row + b * Q5_0_PANEL_BLOCK);
            let dw = _mm256_set1_ps((blk as *const f32).read_unaligned());
            let q = _mm256_loadu_si256(blk.add(4) as *const __m256i);
            for c in 0..C {
                let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xv[c]), offset[c]);
                let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                // dw × dx rounded once, as the one-row kernel's scalar product.
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(*xs[c].d.get_unchecked(b)));
                acc[c] = _mm256_fmadd_ps(d, sum, acc[c]);
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for (o, a) in out.iter_mut().zip(acc) {
        for c in 0..C {
            o[c] = hsum(a[c]);
        }
    }
    out
}
