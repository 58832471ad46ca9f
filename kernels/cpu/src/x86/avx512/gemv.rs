//! The decode products' kernels (`crate::gemv`) for AVX-512: `vdpbf16ps` bf16 rows (BF16) and
//! the 16-value exact widenings the thin products read caches with.

use half::{bf16, f16};

use crate::gemv::{MAX_ROWS, PREFETCH_BF16};

/// `row · x` for bf16 rows and bf16 activations with `vdpbf16ps`: each f32 lane adds the
/// products of a pair of bf16s (exact in f32); the tail
/// through masked loads (zeros). Like all of AVX512-BF16 it flushes f32 subnormals to zero.
/// (The one-row form the tests check; products go through [`dot_m_bf16_dp`].)
#[cfg(test)]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn dot_bf16_dp(row: &[bf16], x: &[bf16]) -> f32 {
    let n = row.len().min(x.len());
    dot_rows_bf16_dp::<1>(&row[..n], &x[..n])[0]
}

/// `row · xs[r]` for the M rows of `xs` (each `row.len()` long), one load of each weight value:
/// 64 values per step in two accumulators per row, the weight stream prefetched 2 KB ahead
/// (the next row follows in memory). See [`dot_bf16_dp`] for the arithmetic.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn dot_rows_bf16_dp<const M: usize>(row: &[bf16], xs: &[bf16]) -> [f32; M] {
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
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn dot_m_bf16_dp(row: &[bf16], xs: &[bf16], m: usize) -> [f32; MAX_ROWS] {
    let mut o = [0f32; MAX_ROWS];
    match m {
        1 => o[..1].copy_from_slice(&dot_rows_bf16_dp::<1>(row, xs)),
        2 => o[..2].copy_from_slice(&dot_rows_bf16_dp::<2>(row, xs)),
        3 => o[..3].copy_from_slice(&dot_rows_bf16_dp::<3>(row, xs)),
        _ => o.copy_from_slice(&dot_rows_bf16_dp::<MAX_ROWS>(row, xs)),
    }
    o
}

/// 16 f16 values widened exactly (`vcvtph2ps`). Safety: AVX-512 F, 16 values at `p`.
#[inline(always)]
pub(crate) unsafe fn widen16_f16(p: *const f16) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

/// 16 bf16 values widened exactly (the upper halves of f32s). Safety: AVX-512 F, 16 values at `p`.
#[inline(always)]
pub(crate) unsafe fn widen16_bf16(p: *const bf16) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i))))
    }
}
