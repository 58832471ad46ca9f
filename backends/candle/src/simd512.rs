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

/// A mask of the first `n` (≤ 16) lanes.
#[inline(always)]
pub fn first_lanes(n: usize) -> u16 {
    ((1u32 << n) - 1) as u16
}
