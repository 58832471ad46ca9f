//! Decode-shaped dense linear layers: y (m, n) = x (m, k) @ wᵀ for a handful of rows m and a
//! row-major weight w (n, k) in f32, f16 or bf16.
//!
//! Decode is memory-bound: every weight byte is read once per token. candle's gemm reads f32
//! weights at roughly one core's bandwidth for m = 1 and has no bf16 kernel at all (it widens
//! the *whole* weight to f32 on every call: < 1 GB/s). Here each weight row is streamed once,
//! widened in registers, and dotted with the m input rows, with the rows of w split across
//! candle's thread pool; AVX2+FMA code is picked at run time where the CPU has it.

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};
use half::{bf16, f16, slice::HalfFloatSliceExt};

/// Largest number of input rows handled here; more rows go to gemm (compute-bound).
pub const MAX_ROWS: usize = 4;
/// Weight rows per work unit handed to a thread.
const ROWS_PER_UNIT: usize = 16;
/// Below this many weight elements the product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;
/// f16 rows are widened through a stack buffer of this many elements.
const TILE: usize = 256;

/// `x @ wᵀ` when the shapes suit this kernel (x (m, k) with m <= MAX_ROWS, w (n, k) row-major,
/// same float dtype); `None` to let the caller use gemm.
pub fn try_linear(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    let (m, k) = x.dims2()?;
    let (n, kw) = w.dims2()?;
    if m == 0 || m > MAX_ROWS || k != kw || k == 0 || n == 0 || x.dtype() != w.dtype() {
        return Ok(None);
    }
    if !matches!(w.dtype(), C::F32 | C::F16 | C::BF16) || !w.is_contiguous() {
        return Ok(None);
    }
    let xs = x.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let (storage, layout) = w.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else { return Ok(None) };
    let off = layout.start_offset();
    let mut out = vec![0f32; m * n];
    match cpu {
        CpuStorage::F32(v) => run(&v[off..off + n * k], &xs, m, n, k, &mut out),
        CpuStorage::BF16(v) => run(&v[off..off + n * k], &xs, m, n, k, &mut out),
        CpuStorage::F16(v) => run(&v[off..off + n * k], &xs, m, n, k, &mut out),
        _ => return Ok(None),
    }
    drop(storage);
    let y = Tensor::from_vec(out, (m, n), x.device())?;
    Ok(Some(if x.dtype() == C::F32 { y } else { y.to_dtype(x.dtype())? }))
}

/// A weight element type: how one row is dotted with an f32 vector.
trait Row: Copy + Send + Sync {
    fn dot(row: &[Self], x: &[f32], fma: bool) -> f32;
}

struct OutPtr(*mut f32);
// SAFETY: hands disjoint output columns to the pool's threads.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

fn run<T: Row>(w: &[T], xs: &[f32], m: usize, n: usize, k: usize, out: &mut [f32]) {
    let fma = has_fma();
    let units = n.div_ceil(ROWS_PER_UNIT);
    let body = |range: std::ops::Range<usize>, out: &OutPtr| {
        for u in range {
            for j in u * ROWS_PER_UNIT..((u + 1) * ROWS_PER_UNIT).min(n) {
                let row = &w[j * k..(j + 1) * k];
                for i in 0..m {
                    let v = T::dot(row, &xs[i * k..(i + 1) * k], fma);
                    // SAFETY: (i, j) is written by the one worker that owns row j.
                    unsafe { *out.0.add(i * n + j) = v };
                }
            }
        }
    };
    let ptr = OutPtr(out.as_mut_ptr());
    if n * k < PARALLEL_MIN {
        body(0..units, &ptr);
    } else {
        candle_core::utils::barrier_pool().execute_chunked(units, |r| body(r, &ptr));
    }
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

fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static FMA: OnceLock<bool> = OnceLock::new();
        *FMA.get_or_init(|| std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
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
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static F16C: OnceLock<bool> = OnceLock::new();
        *F16C.get_or_init(|| has_fma() && std::is_x86_feature_detected!("f16c"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
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
