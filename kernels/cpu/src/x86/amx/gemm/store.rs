//! Accumulator tiles into the output. A tile holds outᵀ (16 weight rows × 16 activation rows,
//! row-major): it is transposed in AVX-512 registers and each output row's 16 columns are
//! written with one (masked) store, as f32 or rounded to bf16. Written one value at a time, the
//! transposed copy took as long as a third of the tile products it followed.

use std::arch::x86_64::*;

use half::bf16;

use super::kernel::ROWS;

/// An element the product writes: f32, or bf16 rounded as `bf16::from_f32` rounds.
pub trait OutElem: Copy + Send + Sync + 'static {
    /// Writes the first `cols` lanes of `v` to `dst`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL are available; `dst` is valid for `cols` (≤ 16) writes.
    unsafe fn store(dst: *mut Self, v: __m512, cols: usize);
}

impl OutElem for f32 {
    #[inline(always)]
    unsafe fn store(dst: *mut f32, v: __m512, cols: usize) {
        // SAFETY: the caller's contract (cols ≤ 16 lanes in bounds, AVX-512 F).
        unsafe { _mm512_mask_storeu_ps(dst, lanes(cols), v) }
    }
}

impl OutElem for bf16 {
    #[inline(always)]
    unsafe fn store(dst: *mut bf16, v: __m512, cols: usize) {
        // The branch-free rounding of `half_slices::round_bf16`, 16 lanes at once.
        let x = _mm512_castps_si512(v);
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(1));
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))));
        let quiet = _mm512_or_si512(_mm512_srli_epi32::<16>(x), _mm512_set1_epi32(0x40));
        let abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fff_ffff));
        let nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f80_0000));
        let halves = _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
        // SAFETY: the caller's contract (cols ≤ 16 lanes in bounds, AVX-512 BW/VL).
        unsafe { _mm256_mask_storeu_epi16(dst as *mut i16, lanes(cols), halves) }
    }
}

use crate::x86::avx512::simd::first_lanes as lanes;

/// Writes `tile` (outᵀ: element (r, l) = output row i0 + l, column j0 + r) into the row-major
/// m × n `out`, rows and columns past m and n dropped.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL; `out` holds m × n values; (i0, j0) is inside it.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn tile<O: OutElem>(tile: &[f32; ROWS * ROWS], out: *mut O, i0: usize, j0: usize, m: usize, n: usize) {
    let rows = transposed(tile);
    let cols = ROWS.min(n - j0);
    for (l, &row) in rows.iter().enumerate().take(ROWS.min(m - i0)) {
        // SAFETY: row i0 + l < m, columns j0..j0 + cols ≤ n (the caller's contract).
        unsafe { O::store(out.add((i0 + l) * n + j0), row, cols) };
    }
}

/// The 16 × 16 transpose of `t`: register l holds column l of `t`.
#[target_feature(enable = "avx512f")]
fn transposed(t: &[f32; ROWS * ROWS]) -> [__m512; ROWS] {
    let mut r = [_mm512_setzero_ps(); ROWS];
    for (i, v) in r.iter_mut().enumerate() {
        // SAFETY: reads one 16-value row of `t`.
        *v = unsafe { _mm512_loadu_ps(t[i * ROWS..].as_ptr()) };
    }
    crate::x86::avx512::simd::transpose16(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_avx512() -> bool {
        crate::cpu_features::features().avx512vl()
    }

    #[test]
    fn tiles_land_transposed_in_every_corner() {
        if !has_avx512() {
            eprintln!("no AVX-512: the tile store is not checked here");
            return;
        }
        let t: [f32; ROWS * ROWS] = std::array::from_fn(|i| i as f32 * 1.001 - 77.3);
        for (m, n, i0, j0) in [(16, 16, 0, 0), (40, 35, 32, 16), (21, 19, 16, 0), (5, 3, 0, 0)] {
            let mut f = vec![f32::NAN; m * n];
            let mut h = vec![bf16::NAN; m * n];
            // SAFETY: AVX-512 checked above; (i0, j0) is inside m × n.
            unsafe {
                tile(&t, f.as_mut_ptr(), i0, j0, m, n);
                tile(&t, h.as_mut_ptr(), i0, j0, m, n);
            }
            for i in 0..m {
                for j in 0..n {
                    let inside = (i0..i0 + ROWS).contains(&i) && (j0..j0 + ROWS).contains(&j);
                    let want = inside.then(|| t[(j - j0) * ROWS + (i - i0)]);
                    let (gf, gh) = (f[i * n + j], h[i * n + j]);
                    match want {
                        Some(v) => {
                            assert_eq!(gf.to_bits(), v.to_bits(), "f32 ({i}, {j}) in {m}x{n} at ({i0}, {j0})");
                            assert_eq!(gh.to_bits(), bf16::from_f32(v).to_bits(), "bf16 ({i}, {j})");
                        }
                        None => assert!(gf.is_nan() && gh.is_nan(), "({i}, {j}) written outside the tile"),
                    }
                }
            }
        }
    }

    #[test]
    fn bf16_lanes_round_as_half_does() {
        if !has_avx512() {
            return;
        }
        let bits = [0u32, 0x8000, 0x8001, 0x1_8000, 0x7f7f_ffff, 0x7f80_0000, 0x7f80_0001, 0xffc0_0000, 0x3f80_7fff];
        let vals: Vec<f32> = bits
            .iter()
            .chain(&[0x3f81_8000, 0xbf80_8000, 1, 0x0080_8000, 0x4049_0fdb, 0x7fff_ffff, 5])
            .map(|&b| f32::from_bits(b))
            .collect();
        let mut out = [bf16::ZERO; 16];
        // SAFETY: AVX-512 checked above; 16 lanes into 16 values.
        unsafe { bf16::store(out.as_mut_ptr(), _mm512_loadu_ps(vals.as_ptr()), 16) };
        for (v, o) in vals.iter().zip(&out) {
            assert_eq!(o.to_bits(), bf16::from_f32(*v).to_bits(), "{:#010x}", v.to_bits());
        }
    }
}
