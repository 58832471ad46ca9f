//! Decode-shaped dense linear layers: y (m, n) = x (m, k) @ wᵀ for a handful of rows m and a
//! row-major weight w (n, k) in f32, f16 or bf16.
//!
//! Decode is memory-bound: every weight byte is read once per token. candle's gemm reads f32
//! weights at roughly one core's bandwidth for m = 1 and has no bf16 kernel at all (it widens
//! the *whole* weight to f32 on every call: < 1 GB/s). Here each weight row is streamed once,
//! widened in registers, and dotted with the m input rows, with the rows of w split across
//! the caller's thread pool; AVX2+FMA code is picked at run time where the CPU has it, and for bf16
//! AVX-512 BF16 (`vdpbf16ps`, bf16 pairs multiplied into f32 lanes without widening) where the
//! CPU has that ([`bf16_kernel`]).
//!
//! This module is the dispatch and the walk over the weight; the kernels are
//! `generic/gemv.rs` (portable), `x86/avx2/gemv.rs` and `x86/avx512/gemv.rs`.

use half::{bf16, f16, slice::HalfFloatSliceExt};

use crate::generic::gemv::{axpy4_body, axpy_body, dot_body, madd_plain, widen_bf16};
use crate::out_ptr::OutPtr;
use crate::pool::Pool;
use crate::stream_split;
#[cfg(target_arch = "x86_64")]
use crate::x86::{avx2::gemv as avx2, avx512::gemv as avx512};

/// Largest number of input rows handled here; more rows go to gemm (compute-bound).
pub const MAX_ROWS: usize = 4;
/// Weight rows per work unit handed to a thread.
const ROWS_PER_UNIT: usize = 16;
/// Below this many weight elements the product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;
/// f16 rows are widened through a stack buffer of this many elements.
const TILE: usize = 256;

/// Row-major (n, k) weight rows in one of the float types the kernels read.
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

/// Whether [`product`] takes bf16 activations (`vdpbf16ps` pairs) rather than f32 ones, for
/// bf16 weight rows under `bf16` (capped to what this CPU has).
pub fn takes_bf16_pairs(bf16: Bf16Kernel) -> bool {
    bf16.min(detected_bf16_kernel()) == Bf16Kernel::Avx512Bf16
}

/// `out (m, n) = x (m, k) @ wᵀ` for 1..=[`MAX_ROWS`] rows: `xf` the activations as f32, or for
/// bf16 rows where [`takes_bf16_pairs`] (`xb_pairs`) `xb` as bf16 (the other one may be empty).
/// bf16 rows are dotted by `bf16` or the best kernel below it this CPU has.
#[allow(clippy::too_many_arguments)]
pub fn product(
    w: Rows<'_>,
    xf: &[f32],
    xb: &[bf16],
    xb_pairs: bool,
    (m, n, k): (usize, usize, usize),
    bf16: Bf16Kernel,
    pool: &impl Pool,
    out: &mut [f32],
) {
    assert!((1..=MAX_ROWS).contains(&m) && out.len() == m * n);
    let kernel = bf16.min(detected_bf16_kernel());
    let bf16_pairs = xb_pairs && kernel == Bf16Kernel::Avx512Bf16;
    let fma = has_fma();
    match w {
        Rows::F32(v) => run(v, xf, m, n, k, out, pool, |r, x| <f32 as Row>::dot(r, x, fma)),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports avx512f/bw and avx512bf16 (`detected_bf16_kernel`).
        Rows::Bf16(v) if bf16_pairs => {
            run_rows(v, xb, m, n, k, out, pool, |r, x| unsafe { avx512::dot_m_bf16_dp(r, x, m) })
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports avx2 and fma (`detected_bf16_kernel`).
        Rows::Bf16(v) if kernel >= Bf16Kernel::Avx2 => {
            run_rows(v, xf, m, n, k, out, pool, |r, x| unsafe { avx2::dot_m_bf16_avx2(r, x, m) })
        }
        Rows::Bf16(v) => run(v, xf, m, n, k, out, pool, |r, x| <bf16 as Row>::dot(r, x, false)),
        Rows::F16(v) => run(v, xf, m, n, k, out, pool, |r, x| <f16 as Row>::dot(r, x, fma)),
    }
}

/// A weight element type: how one row is dotted with an f32 vector.
trait Row: Copy + Send + Sync {
    fn dot(row: &[Self], x: &[f32], fma: bool) -> f32;
}

/// `out (m, n) = xs (m, k) @ wᵀ`, one `dot` per output element, weight rows split across threads.
#[allow(clippy::too_many_arguments)]
fn run<T: Sync, X: Sync>(
    w: &[T],
    xs: &[X],
    m: usize,
    n: usize,
    k: usize,
    out: &mut [f32],
    pool: &impl Pool,
    dot: impl Fn(&[T], &[X]) -> f32 + Sync,
) {
    run_rows(w, xs, m, n, k, out, pool, |row, xs| {
        let mut o = [0f32; MAX_ROWS];
        for (i, o) in o.iter_mut().enumerate().take(m) {
            *o = dot(row, &xs[i * k..(i + 1) * k]);
        }
        o
    })
}

/// Like [`run`] with one call per weight row that dots it with all m rows of `xs` (so a
/// kernel can load each weight value once).
#[allow(clippy::too_many_arguments)]
fn run_rows<T: Sync, X: Sync>(
    w: &[T],
    xs: &[X],
    m: usize,
    n: usize,
    k: usize,
    out: &mut [f32],
    pool: &impl Pool,
    dot_rows: impl Fn(&[T], &[X]) -> [f32; MAX_ROWS] + Sync,
) {
    let units = n.div_ceil(ROWS_PER_UNIT);
    let body = |range: std::ops::Range<usize>, out: &OutPtr| {
        for u in range {
            for j in u * ROWS_PER_UNIT..((u + 1) * ROWS_PER_UNIT).min(n) {
                let v = dot_rows(&w[j * k..(j + 1) * k], &xs[..m * k]);
                for (i, v) in v.into_iter().enumerate().take(m) {
                    // SAFETY: (i, j) is written by the one worker that owns row j.
                    unsafe { *out.0.add(i * n + j) = v };
                }
            }
        }
    };
    let ptr = OutPtr(out.as_mut_ptr());
    if n * k < PARALLEL_MIN {
        body(0..units, &ptr);
    } else if m == 1 {
        // Decode reads each weight once: one long stream per thread.
        let unit_bytes = ROWS_PER_UNIT * k * std::mem::size_of::<T>();
        stream_split::for_each_share(pool, units, (stream_split::MIN_PIECE_BYTES / unit_bytes).max(1), |r| {
            body(r, &ptr)
        });
    } else {
        pool.execute_chunked(units, |r| body(r, &ptr));
    }
}

/// The kernels a bf16 row can be dotted with, in order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bf16Kernel {
    /// Portable: widen and multiply-add lane by lane.
    Scalar,
    /// AVX2 + FMA: widen in registers (a shift), f32 multiply-adds.
    Avx2,
    /// AVX-512 BF16: `vdpbf16ps` multiplies bf16 pairs and adds them into f32 lanes, 32 weights
    /// per instruction with no widening.
    Avx512Bf16,
}

/// The bf16 matvec kernel this CPU takes: the best it has, capped by `INFER_GGML_ISA` like the
/// GGML kernels (`avx2`: no AVX-512; `scalar`: no SIMD).
pub fn bf16_kernel() -> Bf16Kernel {
    use std::sync::OnceLock;
    static KERNEL: OnceLock<Bf16Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        use crate::cpu_features::{isa, Isa};
        let cap = match isa() {
            Isa::Scalar => Bf16Kernel::Scalar,
            Isa::Avx2 => Bf16Kernel::Avx2,
            Isa::Avx512 => Bf16Kernel::Avx512Bf16,
        };
        detected_bf16_kernel().min(cap)
    })
}

/// The best bf16 kernel this CPU can run.
fn detected_bf16_kernel() -> Bf16Kernel {
    if has_avx512bf16() && has_fma() {
        Bf16Kernel::Avx512Bf16
    } else if has_fma() {
        Bf16Kernel::Avx2
    } else {
        Bf16Kernel::Scalar
    }
}

fn has_avx512bf16() -> bool {
    crate::cpu_features::features().avx512bf16()
}

/// How far ahead (in bf16 values, 2 KB) the bf16 kernels prefetch the weight stream.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_BF16: usize = 1024;

/// `row · x` over their common length (AVX2 + FMA where the CPU has it).
pub fn dot_f32(row: &[f32], x: &[f32]) -> f32 {
    let n = row.len().min(x.len());
    <f32 as Row>::dot(&row[..n], &x[..n], has_fma())
}

/// `y += a · x` over their common length (AVX2 + FMA where the CPU has it).
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_fma() {
        // SAFETY: the CPU supports avx2 and fma (checked at run time).
        return unsafe { avx2::axpy_f32_avx2(a, x, y) };
    }
    axpy_body(a, x, y, madd_plain)
}

/// Values a KV cache may hold, dotted and accumulated straight from the cache after an exact
/// widening to f32, with [`dot_f32`]'s lanes and operations and [`axpy_f32`]'s: a half-precision
/// cache read in place gives the same bits as its f32 copy would, without making that copy.
pub trait Widen: Copy + Send + Sync + 'static {
    /// `row · x` as [`dot_f32`] of the widened row.
    fn dot_widened(row: &[Self], x: &[f32]) -> f32;
    /// `y += a · x` as [`axpy_f32`] of the widened `x`.
    fn axpy_widened(a: f32, x: &[Self], y: &mut [f32]);
    fn widen(self) -> f32;
    /// 16 values at `p` widened to f32 in one register (the thin products' AVX-512 kernels).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and `p` is valid for 16 reads.
    #[cfg(target_arch = "x86_64")]
    unsafe fn widen16(p: *const Self) -> std::arch::x86_64::__m512;
    /// The values themselves where they are f32 already (no widened copy needed).
    fn as_f32(values: &[Self]) -> Option<&[f32]> {
        let _ = values;
        None
    }
}

impl Widen for f32 {
    fn dot_widened(row: &[f32], x: &[f32]) -> f32 {
        dot_f32(row, x)
    }
    fn axpy_widened(a: f32, x: &[f32], y: &mut [f32]) {
        axpy_f32(a, x, y)
    }
    fn widen(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn widen16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller's contract (AVX-512 F, 16 values at p).
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }
    fn as_f32(values: &[f32]) -> Option<&[f32]> {
        Some(values)
    }
}

/// `y += Σ a[q] · x[q]` over four rows at once: `y` is loaded and stored once per four rows,
/// so the loop runs at the FMA rate instead of the store rate (AVX2 + FMA where the CPU has it).
pub fn axpy4_f32(a: [f32; 4], x: [&[f32]; 4], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_fma() {
        // SAFETY: the CPU supports avx2 and fma (checked at run time).
        return unsafe { avx2::axpy4_f32_avx2(a, x, y) };
    }
    axpy4_body(a, x, y, madd_plain)
}

/// Whether the CPU has AVX2 and FMA (looked up once).
pub fn has_fma() -> bool {
    crate::cpu_features::features().fma()
}

/// The half types' [`Widen`] methods: their AVX2 kernels where the CPU has them (`$vector`:
/// also F16C for f16), else [`dot_f32`]'s and [`axpy_f32`]'s own arithmetic on values widened
/// one by one (FMA or plain, as those take it), with no copy of the row.
macro_rules! widen_half {
    ($t:ty, $vector:expr, $dot:path, $axpy:path, $widen16:path) => {
        impl Widen for $t {
            fn dot_widened(row: &[$t], x: &[f32]) -> f32 {
                let n = row.len().min(x.len());
                let (row, x) = (&row[..n], &x[..n]);
                #[cfg(target_arch = "x86_64")]
                if has_fma() {
                    // SAFETY (both): the CPU supports avx2 and fma, and f16c where `$vector`
                    // says so (checked at run time).
                    return if $vector { unsafe { $dot(row, x) } } else { unsafe { avx2::dot_widened_fma(row, x) } };
                }
                dot_body!(row, x, |h: $t| h.to_f32(), madd_plain)
            }
            fn axpy_widened(a: f32, x: &[$t], y: &mut [f32]) {
                #[cfg(target_arch = "x86_64")]
                if has_fma() {
                    // SAFETY: as above.
                    return if $vector {
                        unsafe { $axpy(a, x, y) }
                    } else {
                        unsafe { avx2::axpy_widened_fma(a, x, y) }
                    };
                }
                for (y, x) in y.iter_mut().zip(x) {
                    *y = madd_plain(a, x.to_f32(), *y);
                }
            }
            fn widen(self) -> f32 {
                self.to_f32()
            }
            #[cfg(target_arch = "x86_64")]
            #[inline(always)]
            unsafe fn widen16(p: *const $t) -> std::arch::x86_64::__m512 {
                // SAFETY: the caller's contract.
                unsafe { $widen16(p) }
            }
        }
    };
}

widen_half!(f16, has_f16c(), avx2::dot_widened_f16, avx2::axpy_widened_f16, avx512::widen16_f16);
widen_half!(bf16, true, avx2::dot_widened_bf16, avx2::axpy_widened_bf16, avx512::widen16_bf16);

impl Row for f32 {
    #[inline]
    fn dot(row: &[f32], x: &[f32], fma: bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if fma {
            // SAFETY: the CPU supports avx2 and fma (checked at run time).
            return unsafe { avx2::dot_f32_avx2(row, x) };
        }
        let _ = fma;
        dot_body!(row, x, |v: f32| v, madd_plain)
    }
}

impl Row for bf16 {
    #[inline]
    fn dot(row: &[bf16], x: &[f32], fma: bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if fma {
            // SAFETY: the CPU supports avx2 and fma (checked at run time).
            return unsafe { avx2::dot_bf16_avx2(row, x) };
        }
        let _ = fma;
        dot_body!(row, x, widen_bf16, madd_plain)
    }
}

fn has_f16c() -> bool {
    crate::cpu_features::features().f16c()
}

impl Row for f16 {
    #[inline]
    fn dot(row: &[f16], x: &[f32], fma: bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if fma && has_f16c() {
            // SAFETY: the CPU supports avx2, fma and f16c (checked at run time).
            return unsafe { avx2::dot_f16_f16c(row, x) };
        }
        // Elsewhere: widen through a stack tile (half picks F16C / NEON when it can).
        let mut buf = [0f32; TILE];
        let mut s = 0f32;
        for (r, xv) in row.chunks(TILE).zip(x.chunks(TILE)) {
            let b = &mut buf[..r.len()];
            r.convert_to_f32_slice(b);
            s += <f32 as Row>::dot(b, xv, fma);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in ±1 with a few outliers (×8), deterministic.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let u = (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0;
                if i % 97 == 3 {
                    u * 8.0
                } else {
                    u
                }
            })
            .collect()
    }

    /// Every bf16 kernel this CPU can run, forced one by one, against an f64 reference of the
    /// same bf16 operands, for lengths around the kernels' 16-, 32- and 128-value steps.
    #[test]
    fn bf16_kernels_match_a_reference() {
        let mut ran = Vec::new();
        for len in [1, 7, 31, 32, 33, 127, 128, 129, 333, 3072] {
            let row: Vec<bf16> = values(len, 1).into_iter().map(bf16::from_f32).collect();
            let xb: Vec<bf16> = values(len, 2).into_iter().map(bf16::from_f32).collect();
            let xf: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
            let terms = row.iter().zip(&xb).map(|(a, b)| a.to_f64() * b.to_f64());
            let (want, mag) = terms.fold((0.0, 0.0), |(s, m), t| (s + t, m + t.abs()));
            let mut got = vec![(Bf16Kernel::Scalar, <bf16 as Row>::dot(&row, &xf, false))];
            if has_fma() {
                got.push((Bf16Kernel::Avx2, <bf16 as Row>::dot(&row, &xf, true)));
            }
            #[cfg(target_arch = "x86_64")]
            if has_avx512bf16() {
                // SAFETY: the CPU supports avx512f/bw and avx512bf16 (checked just above).
                got.push((Bf16Kernel::Avx512Bf16, unsafe { avx512::dot_bf16_dp(&row, &xb) }));
            }
            for (kernel, g) in got {
                // f32 accumulation's worst case: len · eps · Σ|terms|.
                let tol = len as f64 * f32::EPSILON as f64 * mag;
                assert!((g as f64 - want).abs() <= tol, "{kernel:?}, {len} values: {g} vs {want}");
                if !ran.contains(&kernel) {
                    ran.push(kernel);
                }
            }
        }
        // Which paths this CPU could check (the others need a CPU that has them).
        eprintln!("bf16 kernels checked: {ran:?}; selected: {:?}", bf16_kernel());
        assert!(ran.contains(&bf16_kernel()));
    }

    /// The AVX2 bf16 kernel for 1..=4 activation rows gives each row exactly its one-row dot
    /// (same lanes, same order), for lengths on and off its 16-value step.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_bf16_rows_equal_one_row_dots() {
        if !has_fma() {
            return;
        }
        for k in [1, 15, 16, 17, 333, 1024] {
            let row: Vec<bf16> = values(k, 11).into_iter().map(bf16::from_f32).collect();
            let xs = values(MAX_ROWS * k, 12);
            for m in 1..=MAX_ROWS {
                // SAFETY: the CPU supports avx2 and fma (checked above).
                let got = unsafe { avx2::dot_m_bf16_avx2(&row, &xs[..m * k], m) };
                for (i, g) in got.iter().enumerate().take(m) {
                    let want = unsafe { avx2::dot_bf16_avx2(&row, &xs[i * k..(i + 1) * k]) };
                    assert_eq!(g.to_bits(), want.to_bits(), "k {k} m {m} row {i}: {g} vs {want}");
                }
            }
        }
    }

    /// The half types' fallbacks (FMA without the vector widening; no FMA at all) give the bits of
    /// the f32 kernels on the widened values, as the vector kernels do (thin_product tests those).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn widened_fallbacks_equal_the_f32_kernels() {
        if !has_fma() {
            return;
        }
        for k in [1, 15, 16, 17, 64, 333] {
            let x = values(k, 21);
            let y0 = values(k, 22);
            let row: Vec<f16> = values(k, 23).into_iter().map(f16::from_f32).collect();
            let wide: Vec<f32> = row.iter().map(|h| h.to_f32()).collect();
            // SAFETY (all): the CPU supports avx2 and fma (checked above).
            let got = unsafe { avx2::dot_widened_fma(&row, &x) };
            assert_eq!(got.to_bits(), unsafe { avx2::dot_f32_avx2(&wide, &x) }.to_bits(), "fma dot, k {k}");
            let plain = dot_body!(&row[..], &x[..], |h: f16| h.to_f32(), madd_plain);
            assert_eq!(plain.to_bits(), <f32 as Row>::dot(&wide, &x, false).to_bits(), "plain dot, k {k}");
            let (mut got, mut want) = (y0.clone(), y0.clone());
            unsafe { avx2::axpy_widened_fma(0.37, &row, &mut got) };
            unsafe { avx2::axpy_f32_avx2(0.37, &wide, &mut want) };
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}
