//! AVX-512 register helpers shared by the kernels that need them.

use std::arch::x86_64::*;

/// The 16 × 16 transpose of 16 registers: lane l of output register j is lane j of input
/// register l.
#[inline(always)]
pub fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    // SAFETY (every intrinsic below): register-only AVX-512 F shuffles; the callers are compiled
    // with AVX-512 F enabled and run only where the CPU has it.
    unsafe {
        // Pairs of rows interleaved by 32-bit values, then by 64-bit pairs: within each 128-bit
        // lane, four rows' values of one column sit together.
        let mut a = [_mm512_setzero_ps(); 16];
        for i in (0..16).step_by(2) {
            a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        let mut b = [_mm512_setzero_ps(); 16];
        let pd = _mm512_castps_pd;
        for g in (0..16).step_by(4) {
            b[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a[g]), pd(a[g + 2])));
            b[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a[g]), pd(a[g + 2])));
            b[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a[g + 1]), pd(a[g + 3])));
            b[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a[g + 1]), pd(a[g + 3])));
        }
        // Then 128-bit lanes across groups of four rows, in two rounds.
        let mut c = [_mm512_setzero_ps(); 16];
        for h in [0, 8] {
            for j in 0..4 {
                c[h + j] = _mm512_shuffle_f32x4::<0x88>(b[h + j], b[h + 4 + j]);
                c[h + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(b[h + j], b[h + 4 + j]);
            }
        }
        let mut out = [_mm512_setzero_ps(); 16];
        for j in 0..8 {
            out[j] = _mm512_shuffle_f32x4::<0x88>(c[j], c[8 + j]);
            out[8 + j] = _mm512_shuffle_f32x4::<0xdd>(c[j], c[8 + j]);
        }
        out
    }
}

/// Stores 8 registers of 16 lanes as rows: lane l of `v[c]` goes to `out + l · stride + c`, for
/// the first `rows` lanes and the first `cols` (≤ 8) columns. A tile kernel's epilogue, whose
/// accumulators each hold one output column of 16 rows: a masked store per row of 8 columns
/// instead of a scalar store per value (those cost as much as the products at k = 1024).
///
/// # Safety
/// The CPU has AVX-512 F and VL (the caller is compiled with both); those `rows` × `cols`
/// values are writable.
#[inline(always)]
pub unsafe fn store_columns8(v: &[__m512; 8], out: *mut f32, stride: usize, rows: usize, cols: usize) {
    // SAFETY: register-only AVX-512 F shuffles, then masked stores of the values the caller
    // may write (the caller's contract).
    unsafe {
        let pd = _mm512_castps_pd;
        let ps = _mm512_castpd_ps;
        // Per 128-bit group g: t[2c] = (v[2c][4g], v[2c+1][4g], v[2c][4g+1], v[2c+1][4g+1]),
        // t[2c+1] the same for lanes 4g + 2 and 4g + 3.
        let t: [__m512; 8] = std::array::from_fn(|i| {
            let (a, b) = (v[i / 2 * 2], v[i / 2 * 2 + 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_ps(a, b)
            } else {
                _mm512_unpackhi_ps(a, b)
            }
        });
        // u[q] (u[4 + q]): per group g, lane 4g + q's columns 0..4 (4..8).
        let u: [__m512; 8] = std::array::from_fn(|i| {
            let (c, q) = (i / 4, i % 4);
            let (a, b) = (pd(t[4 * c + q / 2]), pd(t[4 * c + 2 + q / 2]));
            ps(if q % 2 == 0 { _mm512_unpacklo_pd(a, b) } else { _mm512_unpackhi_pd(a, b) })
        });
        let mask = ((1u32 << cols) - 1) as __mmask8;
        let high = |x: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(pd(x)));
        for q in 0..4 {
            // [u[q].g0, u[4+q].g0, u[q].g1, u[4+q].g1]: lanes q and 4 + q; the same for groups 2
            // and 3: lanes 8 + q and 12 + q.
            let lo = _mm512_shuffle_f32x4::<0x44>(u[q], u[4 + q]);
            let hi = _mm512_shuffle_f32x4::<0xEE>(u[q], u[4 + q]);
            let (lo, hi) = (_mm512_shuffle_f32x4::<0xD8>(lo, lo), _mm512_shuffle_f32x4::<0xD8>(hi, hi));
            for (l, row) in [
                (q, _mm512_castps512_ps256(lo)),
                (4 + q, high(lo)),
                (8 + q, _mm512_castps512_ps256(hi)),
                (12 + q, high(hi)),
            ] {
                if l < rows {
                    _mm256_mask_storeu_ps(out.add(l * stride), mask, row);
                }
            }
        }
    }
}

/// A mask of the first `n` (≤ 16) lanes.
#[inline(always)]
pub fn first_lanes(n: usize) -> u16 {
    ((1u32 << n) - 1) as u16
}

/// e^x for 16 lanes within 2 ulp of the exact value (Cody–Waite range reduction to
/// |r| ≤ ln2 / 2, then a degree-6 polynomial, then the power of two by `vscalefps`): results
/// below f32's range flush to 0, above it overflow to +inf, NaN stays NaN. What softmax uses
/// instead of one libm call per value.
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline(always)]
pub unsafe fn exp16(x: __m512) -> __m512 {
    // SAFETY: register-only AVX-512 F arithmetic (the caller's contract).
    unsafe {
        // Past these e^x is 0 (after rounding) or +inf; clamping keeps the reduction exact.
        // max/min return their second operand when one is NaN: x there keeps it NaN.
        let x = _mm512_min_ps(_mm512_set1_ps(89.0), _mm512_max_ps(_mm512_set1_ps(-104.0), x));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
            x,
            _mm512_set1_ps(std::f32::consts::LOG2_E),
        ));
        // r = x - n ln2, with ln2 split in a part exact in a product with n and the rest.
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
        // e^r = 1 + r + r² (1/2 + r/6 + …): the classic single-precision minimax coefficients.
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0)));
        _mm512_scalef_ps(y, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_avx512() -> bool {
        crate::cpu_features::features().avx512f
    }

    /// Every rows × cols corner of a 16 × 8 block lands where it belongs (lane l of column c at
    /// row l, column c of a wider output), and nothing else is written: not the columns past
    /// `cols`, not the rows past `rows`, not the guard values around the block.
    #[test]
    fn store_columns8_writes_exactly_its_block() {
        if !(has_avx512() && crate::cpu_features::features().avx512vl) {
            eprintln!("skipped: no AVX-512 F/VL on this CPU");
            return;
        }
        #[target_feature(enable = "avx512f,avx512vl")]
        unsafe fn store(v: &[f32; 128], out: *mut f32, stride: usize, rows: usize, cols: usize) {
            let regs: [__m512; 8] = std::array::from_fn(|c| _mm512_loadu_ps(v[c * 16..].as_ptr()));
            store_columns8(&regs, out, stride, rows, cols);
        }
        // v[c · 16 + l]: column c, row l.
        let v: [f32; 128] = std::array::from_fn(|i| i as f32);
        let (stride, first) = (11, 3);
        for rows in [1, 3, 4, 5, 12, 15, 16] {
            for cols in 1..=8 {
                let mut out = vec![-1f32; first + 16 * stride + 8];
                // SAFETY: AVX-512 F/VL are present; rows < 16 and cols ≤ 8 stay inside `out`.
                unsafe { store(&v, out.as_mut_ptr().add(first), stride, rows, cols) };
                for (at, &got) in out.iter().enumerate() {
                    let (l, c) = (
                        (at as isize - first as isize).div_euclid(stride as isize),
                        (at as isize - first as isize).rem_euclid(stride as isize),
                    );
                    let inside = at >= first && (l as usize) < rows && (c as usize) < cols;
                    let want = if inside { (c as usize * 16 + l as usize) as f32 } else { -1.0 };
                    assert_eq!(got, want, "rows {rows} cols {cols}: out[{at}]");
                }
            }
        }
    }

    /// Distance in units in the last place between two finite positive f32s.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    /// e^x within 2 ulp of the correctly rounded value over softmax's range (and beyond), 0 and
    /// +inf past f32's range, NaN kept, e^0 exactly 1.
    #[test]
    fn exp16_is_within_two_ulp() {
        if !has_avx512() {
            eprintln!("skipped: no AVX-512 F on this CPU");
            return;
        }
        let exp = |x: f32| -> f32 {
            let mut lanes = [0f32; 16];
            // SAFETY: AVX-512 F is present (checked above).
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), exp16(_mm512_set1_ps(x))) };
            lanes[0]
        };
        let mut worst = 0;
        for i in 0..200_000 {
            let x = -87.0 + 175.0 * (i as f32 / 200_000.0);
            let want = (x as f64).exp() as f32;
            if want.is_finite() && want > f32::MIN_POSITIVE {
                worst = worst.max(ulps(exp(x), want));
            }
        }
        assert!(worst <= 2, "worst error {worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }
}
