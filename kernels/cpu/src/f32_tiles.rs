//! f32 weight products with a few dozen activation rows: out (m, n) = x (m, k) @ wᵀ for a
//! row-major f32 weight w (n, k), where m is past the decode kernel's ([`gemv::MAX_ROWS`]) and
//! short of what gemm amortizes its packing over: the dispatch, the packing and the tile walk,
//! generic over one register's [`Lanes`]; the registers are `x86/avx2/f32_tiles.rs` and
//! `x86/avx512/f32_tiles.rs`.
//!
//! gemm packs the whole weight on every call; with 25–100 rows (an audio codec's transformer
//! and ConvNeXt layers, a short prompt's prefill) that copy costs more than the arithmetic. Here the weight is read in
//! place: the activations are repacked once per call into blocks of one register's rows (each
//! lane one row, k values in order), and a tile of `NR` weight rows × one or two blocks keeps
//! its accumulators in registers over the whole k, each weight value broadcast once per tile.
//! No horizontal sums; each output is one lane's multiply-adds in k order, so a row's result
//! does not depend on m, on the other rows or on the thread count.
//!
//! AVX-512F (16 lanes, 8 weight rows: 16 accumulators) or AVX2 + FMA (8 lanes, 6 weight rows:
//! 12 accumulators), capped by `INFER_GGML_ISA` like the other kernels; elsewhere `None` (gemm).
//!
//! [`gemv::MAX_ROWS`]: crate::gemv::MAX_ROWS

use crate::out_ptr::OutPtr;
use crate::pool::Pool;
#[cfg(target_arch = "x86_64")]
use crate::x86::{avx2::f32_tiles as avx2, avx512::f32_tiles as avx512};
use crate::{isa, Isa};

/// Most activation rows taken here; more go to gemm, whose packing is then paid back. On a
/// 2-thread Zen 4 (benches/half_matmul.rs) the tiles ran 150-195 GFLOP/s from 25 to 512 rows,
/// gemm 16-98 at 25-128 rows, 116-137 at 256, 146-171 at 512 and 183-194 at 1024.
pub const MAX_ROWS: usize = 256;
/// Below this many multiply-adds the product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 20;

/// The register width the tiles run at on this CPU, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileIsa {
    Avx2,
    Avx512,
}

/// The widest tiles this CPU (under `INFER_GGML_ISA`) runs.
pub fn best_isa() -> Option<TileIsa> {
    match isa() {
        Isa::Avx512 => Some(TileIsa::Avx512),
        Isa::Avx2 => Some(TileIsa::Avx2),
        Isa::Scalar => None,
    }
}

/// `out (m, n) = xs (m, k) @ wᵀ` on `tiles`, the weight rows split across `pool`. Panics if
/// the CPU lacks the tiles.
#[allow(clippy::too_many_arguments)]
pub fn product(w: &[f32], xs: &[f32], m: usize, n: usize, k: usize, tiles: TileIsa, pool: &impl Pool, out: &mut [f32]) {
    assert!(w.len() >= n * k && out.len() >= m * n);
    let packed = Packed::new(xs, m, k, tiles);
    let count = n.div_ceil(packed.nr);
    let dst = OutPtr(out.as_mut_ptr());
    let body = |range: std::ops::Range<usize>| {
        let (j0, j1) = (range.start * packed.nr, (range.end * packed.nr).min(n));
        // SAFETY: rows j0..j1 of w; `out` holds m rows of n values, of which this range writes
        // columns j0..j1 only.
        unsafe { packed.product_into(&w[j0 * k..j1 * k], j1 - j0, dst.at(j0), n) }
    };
    pool.execute_chunked_if(m * n * k >= PARALLEL_MIN, count, body);
}

/// Activation rows repacked for the tiles: blocks of one register's rows, each lane one row,
/// the k values in order (zeros past m). Made once per product, shared by its threads.
pub struct Packed {
    xp: Vec<f32>,
    m: usize,
    k: usize,
    /// Activation rows per register.
    lanes: usize,
    /// Weight rows per tile.
    nr: usize,
    units: Units,
}

impl Packed {
    /// Packs `xs` (m rows of k values) for `tiles`. Panics if the CPU lacks them.
    pub fn new(xs: &[f32], m: usize, k: usize, tiles: TileIsa) -> Packed {
        assert!(xs.len() >= m * k && k > 0);
        #[cfg(target_arch = "x86_64")]
        let (lanes, nr, units): (usize, usize, Units) = match tiles {
            TileIsa::Avx512 => {
                assert!(crate::cpu_features::features().avx512f, "the AVX-512 tiles need avx512f");
                (16, 8, avx512::units)
            }
            TileIsa::Avx2 => {
                assert!(crate::gemv::has_fma(), "the AVX2 tiles need avx2 and fma");
                (8, 6, avx2::units)
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("no f32 tiles on this architecture ({tiles:?}, {m} rows)");
        let blocks = m.div_ceil(lanes);
        // xp[(b·k + p)·lanes + l] = row b·lanes + l at column p.
        let mut xp = vec![0f32; blocks * k * lanes];
        for (i, row) in xs.chunks_exact(k).take(m).enumerate() {
            let (b, l) = (i / lanes, i % lanes);
            for (p, &v) in row.iter().enumerate() {
                xp[(b * k + p) * lanes + l] = v;
            }
        }
        Packed { xp, m, k, lanes, nr, units }
    }

    /// `out[i·stride + j] = xs[i] · w[j]` for the `n` weight rows `w` (n, k), on this thread.
    ///
    /// # Safety
    /// `out` must be writable at `i·stride + j` for every i < m, j < n.
    pub unsafe fn product_into(&self, w: &[f32], n: usize, out: *mut f32, stride: usize) {
        assert!(w.len() >= n * self.k && n > 0);
        let s = Shape { m: self.m, n, k: self.k, blocks: self.m.div_ceil(self.lanes), stride };
        (self.units)(w, &self.xp, s, 0..n.div_ceil(self.nr), &OutPtr(out));
    }
}

/// Weight-row units `range` of a product (`NR` rows each) on one thread, compiled for one
/// register width.
pub(crate) type Units = unsafe fn(&[f32], &[f32], Shape, std::ops::Range<usize>, &OutPtr);

/// One register of f32 lanes and the operations a tile needs. Implementations are only used
/// on a CPU with their features (checked by [`Packed::new`]), inlined into a function compiled
/// with them.
pub(crate) trait Lanes {
    const LANES: usize;
    type V: Copy;
    unsafe fn zero() -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn splat(v: f32) -> Self::V;
    /// `a · b + c`, one rounding.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// Lane l of `v[c]` to `out + l · stride + c`, for the first `rows` lanes and `cols`
    /// columns (a tile's accumulators each hold one output column).
    #[inline(always)]
    unsafe fn store_columns<const NR: usize>(
        v: &[Self::V; NR],
        out: *mut f32,
        stride: usize,
        rows: usize,
        cols: usize,
    ) {
        scalar_columns::<Self, NR>(v, out, stride, rows, cols)
    }
}

/// [`Lanes::store_columns`] one value at a time.
#[inline(always)]
pub(crate) unsafe fn scalar_columns<L: Lanes + ?Sized, const NR: usize>(
    v: &[L::V; NR],
    out: *mut f32,
    stride: usize,
    rows: usize,
    cols: usize,
) {
    let mut buf = [0f32; 16];
    for (c, &v) in v.iter().enumerate().take(cols) {
        L::store(buf.as_mut_ptr(), v);
        for (l, &y) in buf[..rows].iter().enumerate() {
            *out.add(l * stride + c) = y;
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Shape {
    m: usize,
    /// Weight rows (output columns) of this call.
    n: usize,
    k: usize,
    /// Packed blocks of activation rows.
    blocks: usize,
    /// Output row stride.
    stride: usize,
}

/// Output columns j0..j0 + NR (fewer at the end) for every activation row: block pairs, then
/// a last odd block alone.
#[inline(always)]
pub(crate) unsafe fn column<L: Lanes, const NR: usize>(w: &[f32], xp: &[f32], s: Shape, j0: usize, out: &OutPtr) {
    // Past the last weight row, repeat it (those results are dropped).
    let rows: [*const f32; NR] = std::array::from_fn(|r| w.as_ptr().add((j0 + r).min(s.n - 1) * s.k));
    let mut b = 0;
    while b + 2 <= s.blocks {
        tile::<L, NR, 2>(&rows, xp, s, b, j0, out);
        b += 2;
    }
    if b < s.blocks {
        tile::<L, NR, 1>(&rows, xp, s, b, j0, out);
    }
}

/// MB blocks from block `b` × NR weight rows over the whole k.
#[inline(always)]
unsafe fn tile<L: Lanes, const NR: usize, const MB: usize>(
    rows: &[*const f32; NR],
    xp: &[f32],
    s: Shape,
    b: usize,
    j0: usize,
    out: &OutPtr,
) {
    let lanes = L::LANES;
    let xs: [*const f32; MB] = std::array::from_fn(|h| xp.as_ptr().add((b + h) * s.k * lanes));
    let mut acc = [[L::zero(); MB]; NR];
    for p in 0..s.k {
        // SAFETY: p < k values of each packed block and of each weight row.
        let a: [L::V; MB] = std::array::from_fn(|h| L::load(xs[h].add(p * lanes)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let wv = L::splat(*rows[r].add(p));
            for h in 0..MB {
                acc[h] = L::fmadd(a[h], wv, acc[h]);
            }
        }
    }
    let cols = (s.n - j0).min(NR);
    #[allow(clippy::needless_range_loop)] // h picks the same block from every column's accumulators
    for h in 0..MB {
        let i0 = (b + h) * lanes;
        let v: [L::V; NR] = std::array::from_fn(|r| acc[r][h]);
        // SAFETY: rows i0.. (< m) × columns j0..j0 + cols are in the output and written by this
        // unit only.
        L::store_columns(&v, out.at(i0 * s.stride + j0), s.stride, (s.m - i0).min(lanes), cols);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bench_inputs::values;
    use crate::pool::ScopedThreads;

    /// Row counts around the lane blocks and their pairs, n off the weight-row tiles, both
    /// widths (where the CPU has them), against an f64 reference; and each row's result is
    /// the same bits at every m (it depends on its own row only).
    #[test]
    fn tiles_match_a_reference() {
        let Some(best) = best_isa() else {
            eprintln!("no AVX2/FMA on this CPU: the tiles are not checked here");
            return;
        };
        let widths: &[TileIsa] =
            if best == TileIsa::Avx512 { &[TileIsa::Avx2, TileIsa::Avx512] } else { &[TileIsa::Avx2] };
        let (n, k) = (75, 131);
        let w = values(n * k, 1);
        let xs = values(MAX_ROWS * k, 2);
        for &tiles in widths {
            let mut first_rows: Option<Vec<f32>> = None;
            for m in [5, 8, 9, 16, 17, 25, 33, 48, 49, MAX_ROWS] {
                let mut got = vec![f32::NAN; m * n];
                product(&w, &xs, m, n, k, tiles, &ScopedThreads(2), &mut got);
                for i in 0..m {
                    for j in 0..n {
                        let terms = (0..k).map(|l| xs[i * k + l] as f64 * w[j * k + l] as f64);
                        let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                        let tol = k as f64 * f32::EPSILON as f64 * mag;
                        let g = got[i * n + j] as f64;
                        assert!((g - want).abs() <= tol, "{tiles:?} m {m} ({i}, {j}): {g} vs {want}");
                    }
                }
                let first = first_rows.get_or_insert_with(|| got[..5 * n].to_vec());
                assert_eq!(&got[..5 * n], &first[..], "{tiles:?}: rows 0..5 changed with m = {m}");
            }
        }
    }
}
