//! The Snake activation of audio codecs, `x + inv_beta · sin²(alpha · x)`, over one channel's
//! samples: per block, `alpha · x` and its sine go through a buffer that stays in L1 and the
//! output is written once. Each value takes the same f32 operations in the same order as the
//! composition (mul, sin, sqr, mul, add; no fused multiply-adds), so the two agree bit for bit.
//! Compiled for AVX-512 or AVX2 where the CPU has it (uncapped).

#[cfg(target_arch = "x86_64")]
use crate::x86::{avx2::snake as avx2, avx512::snake as avx512};

/// `out[i] = x[i] + inv_beta · sin²(alpha · x[i])` (equal lengths).
pub fn snake_values(x: &[f32], alpha: f32, inv_beta: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::features().avx512() {
        // SAFETY: avx512f/bw checked at run time (avx2 comes with them).
        return unsafe { avx512::snake_values(x, alpha, inv_beta, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::features().avx2 {
        // SAFETY: avx2 checked at run time.
        return unsafe { avx2::snake_values(x, alpha, inv_beta, out) };
    }
    crate::generic::snake::snake_body(x, alpha, inv_beta, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activation::sin_slice;

    /// The same bits as the composition (mul, sin, sqr, mul, add) and as the portable build,
    /// over several blocks and a short last one.
    #[test]
    fn matches_its_composition_bit_for_bit() {
        let x: Vec<f32> = crate::bench_inputs::values(2500, 7).iter().map(|v| v * 40.0).collect();
        let (alpha, inv_beta) = (1.7f32, 0.43f32);
        let scaled: Vec<f32> = x.iter().map(|&v| v * alpha).collect();
        let mut sin = vec![0f32; x.len()];
        sin_slice(&scaled, &mut sin);
        let want: Vec<u32> = x.iter().zip(&sin).map(|(&v, &s)| (v + (s * s) * inv_beta).to_bits()).collect();
        let (mut got, mut portable) = (vec![0f32; x.len()], vec![0f32; x.len()]);
        snake_values(&x, alpha, inv_beta, &mut got);
        crate::generic::snake::snake_body(&x, alpha, inv_beta, &mut portable);
        assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
        assert_eq!(portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
    }
}
