//! The decode products' kernels (`crate::gemv`) for AVX2 + FMA (+ F16C for f16 rows).

use half::{bf16, f16};

use crate::gemv::{Widen, MAX_ROWS, PREFETCH_BF16};
use crate::generic::gemv::{axpy4_body, axpy_body, dot_body, madd_fused, widen_bf16};

/// [`dot_f32`]'s AVX2 arithmetic on half-precision values widened 8 at a time by `$widen8`
/// (a pointer to 8 values -> __m256): 16 lanes (element i in lane i % 16), the lanes summed in
/// order, then the tail's sequential multiply-adds.
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

#[inline(always)]
pub(crate) unsafe fn widen8_f16(p: *const f16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// bf16 -> f32 of 8 values at `p`: the 16 bits become the high half of the f32.
#[inline(always)]
pub(crate) unsafe fn widen8_bf16(p: *const bf16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i))))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_widened_f16(row: &[f16], x: &[f32]) -> f32 {
    lane16_dot!(row, x, |p| widen8_f16(p))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn axpy_widened_f16(a: f32, x: &[f16], y: &mut [f32]) {
    widened_axpy!(a, x, y, |p| widen8_f16(p))
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_widened_bf16(row: &[bf16], x: &[f32]) -> f32 {
    // The decode matvec's one-row kernel: the same lanes and order as `lane16_dot`.
    dot_rows_bf16_avx2::<1>(row, x)[0]
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn axpy_widened_bf16(a: f32, x: &[bf16], y: &mut [f32]) {
    widened_axpy!(a, x, y, |p| widen8_bf16(p))
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn axpy4_f32_avx2(a: [f32; 4], x: [&[f32]; 4], y: &mut [f32]) {
    axpy4_body(a, x, y, madd_fused)
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn axpy_f32_avx2(a: f32, x: &[f32], y: &mut [f32]) {
    axpy_body(a, x, y, madd_fused)
}

/// [`dot_f32`]'s and [`axpy_f32`]'s AVX2 + FMA arithmetic on values widened one by one (the
/// half types' kernels without their vector widening: f16 on a CPU without F16C).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_widened_fma<T: Widen>(row: &[T], x: &[f32]) -> f32 {
    dot_body!(row, x, |h: T| h.widen(), madd_fused)
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn axpy_widened_fma<T: Widen>(a: f32, x: &[T], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = madd_fused(a, x.widen(), *y);
    }
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_f32_avx2(row: &[f32], x: &[f32]) -> f32 {
    dot_body!(row, x, |v: f32| v, madd_fused)
}

#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_bf16_avx2(row: &[bf16], x: &[f32]) -> f32 {
    dot_body!(row, x, widen_bf16, madd_fused)
}

/// [`dot_bf16_avx2`] of one bf16 row with `M` rows of `xs` (`row.len()` values each): every 16
/// weights are widened once for all M rows (one call per weight row instead of M), and each row
/// keeps the one-row kernel's lanes, operations and final sum, so its result is the same bit for
/// bit (a batch of sequences decodes as each would alone).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_rows_bf16_avx2<const M: usize>(row: &[bf16], xs: &[f32]) -> [f32; MAX_ROWS] {
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
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_m_bf16_avx2(row: &[bf16], xs: &[f32], m: usize) -> [f32; MAX_ROWS] {
    match m {
        1 => dot_rows_bf16_avx2::<1>(row, xs),
        2 => dot_rows_bf16_avx2::<2>(row, xs),
        3 => dot_rows_bf16_avx2::<3>(row, xs),
        _ => dot_rows_bf16_avx2::<MAX_ROWS>(row, xs),
    }
}

/// f16 rows widened 8 at a time by F16C, 32 elements per step in 4 accumulators.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16_f16c(row: &[f16], x: &[f32]) -> f32 {
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
