//! AVX2 prefill over weights unpacked once. The fused tiles of `ggml.rs` unpack every weight
//! block again for each pair of activation rows, and with the unpacking constants, 8
//! accumulators and both activation rows live they run out of AVX2's 16 vector registers (the
//! Q5_0 tile spent a third of its time on spills). Here a group of weight rows is first
//! unpacked into a small buffer that stays in L1/L2 (a "panel": per block its f32 scale and 32
//! ready-to-multiply bytes), and the tiles over all activation rows read that. Results are bit
//! for bit those of the one-row kernels: the same integer lane sums, scale products and f32
//! accumulation order.

use std::arch::x86_64::*;

use crate::ggml::act::ActRow;
use crate::x86::avx2::ggml::{f16_at, hsum, q5_0_unsigned};

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

/// `16 (x₂ᵢ + x₂ᵢ₊₁)` for every byte pair of the activations `q`, as i16: the part of
/// `Σ (w − 16) x` that depends on the activations only, formed once per product.
///
/// # Safety
/// The CPU has avx2, fma and f16c.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5_0_pair_offsets(q: &[i8]) -> Vec<i16> {
    let mut out = vec![0i16; q.len() / 2];
    let sixteen = _mm256_set1_epi8(16);
    for (i, chunk) in q.chunks_exact(32).enumerate() {
        let x = _mm256_loadu_si256(chunk.as_ptr() as *const __m256i);
        _mm256_storeu_si256(out.as_mut_ptr().add(16 * i) as *mut __m256i, _mm256_maddubs_epi16(sixteen, x));
    }
    out
}

/// `R` unpacked Q5_0 rows (`panel_row` bytes apart) × `C` activation rows with their pair
/// offsets ([`q5_0_pair_offsets`]). One weight row at a time against all `C` activation rows,
/// so only `C` accumulators are live (the activations are re-read from L1 for each row). Per
/// pair, `Σ (q − 16) x` is `maddubs(q, x) − 16 (x₀ + x₁)` in i16 (exact: |·| < 12000),
/// widened by `madd`: the lane sums of `dot_q5_0_rows`.
///
/// # Safety
/// The CPU has avx2, fma and f16c; `panel` holds `R` rows written by [`unpack_q5_0`]; each
/// `offsets[c]` holds `panel_row / 36 × 16` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_q5_0<const R: usize, const C: usize>(
    panel: *const u8,
    panel_row: usize,
    xs: &[ActRow; C],
    offsets: &[&[i16]; C],
) -> [[f32; C]; R] {
    let nb = panel_row / Q5_0_PANEL_BLOCK;
    let ones = _mm256_set1_epi16(1);
    let mut out = [[0f32; C]; R];
    for (r, out) in out.iter_mut().enumerate() {
        let row = panel.add(r * panel_row);
        let mut acc = [_mm256_setzero_ps(); C];
        for b in 0..nb {
            let blk = row.add(b * Q5_0_PANEL_BLOCK);
            let dw = _mm256_set1_ps((blk as *const f32).read_unaligned());
            let q = _mm256_loadu_si256(blk.add(4) as *const __m256i);
            for c in 0..C {
                let x = _mm256_loadu_si256(xs[c].q.as_ptr().add(b * 32) as *const __m256i);
                let offset = _mm256_loadu_si256(offsets[c].as_ptr().add(b * 16) as *const __m256i);
                let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, x), offset);
                let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                // dw × dx rounded once, as the one-row kernel's scalar product.
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(*xs[c].d.get_unchecked(b)));
                acc[c] = _mm256_fmadd_ps(d, sum, acc[c]);
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum(a);
        }
    }
    out
}
