//! Half-precision weight products with more rows than the decode kernel takes (prefill, encoder
//! batches): y (m, n) = x (m, k) @ wᵀ for a row-major bf16 or f16 weight w (n, k).
//!
//! candle has no bf16 gemm: it widened the whole weight to f32 on every call (a 9216 × 3072
//! weight is a fresh 113 MB buffer per product). bf16 products take the best of (see
//! [`best_kernel`]): AMX tiles ([`amx`], where the CPU has AMX-BF16 and Linux grants this
//! process tile state), AVX-512 BF16 `vdpbf16ps` register tiles ([`tiles`], even k), then
//! panels: w widened a panel of rows at a time into a per-thread buffer that stays in cache
//! and is reused across calls, each panel through the f32 register tiles ([`f32_tiles`], up to
//! its row limit) or gemm's f32 kernel, the panels (output columns) split across candle's
//! thread pool. f16 weights always take the panels: bf16 tiles
//! would round them to 8 bits of mantissa, and gemm's own f16 kernel rounds its partial sums to
//! f16 between k blocks, where here they stay f32 until the one final rounding.

use std::cell::RefCell;

use candle_core::{DType as C, Result, Tensor};
use half::{bf16, f16, slice::HalfFloatSliceExt};

use crate::f32_tiles;
use crate::half_slices;
use crate::weight_rows::{with_rows, WeightRows};
use infer_cpu_kernels::out_ptr::OutPtr;

use crate::gemv::{self, Bf16Kernel};

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod amx;

/// A panel's widened f32 bytes: about half of a 2 MiB L2, so the panel and gemm's packed
/// copy of it stay close to the core that made them.
const PANEL_BYTES: usize = 1 << 20;
/// Panel heights are multiples of this (gemm's widest f32 register tile on AVX-512).
const PANEL_ALIGN: usize = 16;
/// Below this many multiply-adds the product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 20;

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
    infer_cpu_kernels::cpu_features::amx_available()
}

/// `x @ wᵀ` for a bf16 or f16 `w` (n, k), row-major, and `x` (m, k) of the same dtype; `None`
/// when the operands are anything else (the caller falls back to candle's matmul).
pub fn try_linear(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    try_linear_with(x, w, best_kernel())
}

/// [`try_linear`] on `kernel` for bf16 products, or the best kernel below it that this CPU and
/// shape can run (AMX needs [`amx::available`], `vdpbf16ps` AVX-512 BF16 and an even k):
/// benchmarks and tests compare the kernels through it.
pub fn try_linear_with(x: &Tensor, w: &Tensor, kernel: HalfKernel) -> Result<Option<Tensor>> {
    let Ok((n, k)) = w.dims2() else { return Ok(None) };
    with_rows(w, |rows| linear_rows(x, rows, n, k, kernel)).unwrap_or(Ok(None))
}

/// [`try_linear_with`] on the weight rows `w` (n, k) wherever they are.
pub fn linear_rows(x: &Tensor, w: WeightRows<'_>, n: usize, k: usize, kernel: HalfKernel) -> Result<Option<Tensor>> {
    let (m, kx) = x.dims2()?;
    // f32 activations also take half-precision weights (the panels widen them).
    let widening = x.dtype() == C::F32 && matches!(w.dtype(), C::BF16 | C::F16);
    if m == 0 || k == 0 || n == 0 || k != kx || (x.dtype() != w.dtype() && !widening) || w.numel() != n * k {
        return Ok(None);
    }
    #[cfg(target_arch = "x86_64")]
    if let (WeightRows::Bf16(w), false) = (w, widening) {
        let amx = kernel >= HalfKernel::Amx && amx_available();
        if amx || (kernel >= HalfKernel::Dpbf16 && k.is_multiple_of(2) && tiles::available()) {
            // x is bf16 too (the dtypes match): its values are exact tile operands.
            #[cfg(target_os = "linux")]
            if amx {
                // The tiles round their sums to bf16 as they store them: no f32 product.
                let mut out = vec![bf16::ZERO; m * n];
                with_bf16_values(x, |xb| amx::product(w, xb, m, n, k, &mut out))?;
                return Tensor::from_vec(out, (m, n), x.device()).map(Some);
            }
            let mut out = vec![0f32; m * n];
            with_bf16_values(x, |xb| tiles::product(w, xb, m, n, k, &mut out))?;
            return narrowed(out, (m, n), x.dtype()).map(Some);
        }
    }
    let _ = kernel;
    let rows = panel_rows(n, k, threads());
    let mut out = vec![0f32; m * n];
    match w {
        WeightRows::Bf16(v) => {
            product(v, &x.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?, m, n, k, rows, &mut out)
        }
        WeightRows::F16(v) => {
            product(v, &x.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?, m, n, k, rows, &mut out)
        }
        WeightRows::F32(_) => return Ok(None),
    }
    narrowed(out, (m, n), x.dtype()).map(Some)
}

/// `f` on the values of the bf16 tensor `x`: its storage in place where contiguous, else a copy.
fn with_bf16_values<R>(x: &Tensor, f: impl FnOnce(&[bf16]) -> R) -> Result<R> {
    {
        let (storage, layout) = x.storage_and_layout();
        if let (candle_core::Storage::Cpu(candle_core::CpuStorage::BF16(v)), Some((a, z))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&v[a..z]));
        }
    }
    Ok(f(&x.flatten_all()?.to_vec1::<bf16>()?))
}

/// The f32 product `out` as a tensor of `dtype`: bf16 and f16 rounded as `from_f32` rounds (to
/// nearest, ties to even), in parallel pieces, straight into the tensor's buffer.
fn narrowed(out: Vec<f32>, shape: (usize, usize), dtype: C) -> Result<Tensor> {
    let dev = &candle_core::Device::Cpu;
    match dtype {
        C::BF16 => Tensor::from_vec(half_slices::narrowed::<bf16>(&out), shape, dev),
        C::F16 => Tensor::from_vec(half_slices::narrowed::<f16>(&out), shape, dev),
        _ => Tensor::from_vec(out, shape, dev)?.to_dtype(dtype),
    }
}

/// candle's thread count, looked up once (the lookup may read /proc/cpuinfo).
fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(candle_core::utils::get_num_threads)
}

/// Weight rows per panel: what fits [`PANEL_BYTES`] widened, but no more than gives every
/// thread a panel.
fn panel_rows(n: usize, k: usize, threads: usize) -> usize {
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
        if infer_cpu_kernels::features().avx2 {
            // SAFETY: the CPU supports avx2 (checked just above).
            return unsafe { widen_bf16_avx2(src, dst) };
        }
        widen_bf16_body(src, dst)
    }
}

/// A bf16 is the upper half of an f32: widening is a 16-bit shift (the loop vectorizes).
#[inline(always)]
fn widen_bf16_body(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((s.to_bits() as u32) << 16);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn widen_bf16_avx2(src: &[bf16], dst: &mut [f32]) {
    widen_bf16_body(src, dst)
}

/// `out (m, n) = xs (m, k) @ wᵀ`, w (n, k) widened `rows` weight rows (output columns) at a time.
pub fn product<T: Half>(w: &[T], xs: &[f32], m: usize, n: usize, k: usize, rows: usize, out: &mut [f32]) {
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
    if m * n * k < PARALLEL_MIN || units == 1 {
        body(0..units);
    } else {
        candle_core::utils::barrier_pool().execute_chunked(units, body);
    }
}

/// bf16 products without widening: `vdpbf16ps` tiles of 32 activation rows (two registers of 16
/// lanes, each lane one row's pair of bf16s; 16 for a last odd block) × 8 weight rows (each pair broadcast), 16 f32
/// accumulators, the whole k per tile. The activations are repacked once per call into that
/// lane order (m · k values, small next to the weight); the weight is read in place, its rows
/// split across the thread pool 8 at a time.
#[cfg(target_arch = "x86_64")]
pub mod tiles {
    use std::arch::x86_64::*;

    use half::bf16;

    use infer_cpu_kernels::out_ptr::OutPtr;

    /// Weight rows per tile.
    const NR: usize = 8;
    /// Activation rows per register (16 f32 lanes).
    const LANES: usize = 16;

    /// Whether the CPU has AVX-512 BF16 (and F/BW/VL for the loads and the masked row stores).
    pub fn available() -> bool {
        let f = infer_cpu_kernels::features();
        f.avx512vl() && f.avx512bf16
    }

    /// `out (m, n) = x (m, k) @ wᵀ` for bf16 `x` and `w` (n, k), k even. Panics on a CPU
    /// without AVX-512 BF16 ([`available`]).
    pub fn product(w: &[bf16], x: &[bf16], m: usize, n: usize, k: usize, out: &mut [f32]) {
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
        if m * n * k < super::PARALLEL_MIN || units == 1 {
            body(0..units);
        } else {
            candle_core::utils::barrier_pool().execute_chunked(units, body);
        }
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
                let mask = infer_cpu_kernels::x86::avx512::simd::first_lanes(len);
                let r: [__m512; LANES] = std::array::from_fn(|l| {
                    if l < rows {
                        // SAFETY: pairs p0..p0 + len of row b · 16 + l < m (masked past them).
                        _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(mask, pairs.add((b * LANES + l) * kp + p0)))
                    } else {
                        _mm512_setzero_ps()
                    }
                });
                // Register j: pair p0 + j of the block's 16 rows.
                for (j, v) in infer_cpu_kernels::x86::avx512::simd::transpose16(r).into_iter().take(len).enumerate() {
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
    unsafe fn tile_column(
        w: &[bf16],
        xp: &[u32],
        m: usize,
        n: usize,
        k: usize,
        blocks: usize,
        j0: usize,
        out: &OutPtr,
    ) {
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
            infer_cpu_kernels::x86::avx512::simd::store_columns8(&v, out.at(i0 * n + j0), n, (m - i0).min(LANES), cols);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_inputs::values;

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
                product(&wb, &xs, m, n, k, rows, &mut got_b);
                let mut got_h = vec![f32::NAN; m * n];
                product(&wh, &xs, m, n, k, rows, &mut got_h);
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
            tiles::product(&w, &x, m, n, k, &mut got);
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
                amx::product(&w, &x, m, n, k, &mut got);
                check_bf16(&got, &x, &w, m, n, k, "amx");
            }
        }
    }

    /// Every kernel through the tensor entry point, asked for by name: each runs (or falls back
    /// to one this CPU has) and agrees with the reference; f16 always takes the panels.
    #[test]
    fn every_kernel_through_tensors() -> Result<()> {
        let (m, n, k) = (37, 45, 70);
        let dev = &candle_core::Device::Cpu;
        let w: Vec<bf16> = values(n * k, 3).into_iter().map(bf16::from_f32).collect();
        let x: Vec<bf16> = values(m * k, 4).into_iter().map(bf16::from_f32).collect();
        let (wt, xt) = (Tensor::from_slice(&w, (n, k), dev)?, Tensor::from_slice(&x, (m, k), dev)?);
        for kernel in [HalfKernel::Panels, HalfKernel::Dpbf16, HalfKernel::Amx] {
            let y = try_linear_with(&xt, &wt, kernel)?.expect("bf16 operands");
            let got = y.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?;
            // The output is rounded to bf16: half a bf16 ulp more.
            let want = try_linear_with(&xt.to_dtype(C::F32)?, &wt.to_dtype(C::F32)?, kernel)?;
            assert!(want.is_none(), "f32 operands are not this module's");
            for i in 0..m {
                for j in 0..n {
                    let dot: f64 = (0..k).map(|l| x[i * k + l].to_f64() * w[j * k + l].to_f64()).sum();
                    let g = got[i * n + j] as f64;
                    assert!((g - dot).abs() <= dot.abs() / 128.0 + 1e-3, "{kernel:?} ({i}, {j}): {g} vs {dot}");
                }
            }
        }
        Ok(())
    }

    /// Reports the kernel this process picks (and checks a product on it) when run by
    /// [`isa_cap_keeps_amx_off`] in a child process; a no-op otherwise.
    #[test]
    fn child_reports_kernel() {
        if std::env::var_os("INFER_HALF_GEMM_CHILD").is_none() {
            return;
        }
        let (m, n, k) = (21, 35, 66);
        let w: Vec<bf16> = values(n * k, 5).into_iter().map(bf16::from_f32).collect();
        let x: Vec<bf16> = values(m * k, 6).into_iter().map(bf16::from_f32).collect();
        let dev = &candle_core::Device::Cpu;
        let (wt, xt) = (Tensor::from_slice(&w, (n, k), dev).unwrap(), Tensor::from_slice(&x, (m, k), dev).unwrap());
        let y = try_linear(&xt, &wt).unwrap().unwrap().to_dtype(C::F32).unwrap();
        let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|l| x[i * k + l].to_f64() * w[j * k + l].to_f64()).sum();
                assert!((got[i * n + j] as f64 - dot).abs() <= dot.abs() / 128.0 + 1e-3);
            }
        }
        println!("half_gemm kernel: {:?}", best_kernel());
    }

    /// `INFER_GGML_ISA` caps the product kernel (read once per process, so each cap runs in a
    /// child process): `avx512` keeps AMX off and the `vdpbf16ps` tiles on (where the CPU has
    /// them), `avx2` leaves the panels.
    #[test]
    fn isa_cap_keeps_amx_off() {
        let exe = std::env::current_exe().unwrap();
        // What the hardware has (this process may itself run under a cap).
        #[cfg(target_arch = "x86_64")]
        let dpbf16 = tiles::available() && infer_cpu_kernels::features().fma;
        #[cfg(not(target_arch = "x86_64"))]
        let dpbf16 = false;
        for (cap, want) in
            [("avx512", if dpbf16 { HalfKernel::Dpbf16 } else { HalfKernel::Panels }), ("avx2", HalfKernel::Panels)]
        {
            let out = std::process::Command::new(&exe)
                .args(["--exact", "half_gemm::tests::child_reports_kernel", "--nocapture", "--test-threads=1"])
                .env("INFER_HALF_GEMM_CHILD", "1")
                .env("INFER_GGML_ISA", cap)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "child with INFER_GGML_ISA={cap} failed: {stdout}");
            let line = format!("half_gemm kernel: {want:?}");
            assert!(stdout.contains(&line), "INFER_GGML_ISA={cap}: expected {line:?} in {stdout}");
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
