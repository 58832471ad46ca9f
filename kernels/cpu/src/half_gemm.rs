//! Half-precision weight products with more rows than the decode kernel takes (prefill, encoder
//! batches): out (m, n) = x (m, k) @ wᵀ for a row-major bf16 or f16 weight w (n, k): the
//! dispatch and the panels.
//!
//! bf16 products take the best of (see [`best_kernel`]): AMX tiles (`x86/amx/gemm.rs`, where
//! the CPU has AMX-BF16 and Linux grants this process tile state), AVX-512 BF16 `vdpbf16ps`
//! register tiles (`x86/avx512/bf16_tiles.rs`, even k), then panels ([`product`]): w widened a
//! panel of rows at a time into a per-thread buffer that stays in cache and is reused across
//! calls, each panel through the f32 register tiles ([`crate::f32_tiles`], up to its row
//! limit) or gemm's f32 kernel, the panels (output columns) split across the caller's pool.
//! f16 weights always take the panels: bf16 tiles would round them to 8 bits of mantissa, and
//! gemm's own f16 kernel rounds its partial sums to f16 between k blocks, where here they stay
//! f32 until the one final rounding.

use std::cell::RefCell;

use half::{bf16, f16, slice::HalfFloatSliceExt};

use crate::f32_tiles;
use crate::gemv::{self, Bf16Kernel};
use crate::out_ptr::OutPtr;
use crate::pool::Pool;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use crate::x86::amx::gemm as amx;
#[cfg(target_arch = "x86_64")]
pub use crate::x86::avx512::bf16_tiles as tiles;

/// A panel's widened f32 bytes: about half of a 2 MiB L2, so the panel and gemm's packed
/// copy of it stay close to the core that made them.
const PANEL_BYTES: usize = 1 << 20;
/// Panel heights are multiples of this (gemm's widest f32 register tile on AVX-512).
const PANEL_ALIGN: usize = 16;
/// Below this many multiply-adds a product runs on the calling thread.
pub(crate) const PARALLEL_MIN: usize = 1 << 20;

thread_local! {
    /// The thread's widened panel (about `PANEL_BYTES`, or 16 rows where rows are wider), kept
    /// for its next product.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The kernels a bf16 product can run on, in order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HalfKernel {
    /// Weight widened to f32 panels, gemm's f32 kernel (any CPU, and every f16 product).
    Panels,
    /// AVX-512 BF16 `vdpbf16ps` register tiles (even k).
    Dpbf16,
    /// AMX-BF16 `tdpbf16ps` tiles.
    Amx,
}

/// The best bf16 product kernel this process may run: `INFER_GGML_ISA` caps it (`avx512`: no
/// AMX; `avx2`, `scalar`: panels only), as it caps the GGML and matvec kernels.
pub fn best_kernel() -> HalfKernel {
    if amx_available() {
        HalfKernel::Amx
    } else if gemv::bf16_kernel() >= Bf16Kernel::Avx512Bf16 {
        HalfKernel::Dpbf16
    } else {
        HalfKernel::Panels
    }
}

fn amx_available() -> bool {
    crate::cpu_features::amx_available()
}

/// Weight rows per panel: what fits [`PANEL_BYTES`] widened, but no more than gives every
/// thread a panel.
pub fn panel_rows(n: usize, k: usize, threads: usize) -> usize {
    let by_cache = PANEL_BYTES / (4 * k) / PANEL_ALIGN * PANEL_ALIGN;
    let by_threads = n.div_ceil(threads.max(1)).next_multiple_of(PANEL_ALIGN);
    by_cache.min(by_threads).max(PANEL_ALIGN)
}

/// A half-precision weight element.
pub trait Half: Copy + Send + Sync {
    /// `dst[i] = src[i]` as f32, same lengths.
    fn widen(src: &[Self], dst: &mut [f32]);
}

impl Half for f16 {
    fn widen(src: &[f16], dst: &mut [f32]) {
        // half picks F16C (x86) or NEON at run time.
        src.convert_to_f32_slice(dst);
    }
}

impl Half for bf16 {
    fn widen(src: &[bf16], dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu_features::features().avx2 {
            // SAFETY: the CPU supports avx2 (checked just above).
            return unsafe { crate::x86::avx2::half_slices::widen_by_shift(src, dst) };
        }
        crate::generic::half_slices::widen_by_shift(src, dst)
    }
}

/// `out (m, n) = xs (m, k) @ wᵀ`, w (n, k) widened `rows` weight rows (output columns) at a
/// time ([`panel_rows`] picks them), the panels split over `pool`.
#[allow(clippy::too_many_arguments)]
pub fn product<T: Half>(
    w: &[T],
    xs: &[f32],
    m: usize,
    n: usize,
    k: usize,
    rows: usize,
    pool: &impl Pool,
    out: &mut [f32],
) {
    assert!(w.len() >= n * k && xs.len() >= m * k && out.len() >= m * n && rows > 0);
    let units = n.div_ceil(rows);
    let ptr = OutPtr(out.as_mut_ptr());
    // Up to f32_tiles::MAX_ROWS rows, each panel goes through the f32 register tiles (no
    // packing of the panel; the activations are packed once here); more rows through gemm.
    let tiles =
        f32_tiles::best_isa().filter(|_| m <= f32_tiles::MAX_ROWS).map(|isa| f32_tiles::Packed::new(xs, m, k, isa));
    let body = |range: std::ops::Range<usize>| {
        PANEL.with_borrow_mut(|panel| {
            for u in range {
                let j0 = u * rows;
                let nb = rows.min(n - j0);
                panel.resize(nb * k, 0.0);
                T::widen(&w[j0 * k..(j0 + nb) * k], &mut panel[..nb * k]);
                if let Some(tiles) = &tiles {
                    // SAFETY: the panel holds nb weight rows of k values; the destination is
                    // columns j0..j0 + nb of the m × n row-major `out`, written by this unit only.
                    unsafe { tiles.product_into(&panel[..nb * k], nb, ptr.at(j0), n) };
                    continue;
                }
                // SAFETY: xs holds m rows of k values (row stride k), the panel nb rows of k
                // values (column j of wᵀ at panel[j * k]); the destination is columns
                // j0..j0 + nb of the m × n row-major `out`, written by this unit only.
                unsafe {
                    gemm::gemm(
                        m,
                        nb,
                        k,
                        ptr.at(j0),
                        1,
                        n as isize,
                        false,
                        xs.as_ptr(),
                        1,
                        k as isize,
                        panel.as_ptr(),
                        k as isize,
                        1,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            }
        })
    };
    pool.execute_chunked_if(m * n * k >= PARALLEL_MIN, units, body);
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bench_inputs::values;
    use crate::pool::ScopedThreads;

    /// Several panels with a short last one, against an f64 reference of the rounded operands.
    #[test]
    fn panels_match_a_reference() {
        let (n, k) = (75, 129);
        let wf = values(n * k, 1);
        let wb: Vec<bf16> = wf.iter().map(|&v| bf16::from_f32(v)).collect();
        let wh: Vec<f16> = wf.iter().map(|&v| f16::from_f32(v)).collect();
        for m in [1, 5, 39] {
            let xs = values(m * k, 2 + m as u64);
            for rows in [16, 32, 80] {
                let mut got_b = vec![f32::NAN; m * n];
                product(&wb, &xs, m, n, k, rows, &ScopedThreads(2), &mut got_b);
                let mut got_h = vec![f32::NAN; m * n];
                product(&wh, &xs, m, n, k, rows, &ScopedThreads(2), &mut got_h);
                for (got, w) in [
                    (got_b, wb.iter().map(|v| v.to_f64()).collect::<Vec<_>>()),
                    (got_h, wh.iter().map(|v| v.to_f64()).collect::<Vec<_>>()),
                ] {
                    for i in 0..m {
                        for j in 0..n {
                            let terms = (0..k).map(|l| xs[i * k + l] as f64 * w[j * k + l]);
                            let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                            let g = got[i * n + j] as f64;
                            // f32 accumulation's worst case: k · eps · Σ|terms|.
                            let tol = k as f64 * f32::EPSILON as f64 * mag;
                            assert!((g - want).abs() <= tol, "m {m} rows {rows} ({i}, {j}): {g} vs {want}");
                        }
                    }
                }
            }
        }
    }

    /// The `vdpbf16ps` tiles (where the CPU has them): row counts around the 16-lane blocks and
    /// their pairs, n off the 8-row tiles, against an f64 reference of the bf16 operands.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn tiles_match_a_reference() {
        if !tiles::available() {
            eprintln!("no AVX-512 BF16 on this CPU: the tiles are not checked here");
            return;
        }
        let (n, k) = (75, 130);
        let w: Vec<bf16> = values(n * k, 1).into_iter().map(bf16::from_f32).collect();
        for m in [1, 5, 16, 17, 33, 39] {
            let x: Vec<bf16> = values(m * k, 2 + m as u64).into_iter().map(bf16::from_f32).collect();
            let mut got = vec![f32::NAN; m * n];
            tiles::product(&w, &x, m, n, k, &ScopedThreads(2), &mut got);
            for i in 0..m {
                for j in 0..n {
                    let terms = (0..k).map(|l| x[i * k + l].to_f64() * w[j * k + l].to_f64());
                    let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                    let tol = k as f64 * f32::EPSILON as f64 * mag;
                    let g = got[i * n + j] as f64;
                    assert!((g - want).abs() <= tol, "m {m} ({i}, {j}): {g} vs {want}");
                }
            }
        }
    }

    /// bf16 products against an f64 reference of the bf16 operands, at the tiles' tolerance.
    fn check_bf16(got: &[f32], x: &[bf16], w: &[bf16], m: usize, n: usize, k: usize, what: &str) {
        for i in 0..m {
            for j in 0..n {
                let terms = (0..k).map(|l| x[i * k + l].to_f64() * w[j * k + l].to_f64());
                let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                let tol = k as f64 * f32::EPSILON as f64 * mag;
                let g = got[i * n + j] as f64;
                assert!((g - want).abs() <= tol, "{what} m {m} n {n} k {k} ({i}, {j}): {g} vs {want}");
            }
        }
    }

    /// AMX tiles (where this process may use them): rows, weight rows and k on and off the
    /// 16-row tiles, their pairs and the 32-value k steps (odd k included), on one thread and
    /// on the pool.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn amx_matches_a_reference() {
        if !amx::available() {
            eprintln!("no AMX-BF16 for this process: the AMX tiles are not checked here");
            return;
        }
        for (n, k) in [(75, 130), (16, 32), (33, 31), (64, 97), (7, 1), (40, 2048)] {
            let w: Vec<bf16> = values(n * k, 1).into_iter().map(bf16::from_f32).collect();
            for m in [1, 5, 16, 17, 32, 33, 39, 64] {
                let x: Vec<bf16> = values(m * k, 2 + m as u64).into_iter().map(bf16::from_f32).collect();
                let mut got = vec![f32::NAN; m * n];
                amx::product(&w, &x, m, n, k, &ScopedThreads(2), &mut got);
                check_bf16(&got, &x, &w, m, n, k, "amx");
            }
        }
    }

    #[test]
    fn panel_heights() {
        // Cache-bound for a wide k, thread-bound for a short n, never below one alignment step.
        assert_eq!(panel_rows(9216, 3072, 2), 80);
        assert_eq!(panel_rows(40, 3072, 2), 32);
        assert_eq!(panel_rows(9216, 1 << 20, 2), PANEL_ALIGN);
    }
}
