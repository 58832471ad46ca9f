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

use half::{bf16, f16, slice::HalfFloatSliceExt};

use crate::out_ptr::OutPtr;
use crate::pool::Pool;
use crate::stream_split;

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
        Rows::Bf16(v) if bf16_pairs => run_rows(v, xb, m, n, k, out, pool, |r, x| unsafe { dot_m_bf16_dp(r, x, m) }),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports avx2 and fma (`detected_bf16_kernel`).
        Rows::Bf16(v) if kernel >= Bf16Kernel::Avx2 => {
            run_rows(v, xf, m, n, k, out, pool, |r, x| unsafe { dot_m_bf16_avx2(r, x, m) })
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
const PREFETCH_BF16: usize = 1024;

/// `row · x` for bf16 rows and bf16 activations with `vdpbf16ps`: each f32 lane adds the
/// products of a pair of bf16s (exact in f32); the tail
/// through masked loads (zeros). Like all of AVX512-BF16 it flushes f32 subnormals to zero.
/// (The one-row form the tests check; products go through [`dot_m_bf16_dp`].)
#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn dot_bf16_dp(row: &[bf16], x: &[bf16]) -> f32 {
    let n = row.len().min(x.len());
    dot_rows_bf16_dp::<1>(&row[..n], &x[..n])[0]
}

/// `row · xs[r]` for the M rows of `xs` (each `row.len()` long), one load of each weight value:
/// 64 values per step in two accumulators per row, the weight stream prefetched 2 KB ahead
/// (the next row follows in memory). See [`dot_bf16_dp`] for the arithmetic.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn dot_rows_bf16_dp<const M: usize>(row: &[bf16], xs: &[bf16]) -> [f32; M] {
    use std::arch::x86_64::*;
    let k = row.len();
    assert!(xs.len() >= M * k);
    let (rp, xp) = (row.as_ptr() as *const i16, xs.as_ptr() as *const i16);
    let bh = |v: __m512i| std::mem::transmute::<__m512i, __m512bh>(v);
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    let mut i = 0;
    while i + 64 <= k {
        // A hint only: an address past the slice is never dereferenced.
        _mm_prefetch::<_MM_HINT_T0>(rp.wrapping_add(i + PREFETCH_BF16) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(rp.wrapping_add(i + PREFETCH_BF16 + 32) as *const i8);
        // SAFETY: i + 64 <= k values of the row and of each of the M rows of xs.
        let w0 = bh(_mm512_loadu_si512(rp.add(i) as *const _));
        let w1 = bh(_mm512_loadu_si512(rp.add(i + 32) as *const _));
        for (r, a) in acc.iter_mut().enumerate() {
            let x0 = bh(_mm512_loadu_si512(xp.add(r * k + i) as *const _));
            let x1 = bh(_mm512_loadu_si512(xp.add(r * k + i + 32) as *const _));
            a[0] = _mm512_dpbf16_ps(a[0], w0, x0);
            a[1] = _mm512_dpbf16_ps(a[1], w1, x1);
        }
        i += 64;
    }
    while i < k {
        let len = (k - i).min(32);
        let mask: __mmask32 = if len == 32 { !0 } else { (1 << len) - 1 };
        // SAFETY: the mask reads only values i..i + len < k of each row.
        let w = bh(_mm512_maskz_loadu_epi16(mask, rp.add(i)));
        for (r, a) in acc.iter_mut().enumerate() {
            a[0] = _mm512_dpbf16_ps(a[0], w, bh(_mm512_maskz_loadu_epi16(mask, xp.add(r * k + i))));
        }
        i += len;
    }
    std::array::from_fn(|r| _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])))
}

/// [`dot_rows_bf16_dp`] for `m` (1..=MAX_ROWS) rows of `xs`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn dot_m_bf16_dp(row: &[bf16], xs: &[bf16], m: usize) -> [f32; MAX_ROWS] {
    let mut o = [0f32; MAX_ROWS];
    match m {
        1 => o[..1].copy_from_slice(&dot_rows_bf16_dp::<1>(row, xs)),
        2 => o[..2].copy_from_slice(&dot_rows_bf16_dp::<2>(row, xs)),
        3 => o[..3].copy_from_slice(&dot_rows_bf16_dp::<3>(row, xs)),
        _ => o.copy_from_slice(&dot_rows_bf16_dp::<MAX_ROWS>(row, xs)),
    }
    o
}

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
        return unsafe { axpy_f32_avx2(a, x, y) };
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

/// [`dot_f32`]'s AVX2 arithmetic on half-precision values widened 8 at a time by `$widen8`
/// (a pointer to 8 values -> __m256): 16 lanes (element i in lane i % 16), the lanes summed in
/// order, then the tail's sequential multiply-adds.
#[cfg(target_arch = "x86_64")]
macro_rules! lane16_dot {
    ($row:expr, $x:expr, $widen8:expr) => {{
        use std::arch::x86_64::*;
        let (row, x) = ($row, $x);
        let n = row.len().min(x.len());
        let body = n / 16 * 16;
        let (rp, xp) = (row.as_ptr(), x.as_ptr());
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for i in (0..body).step_by(16) {
            // SAFETY: i + 16 <= n values of both slices.
            lo = _mm256_fmadd_ps($widen8(rp.add(i)), _mm256_loadu_ps(xp.add(i)), lo);
            hi = _mm256_fmadd_ps($widen8(rp.add(i + 8)), _mm256_loadu_ps(xp.add(i + 8)), hi);
        }
        let mut lanes = [0f32; 16];
        _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
        let mut s = 0f32;
        for (r, xv) in row[body..n].iter().zip(&x[body..n]) {
            s = madd_fused(r.widen(), *xv, s);
        }
        lanes.iter().sum::<f32>() + s
    }};
}

/// [`axpy_f32`]'s AVX2 arithmetic (one multiply-add per element) on values widened 8 at a time.
#[cfg(target_arch = "x86_64")]
macro_rules! widened_axpy {
    ($a:expr, $x:expr, $y:expr, $widen8:expr) => {{
        use std::arch::x86_64::*;
        let (a, x, y) = ($a, $x, $y);
        let n = y.len().min(x.len());
        let body = n / 8 * 8;
        let (xp, yp, av) = (x.as_ptr(), y.as_mut_ptr(), _mm256_set1_ps(a));
        for i in (0..body).step_by(8) {
            // SAFETY: i + 8 <= n values of both slices.
            _mm256_storeu_ps(yp.add(i), _mm256_fmadd_ps(av, $widen8(xp.add(i)), _mm256_loadu_ps(yp.add(i))));
        }
        for (y, x) in y[body..n].iter_mut().zip(&x[body..n]) {
            *y = madd_fused(a, x.widen(), *y);
        }
    }};
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen8_f16(p: *const f16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// bf16 -> f32 of 8 values at `p`: the 16 bits become the high half of the f32.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen8_bf16(p: *const bf16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i))))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_widened_f16(row: &[f16], x: &[f32]) -> f32 {
    lane16_dot!(row, x, |p| widen8_f16(p))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_widened_f16(a: f32, x: &[f16], y: &mut [f32]) {
    widened_axpy!(a, x, y, |p| widen8_f16(p))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_widened_bf16(row: &[bf16], x: &[f32]) -> f32 {
    // The decode matvec's one-row kernel: the same lanes and order as `lane16_dot`.
    dot_rows_bf16_avx2::<1>(row, x)[0]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_widened_bf16(a: f32, x: &[bf16], y: &mut [f32]) {
    widened_axpy!(a, x, y, |p| widen8_bf16(p))
}

/// `y += Σ a[q] · x[q]` over four rows at once: `y` is loaded and stored once per four rows,
/// so the loop runs at the FMA rate instead of the store rate (AVX2 + FMA where the CPU has it).
pub fn axpy4_f32(a: [f32; 4], x: [&[f32]; 4], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_fma() {
        // SAFETY: the CPU supports avx2 and fma (checked at run time).
        return unsafe { axpy4_f32_avx2(a, x, y) };
    }
    axpy4_body(a, x, y, madd_plain)
}

#[inline(always)]
fn axpy4_body(a: [f32; 4], x: [&[f32]; 4], y: &mut [f32], madd: impl Fn(f32, f32, f32) -> f32) {
    let n = y.len().min(x[0].len()).min(x[1].len()).min(x[2].len()).min(x[3].len());
    let (y, x0, x1, x2, x3) = (&mut y[..n], &x[0][..n], &x[1][..n], &x[2][..n], &x[3][..n]);
    for i in 0..n {
        y[i] = madd(a[3], x3[i], madd(a[2], x2[i], madd(a[1], x1[i], madd(a[0], x0[i], y[i]))));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy4_f32_avx2(a: [f32; 4], x: [&[f32]; 4], y: &mut [f32]) {
    axpy4_body(a, x, y, madd_fused)
}

#[inline(always)]
fn axpy_body(a: f32, x: &[f32], y: &mut [f32], madd: impl Fn(f32, f32, f32) -> f32) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = madd(a, x, *y);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_f32_avx2(a: f32, x: &[f32], y: &mut [f32]) {
    axpy_body(a, x, y, madd_fused)
}

/// Whether the CPU has AVX2 and FMA (looked up once).
pub fn has_fma() -> bool {
    crate::cpu_features::features().fma()
}

/// Sum of `f(i) * x[i]` with 16 independent accumulators (so the loop vectorizes).
macro_rules! dot_body {
    ($row:expr, $x:expr, $widen:expr, $madd:expr) => {{
        let (row, x) = ($row, $x);
        let mut acc = [0f32; 16];
        let mut rc = row.chunks_exact(16);
        let mut xc = x.chunks_exact(16);
        for (r, xv) in (&mut rc).zip(&mut xc) {
            for l in 0..16 {
                acc[l] = $madd($widen(r[l]), xv[l], acc[l]);
            }
        }
        let mut s = 0f32;
        for (r, xv) in rc.remainder().iter().zip(xc.remainder()) {
            s = $madd($widen(*r), *xv, s);
        }
        acc.iter().sum::<f32>() + s
    }};
}

/// [`dot_f32`]'s and [`axpy_f32`]'s AVX2 + FMA arithmetic on values widened one by one (the
/// half types' kernels without their vector widening: f16 on a CPU without F16C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_widened_fma<T: Widen>(row: &[T], x: &[f32]) -> f32 {
    dot_body!(row, x, |h: T| h.widen(), madd_fused)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_widened_fma<T: Widen>(a: f32, x: &[T], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = madd_fused(a, x.widen(), *y);
    }
}

/// The half types' [`Widen`] methods: their AVX2 kernels where the CPU has them (`$vector`:
/// also F16C for f16), else [`dot_f32`]'s and [`axpy_f32`]'s own arithmetic on values widened
/// one by one (FMA or plain, as those take it), with no copy of the row.
macro_rules! widen_half {
    ($t:ty, $vector:expr, $dot:ident, $axpy:ident, $widen16:ident) => {
        impl Widen for $t {
            fn dot_widened(row: &[$t], x: &[f32]) -> f32 {
                let n = row.len().min(x.len());
                let (row, x) = (&row[..n], &x[..n]);
                #[cfg(target_arch = "x86_64")]
                if has_fma() {
                    // SAFETY (both): the CPU supports avx2 and fma, and f16c where `$vector`
                    // says so (checked at run time).
                    return if $vector { unsafe { $dot(row, x) } } else { unsafe { dot_widened_fma(row, x) } };
                }
                dot_body!(row, x, |h: $t| h.to_f32(), madd_plain)
            }
            fn axpy_widened(a: f32, x: &[$t], y: &mut [f32]) {
                #[cfg(target_arch = "x86_64")]
                if has_fma() {
                    // SAFETY: as above.
                    return if $vector { unsafe { $axpy(a, x, y) } } else { unsafe { axpy_widened_fma(a, x, y) } };
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

widen_half!(f16, has_f16c(), dot_widened_f16, axpy_widened_f16, widen16_f16);
widen_half!(bf16, true, dot_widened_bf16, axpy_widened_bf16, widen16_bf16);

/// 16 f16 values widened exactly (`vcvtph2ps`). Safety: AVX-512 F, 16 values at `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen16_f16(p: *const f16) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

/// 16 bf16 values widened exactly (the upper halves of f32s). Safety: AVX-512 F, 16 values at `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn widen16_bf16(p: *const bf16) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i))))
    }
}

#[inline(always)]
fn madd_plain(a: f32, b: f32, c: f32) -> f32 {
    a * b + c
}

#[inline(always)]
fn madd_fused(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

#[inline(always)]
fn widen_bf16(h: bf16) -> f32 {
    f32::from_bits((h.to_bits() as u32) << 16)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_avx2(row: &[f32], x: &[f32]) -> f32 {
    dot_body!(row, x, |v: f32| v, madd_fused)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_bf16_avx2(row: &[bf16], x: &[f32]) -> f32 {
    dot_body!(row, x, widen_bf16, madd_fused)
}

/// [`dot_bf16_avx2`] of one bf16 row with `M` rows of `xs` (`row.len()` values each): every 16
/// weights are widened once for all M rows (one call per weight row instead of M), and each row
/// keeps the one-row kernel's lanes, operations and final sum, so its result is the same bit for
/// bit (a batch of sequences decodes as each would alone).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_rows_bf16_avx2<const M: usize>(row: &[bf16], xs: &[f32]) -> [f32; MAX_ROWS] {
    use std::arch::x86_64::*;
    let k = row.len();
    assert!(xs.len() >= M * k, "{M} activation rows of {k}");
    let (rp, xp) = (row.as_ptr(), xs.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 2]; M];
    let body = k / 16 * 16;
    for i in (0..body).step_by(16) {
        // The weight stream 2 KB ahead (a prefetch never faults, past the row's end included):
        // on AMD Zen 3 this row-at-a-time stream went 8.8-9.3 -> 11.8 GB/s on one thread.
        _mm_prefetch::<_MM_HINT_T0>(rp.wrapping_add(i + PREFETCH_BF16) as *const i8);
        // SAFETY: i + 16 <= k values of the row and of each activation row.
        let (lo, hi) = (widen8_bf16(rp.add(i)), widen8_bf16(rp.add(i + 8)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = xp.add(r * k + i);
            acc[0] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x), acc[0]);
            acc[1] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x.add(8)), acc[1]);
        }
    }
    let mut out = [0f32; MAX_ROWS];
    for (r, (o, acc)) in out.iter_mut().zip(acc).enumerate() {
        let mut lanes = [0f32; 16];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc[0]);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), acc[1]);
        let mut s = 0f32;
        for (w, x) in row[body..].iter().zip(&xs[r * k + body..(r + 1) * k]) {
            s = madd_fused(widen_bf16(*w), *x, s);
        }
        *o = lanes.iter().sum::<f32>() + s;
    }
    out
}

/// [`dot_rows_bf16_avx2`] for `m` (1..=MAX_ROWS) rows of `xs`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_m_bf16_avx2(row: &[bf16], xs: &[f32], m: usize) -> [f32; MAX_ROWS] {
    match m {
        1 => dot_rows_bf16_avx2::<1>(row, xs),
        2 => dot_rows_bf16_avx2::<2>(row, xs),
        3 => dot_rows_bf16_avx2::<3>(row, xs),
        _ => dot_rows_bf16_avx2::<MAX_ROWS>(row, xs),
    }
}

impl Row for f32 {
    #[inline]
    fn dot(row: &[f32], x: &[f32], fma: bool) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if fma {
            // SAFETY: the CPU supports avx2 and fma (checked at run time).
            return unsafe { dot_f32_avx2(row, x) };
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
            return unsafe { dot_bf16_avx2(row, x) };
        }
        let _ = fma;
        dot_body!(row, x, widen_bf16, madd_plain)
    }
}

/// f16 rows widened 8 at a time by F16C, 32 elements per step in 4 accumulators.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_f16c(row: &[f16], x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = row.len().min(x.len());
    let (rp, xp) = (row.as_ptr() as *const u16, x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (l, a) in acc.iter_mut().enumerate() {
            let o = i + 8 * l;
            // SAFETY: o + 8 <= n elements of both slices; unaligned loads.
            let w = _mm256_cvtph_ps(_mm_loadu_si128(rp.add(o) as *const __m128i));
            *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp.add(o)), *a);
        }
        i += 32;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), sum);
    let mut s: f32 = lanes.iter().sum();
    for j in i..n {
        s = row[j].to_f32().mul_add(x[j], s);
    }
    s
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
            return unsafe { dot_f16_f16c(row, x) };
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
                got.push((Bf16Kernel::Avx512Bf16, unsafe { dot_bf16_dp(&row, &xb) }));
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
                let got = unsafe { dot_m_bf16_avx2(&row, &xs[..m * k], m) };
                for (i, g) in got.iter().enumerate().take(m) {
                    let want = unsafe { dot_bf16_avx2(&row, &xs[i * k..(i + 1) * k]) };
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
            let got = unsafe { dot_widened_fma(&row, &x) };
            assert_eq!(got.to_bits(), unsafe { dot_f32_avx2(&wide, &x) }.to_bits(), "fma dot, k {k}");
            let plain = dot_body!(&row[..], &x[..], |h: f16| h.to_f32(), madd_plain);
            assert_eq!(plain.to_bits(), <f32 as Row>::dot(&wide, &x, false).to_bits(), "plain dot, k {k}");
            let (mut got, mut want) = (y0.clone(), y0.clone());
            unsafe { axpy_widened_fma(0.37, &row, &mut got) };
            unsafe { axpy_f32_avx2(0.37, &wide, &mut want) };
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}
