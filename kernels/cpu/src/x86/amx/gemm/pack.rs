//! Operands laid out the way the tiles read them.
//!
//! Activations are the B operand: per block of 16 rows and per 32 values of k, a 1 KB tile whose
//! row p holds, for each activation row l, its pair of values (2p, 2p + 1) as one 32-bit word.
//! Weights are the A operand, row-major like the weight itself, so full tiles are read in place;
//! only what a tile would read past the weight (the k tail, the last rows) is copied, zero-padded.

use half::bf16;

use super::kernel::{K_STEP, ROWS, ROW_BYTES, TILE_BYTES};
use crate::pool::Pool;

/// Packed activations, zeros past row m and past k: block b's step s is the tile at word
/// `(b * steps + s) * 256`.
pub struct PackedActivations {
    pub words: Vec<u32>,
    pub steps: usize,
    pub blocks: usize,
}

impl PackedActivations {
    /// Block `b`'s first tile.
    pub fn block(&self, b: usize) -> *const u8 {
        self.words[b * self.steps * TILE_BYTES / 4..].as_ptr() as *const u8
    }
}

/// `x` (m, k) row-major into tiles, a block of 16 rows per work item on `pool` (the
/// blocks are independent; packed on one thread they were 5% of a bf16 prefill's main thread).
pub fn activations(x: &[bf16], m: usize, k: usize, pool: &impl Pool) -> PackedActivations {
    let steps = k.div_ceil(K_STEP);
    let blocks = m.div_ceil(ROWS);
    let block_words = steps * TILE_BYTES / 4;
    let words = crate::pool::filled_in_pieces(pool, blocks * block_words, block_words, |start, dst| {
        // Whole blocks: pieces are one block, or all of them where there is only one.
        let first = start / block_words;
        dst.iter_mut().for_each(|w| {
            w.write(0);
        });
        // SAFETY: every word of the piece was just written.
        let dst = unsafe { &mut *(dst as *mut [std::mem::MaybeUninit<u32>] as *mut [u32]) };
        let end = m.min(first * ROWS + dst.len() / block_words * ROWS);
        let mut i = first * ROWS;
        while i < end {
            let at = (i / ROWS - first) * block_words;
            // A whole block of an even k: 16 pairs of 16 rows at a time, transposed in
            // registers (one word at a time this scatter was 4.6% of a 1-thread bf16 prefill).
            let done = if end - i >= ROWS && k.is_multiple_of(2) && crate::half_slices::has_avx512() {
                // SAFETY: AVX-512 F is present; rows i .. i + 16 are inside x, and the block's
                // words inside dst.
                unsafe { transposed_pairs(&x[i * k..(i + ROWS) * k], k, &mut dst[at..at + block_words]) }
            } else {
                0
            };
            for l in 0..ROWS.min(end - i) {
                // Row i + l is lane l of its block; its pair q sits in tile q / 16, tile row
                // q % 16, which is word 16 q from the block's lane l (a tile is 16 rows of 16
                // words).
                let lane = &mut dst[at + l..];
                let row = &x[(i + l) * k..(i + l + 1) * k];
                let pairs = row.chunks_exact(2);
                let odd = pairs.remainder().first().map(|v| v.to_bits() as u32);
                let mut q = done;
                for pair in pairs.skip(done) {
                    lane[16 * q] = pair[0].to_bits() as u32 | (pair[1].to_bits() as u32) << 16;
                    q += 1;
                }
                if let Some(lo) = odd {
                    lane[16 * q] = lo;
                }
            }
            i += ROWS;
        }
    });
    PackedActivations { words, steps, blocks }
}

/// The first `16 · ⌊k / 32⌋` pairs of 16 rows of `x` (16 · k values, k even) into a block's
/// words: a row's pairs are its values read as 32-bit words, so 16 rows × 16 words transpose into
/// 16 tile rows. Returns the pairs written per row.
///
/// # Safety
/// The CPU has AVX-512 F.
#[target_feature(enable = "avx512f")]
unsafe fn transposed_pairs(x: &[bf16], k: usize, block: &mut [u32]) -> usize {
    use std::arch::x86_64::*;
    let pairs = k / 2 / 16 * 16;
    assert!(x.len() >= ROWS * k && block.len() >= 16 * pairs);
    let (src, dst) = (x.as_ptr() as *const u32, block.as_mut_ptr());
    for q0 in (0..pairs).step_by(16) {
        let mut rows = [_mm512_setzero_ps(); ROWS];
        for (l, v) in rows.iter_mut().enumerate() {
            // SAFETY: words q0 .. q0 + 16 of row l (k / 2 words per row), inside x (asserted).
            *v = unsafe { _mm512_loadu_ps(src.add(l * k / 2 + q0) as *const f32) };
        }
        for (t, v) in crate::x86::avx512::simd::transpose16(rows).into_iter().enumerate() {
            // SAFETY: words 16 (q0 + t) .. + 16 of the block, inside it (asserted).
            unsafe { _mm512_storeu_ps(dst.add(16 * (q0 + t)) as *mut f32, v) };
        }
    }
    pairs
}

/// Rows `j0..j0 + rows` (rows ≤ 16) of `w` (n, k), columns `c0..k`, into a zero-padded block of
/// 16 rows whose width is `k - c0` rounded up to whole tile rows (64 bytes): what a tile may
/// read in full. Row stride: the returned width.
pub fn weight_rows(w: &[bf16], k: usize, j0: usize, rows: usize, c0: usize) -> (Vec<bf16>, usize) {
    let width = (k - c0).next_multiple_of(ROW_BYTES / 2);
    let mut out = vec![bf16::ZERO; ROWS * width];
    for r in 0..rows {
        out[r * width..][..k - c0].copy_from_slice(&w[(j0 + r) * k + c0..(j0 + r + 1) * k]);
    }
    (out, width)
}
