//! The bf16 products (`crate::half_gemm`) on AVX-512 BF16.
//!
//! Without widening: `vdpbf16ps` tiles of 32 activation rows (two registers of 16 lanes, each
//! lane one row's pair of bf16s; 16 for a last odd block) × 8 weight rows (each pair
//! broadcast), 16 f32 accumulators, the whole k per tile. The activations are repacked once per call into that
//! lane order (m · k values, small next to the weight); the weight is read in place, its rows
//! split across the thread pool 8 at a time.

use std::arch::x86_64::*;

use half::bf16;

use crate::out_ptr::OutPtr;
use crate::pool::Pool;

/// Weight rows per tile.
const NR: usize = 8;
/// Activation rows per register (16 f32 lanes).
const LANES: usize = 16;

/// Whether the CPU has AVX-512 BF16 (and F/BW/VL for the loads and the masked row stores).
pub fn available() -> bool {
    let f = crate::cpu_features::features();
    f.avx512vl() && f.avx512bf16
}

/// `out (m, n) = x (m, k) @ wᵀ` for bf16 `x` and `w` (n, k), k even. Panics on a CPU
/// without AVX-512 BF16 ([`available`]). The weight rows are split over `pool`.
pub fn product(w: &[bf16], x: &[bf16], m: usize, n: usize, k: usize, pool: &impl Pool, out: &mut [f32]) {
    assert!(available() && k.is_multiple_of(2) && w.len() >= n * k && x.len() >= m * k && out.len() >= m * n);
    let kp = k / 2;
    // Blocks of 16 rows (zeros past m).
    let blocks = m.div_ceil(LANES);
    let mut xp = vec![0u32; blocks * kp * LANES];
    // SAFETY: the CPU has AVX-512 F (asserted above); xp holds blocks · kp · LANES values.
    unsafe { pack(x, m, kp, &mut xp) };
    let units = n.div_ceil(NR);
    let ptr = OutPtr(out.as_mut_ptr());
    let body = |range: std::ops::Range<usize>| {
        for u in range {
            // SAFETY: the CPU has AVX-512 F/BW/BF16 (asserted above); the shapes were checked.
            unsafe { tile_column(w, &xp, m, n, k, blocks, u * NR, &ptr) }
        }
    };
    pool.execute_chunked_if(m * n * k >= crate::half_gemm::PARALLEL_MIN, units, body);
}

/// The rows of `x` (m rows of kp bf16 pairs) in the tiles' lane order: per block of 16 rows
/// and pair p, the block's 16 pairs p as one register (zeros past m), moved 16 × 16 pairs
/// at a time through a register transpose.
#[target_feature(enable = "avx512f")]
unsafe fn pack(x: &[bf16], m: usize, kp: usize, xp: &mut [u32]) {
    let pairs = x.as_ptr() as *const i32;
    for b in 0..m.div_ceil(LANES) {
        let rows = (m - b * LANES).min(LANES);
        for p0 in (0..kp).step_by(LANES) {
            let len = (kp - p0).min(LANES);
            let mask = super::simd::first_lanes(len);
            let r: [__m512; LANES] = std::array::from_fn(|l| {
                if l < rows {
                    // SAFETY: pairs p0..p0 + len of row b · 16 + l < m (masked past them).
                    _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(mask, pairs.add((b * LANES + l) * kp + p0)))
                } else {
                    _mm512_setzero_ps()
                }
            });
            // Register j: pair p0 + j of the block's 16 rows.
            for (j, v) in super::simd::transpose16(r).into_iter().take(len).enumerate() {
                // SAFETY: (b · kp + p0 + j) · 16 + 16 <= blocks · kp · 16.
                _mm512_storeu_ps(xp.as_mut_ptr().add((b * kp + p0 + j) * LANES) as *mut f32, v);
            }
        }
    }
}

/// Output columns j0..j0 + NR (fewer at the end) for every activation row: pairs of
/// 16-row blocks, and a last odd block alone (so 5 rows compute 16, not 32).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_column(w: &[bf16], xp: &[u32], m: usize, n: usize, k: usize, blocks: usize, j0: usize, out: &OutPtr) {
    // Past the last weight row, repeat it (those results are dropped).
    let rows: [*const u32; NR] = std::array::from_fn(|r| w.as_ptr().add((j0 + r).min(n - 1) * k) as *const u32);
    let mut b = 0;
    while b + 2 <= blocks {
        tile::<2>(&rows, xp, m, n, k, b, j0, out);
        b += 2;
    }
    if b < blocks {
        tile::<1>(&rows, xp, m, n, k, b, j0, out);
    }
}

/// MB 16-row blocks from block `b` × NR weight rows, over the whole k.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn tile<const MB: usize>(
    rows: &[*const u32; NR],
    xp: &[u32],
    m: usize,
    n: usize,
    k: usize,
    b: usize,
    j0: usize,
    out: &OutPtr,
) {
    let kp = k / 2;
    let bh = |v: __m512i| std::mem::transmute::<__m512i, __m512bh>(v);
    let xs: [*const u32; MB] = std::array::from_fn(|h| xp.as_ptr().add((b + h) * kp * LANES));
    let mut acc = [[_mm512_setzero_ps(); MB]; NR];
    for p in 0..kp {
        // SAFETY: p < kp pairs of each packed block and of each weight row (k = 2 kp).
        let a: [__m512bh; MB] = std::array::from_fn(|h| bh(_mm512_loadu_si512(xs[h].add(p * LANES) as *const _)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let wv = bh(_mm512_set1_epi32(rows[r].add(p).read_unaligned() as i32));
            for h in 0..MB {
                acc[h] = _mm512_dpbf16_ps(acc[h], a[h], wv);
            }
        }
    }
    let cols = (n - j0).min(NR);
    #[allow(clippy::needless_range_loop)] // h picks the same block from every column's accumulators
    for h in 0..MB {
        let i0 = (b + h) * LANES;
        let v: [__m512; NR] = std::array::from_fn(|r| acc[r][h]);
        // SAFETY: rows i0.. (< m) × columns j0..j0 + cols are in the m × n output and
        // written by this unit only; the CPU has AVX-512 F/VL.
        super::simd::store_columns8(&v, out.at(i0 * n + j0), n, (m - i0).min(LANES), cols);
    }
}
