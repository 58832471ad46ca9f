//! [`crate::thin_product`]'s two products on AVX-512 registers, with the one-row kernels'
//! arithmetic, so the same bits: decode attention at depth spent most of its time in the
//! one-row kernels' scalar lane sums (`q · k`) and in reloading each output row per key
//! (`p · v`).

use std::arch::x86_64::*;

use crate::gemv::Widen;
use crate::thin_product::View;
use crate::x86::avx512::simd::{first_lanes, transpose16};

/// Keys per block of scores (one register of lane sums each, transposed together).
const KEYS: usize = 16;
/// Output rows and 16-column registers held in registers by [`accumulate`]'s blocks.
const ROWS: usize = 6;
const VECTORS: usize = 4;

/// `dst[i·n + j] = a_i · b_j` for `m` rows of `a` and the `n` contiguous columns of `b` (keys of
/// a cache, `b.row_stride == 1`), `k` a multiple of 16. Each dot is [`crate::gemv::dot_f32`]'s:
/// 16 lanes (element e in lane e % 16), one fused multiply-add per element in order, the lanes
/// summed in order from `Sum`'s zero, then the empty tail's zero added. The lane registers of 16
/// keys are transposed, so those in-order sums run as 16 vector adds for 16 keys at once.
///
/// # Safety
/// The CPU has AVX-512 F; the views hold every element the shapes imply; `dst` holds `m · n`.
#[target_feature(enable = "avx512f")]
pub unsafe fn scores<T: Widen>(m: usize, n: usize, k: usize, a: View, b: View<T>, dst: &mut [f32]) {
    debug_assert!(k.is_multiple_of(16) && b.row_stride == 1 && a.col_stride == 1);
    assert!(a.data.len() >= (m - 1) * a.row_stride + k && dst.len() >= m * n);
    assert!(b.data.len() >= (n - 1) * b.col_stride + k);
    // SAFETY (each): the bounds asserted above; the head dims of the models get their own
    // unrolled copy.
    unsafe {
        match k / 16 {
            4 => scores_of::<T, 4>(m, n, k, a, b, dst),
            8 => scores_of::<T, 8>(m, n, k, a, b, dst),
            16 => scores_of::<T, 16>(m, n, k, a, b, dst),
            _ => scores_of::<T, 0>(m, n, k, a, b, dst),
        }
    }
}

/// [`scores`] with `STEPS` registers per key (`k / 16`; 0: read from `k`).
#[inline(always)]
unsafe fn scores_of<T: Widen, const STEPS: usize>(m: usize, n: usize, k: usize, a: View, b: View<T>, dst: &mut [f32]) {
    let steps = if STEPS > 0 { STEPS } else { k / 16 };
    // SAFETY (the intrinsics and pointer reads): AVX-512 F, and the bounds [`scores`] asserted;
    // the keys past n in the last block repeat key n - 1 and are not stored.
    unsafe {
        let sum_start = _mm512_set1_ps([0f32; 0].iter().sum::<f32>());
        let zero = _mm512_setzero_ps();
        let (ap, bp, out) = (a.data.as_ptr(), b.data.as_ptr(), dst.as_mut_ptr());
        for j0 in (0..n).step_by(KEYS) {
            let nj = KEYS.min(n - j0);
            let mut keys = [bp; KEYS];
            for (jj, key) in keys.iter_mut().enumerate() {
                *key = bp.add((j0 + jj).min(n - 1) * b.col_stride);
            }
            for i in 0..m {
                let q = ap.add(i * a.row_stride);
                let mut acc = [zero; KEYS];
                for (acc, &key) in acc.iter_mut().zip(&keys) {
                    let mut s = zero;
                    for c in 0..steps {
                        s = _mm512_fmadd_ps(T::widen16(key.add(16 * c)), _mm512_loadu_ps(q.add(16 * c)), s);
                    }
                    *acc = s;
                }
                let mut sum = sum_start;
                for lane in transpose16(acc) {
                    sum = _mm512_add_ps(sum, lane);
                }
                let sum = _mm512_add_ps(sum, zero);
                _mm512_mask_storeu_ps(out.add(i * n + j0), first_lanes(nj), sum);
            }
        }
    }
}

/// `dst (m × n) = a (m × k) @ b (k × n)` for b's rows contiguous (values of a cache,
/// `b.col_stride == 1`). Each output element is [`crate::gemv::axpy_f32`]'s: from zero, one fused
/// multiply-add per row of b, in order. Blocks of up to [`ROWS`] output rows × [`VECTORS`]
/// registers of 16 columns stay in registers while b's rows stream past once per block.
///
/// # Safety
/// As [`scores`] (`a.col_stride == 1` unless `k == 1`).
#[target_feature(enable = "avx512f")]
pub unsafe fn accumulate<T: Widen>(m: usize, n: usize, k: usize, a: View, b: View<T>, dst: &mut [f32]) {
    debug_assert!(b.col_stride == 1 && dst.len() >= m * n && k > 0);
    assert!(a.data.len() > (m - 1) * a.row_stride + (k - 1) * a.col_stride);
    assert!(b.data.len() >= (k - 1) * b.row_stride + n && dst.len() >= m * n);
    let vectors = n / 16;
    let mut v0 = 0;
    while v0 < vectors {
        let w = if vectors - v0 >= VECTORS { VECTORS } else { 1 };
        let mut i0 = 0;
        while i0 < m {
            let r = ROWS.min(m - i0);
            let at = Block { k, a, i0, col0: v0 * 16, n };
            // SAFETY: rows i0 .. i0 + r < m and columns col0 .. col0 + 16 w <= n (asserted
            // bounds above).
            unsafe {
                match (r, w) {
                    (1, 1) => block::<T, 1, 1>(at, b, dst),
                    (2, 1) => block::<T, 2, 1>(at, b, dst),
                    (3, 1) => block::<T, 3, 1>(at, b, dst),
                    (4, 1) => block::<T, 4, 1>(at, b, dst),
                    (5, 1) => block::<T, 5, 1>(at, b, dst),
                    (_, 1) => block::<T, ROWS, 1>(at, b, dst),
                    (1, _) => block::<T, 1, VECTORS>(at, b, dst),
                    (2, _) => block::<T, 2, VECTORS>(at, b, dst),
                    (3, _) => block::<T, 3, VECTORS>(at, b, dst),
                    (4, _) => block::<T, 4, VECTORS>(at, b, dst),
                    (5, _) => block::<T, 5, VECTORS>(at, b, dst),
                    (_, _) => block::<T, ROWS, VECTORS>(at, b, dst),
                }
            }
            i0 += r;
        }
        v0 += w;
    }
    // Columns past the last whole register: the same multiply-adds one value at a time.
    for i in 0..m {
        for e in vectors * 16..n {
            let mut y = 0f32;
            for kk in 0..k {
                y = a.data[i * a.row_stride + kk * a.col_stride].mul_add(b.data[kk * b.row_stride + e].widen(), y);
            }
            dst[i * n + e] = y;
        }
    }
}

/// Where a block of [`accumulate`] sits: output rows from `i0`, columns from `col0`.
#[derive(Clone, Copy)]
struct Block<'a> {
    k: usize,
    a: View<'a>,
    i0: usize,
    col0: usize,
    n: usize,
}

/// Output rows `i0 .. i0 + R`, columns `col0 .. col0 + 16 W`.
///
/// # Safety
/// AVX-512 F; those rows and columns are inside `a`, `b` and `dst` ([`accumulate`] checks).
#[inline(always)]
unsafe fn block<T: Widen, const R: usize, const W: usize>(at: Block, b: View<T>, dst: &mut [f32]) {
    let Block { k, a, i0, col0, n } = at;
    // SAFETY (the intrinsics and pointer reads): the caller's contract.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        let (ap, bp) = (a.data.as_ptr(), b.data.as_ptr());
        for kk in 0..k {
            let row = bp.add(kk * b.row_stride + col0);
            let mut v = [_mm512_setzero_ps(); W];
            for (q, v) in v.iter_mut().enumerate() {
                *v = T::widen16(row.add(16 * q));
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let p = _mm512_set1_ps(*ap.add((i0 + i) * a.row_stride + kk * a.col_stride));
                for (acc, &v) in acc.iter_mut().zip(&v) {
                    *acc = _mm512_fmadd_ps(p, v, *acc);
                }
            }
        }
        let out = dst.as_mut_ptr();
        for (i, acc) in acc.iter().enumerate() {
            for (q, &acc) in acc.iter().enumerate() {
                _mm512_storeu_ps(out.add((i0 + i) * n + col0 + 16 * q), acc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0).collect()
    }

    /// Both kernels give the one-row kernels' bits (one dot / one axpy per output element), for
    /// every row count up to the thin limit, column counts on and off the register blocks, and
    /// each cache dtype.
    #[test]
    fn match_the_one_row_kernels_bit_for_bit() {
        if !crate::cpu_features::features().avx512() {
            eprintln!("skipped: no AVX-512 F/BW on this CPU");
            return;
        }
        fn check<T: Widen>(from: fn(f32) -> T) {
            for (m, n, k) in
                [(1, 16, 16), (7, 2048, 64), (4, 37, 256), (16, 100, 128), (2, 5, 32), (3, 64, 1), (6, 80, 17)]
            {
                let a_data = values(m * (k + 2), 1);
                let a = View { data: &a_data, row_stride: k + 2, col_stride: 1 };
                // Keys: n rows of k (+3 padding); values: k rows of n (+5 padding).
                let keys: Vec<T> = values(n * (k + 3), 2).into_iter().map(from).collect();
                let vals: Vec<T> = values(k * (n + 5), 3).into_iter().map(from).collect();
                if k.is_multiple_of(16) {
                    let kt = View { data: &keys, row_stride: 1, col_stride: k + 3 };
                    let mut got = vec![f32::NAN; m * n];
                    // SAFETY: has_avx512 held; the views hold the shapes' elements.
                    unsafe { scores(m, n, k, a, kt, &mut got) };
                    for i in 0..m {
                        for j in 0..n {
                            let want = T::dot_widened(&keys[j * (k + 3)..][..k], &a_data[i * (k + 2)..][..k]);
                            assert_eq!(got[i * n + j].to_bits(), want.to_bits(), "scores {m}x{n}x{k} ({i}, {j})");
                        }
                    }
                }
                let v = View { data: &vals, row_stride: n + 5, col_stride: 1 };
                let mut got = vec![f32::NAN; m * n];
                // SAFETY: as above.
                unsafe { accumulate(m, n, k, a, v, &mut got) };
                for i in 0..m {
                    let mut want = vec![0f32; n];
                    for kk in 0..k {
                        T::axpy_widened(a_data[i * (k + 2) + kk], &vals[kk * (n + 5)..][..n], &mut want);
                    }
                    for (j, w) in want.iter().enumerate() {
                        assert_eq!(got[i * n + j].to_bits(), w.to_bits(), "values {m}x{n}x{k} ({i}, {j})");
                    }
                }
            }
        }
        check(|x| x);
        check(f16::from_f32);
        check(bf16::from_f32);
    }
}
