//! f32 activations over slices: transformers' GELU (tanh) and SiLU, which run on every MLP
//! activation, and `sin` (audio codecs' Snake activations). All are computed here rather than
//! by libm one value at a time (`tanhf` / `expf` / `sinf`): GELU and SiLU are `x · σ(z)` with a
//! polynomial `exp`, `sin` a Cody-Waite reduction and polynomial, branch-free so the compiler
//! vectorizes them ([`crate::generic::activation`]). The dispatch compiles that code for
//! AVX-512 or AVX2 where the CPU has it (uncapped); the SIMD and portable builds run the same
//! operations (no fused multiply-adds), so they agree bit for bit.

use crate::half_slices::{HalfElem, HALF_BLOCK};
#[cfg(target_arch = "x86_64")]
use crate::x86::{avx2::activation as avx2, avx512::activation as avx512};

/// An activation [`act_slice`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `x · σ(x)`.
    Silu,
    /// transformers' `gelu_pytorch_tanh`, `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    GeluTanh,
    /// `sin x` (audio codecs' Snake activations take one per sample and channel).
    Sin,
}

/// `sin` of `src` into `dst` (same length).
pub fn sin_slice(src: &[f32], dst: &mut [f32]) {
    act_slice(Act::Sin, src, dst)
}

/// `act` of `src` into `dst` (same length), AVX-512 or AVX2 where the CPU has it.
pub fn act_slice(act: Act, src: &[f32], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::features().avx512() {
        // SAFETY: avx512f/bw checked at run time (avx2 comes with them).
        return unsafe { avx512::act_slice(act, src, dst) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::features().avx2 {
        // SAFETY: avx2 checked at run time.
        return unsafe { avx2::act_slice(act, src, dst) };
    }
    crate::generic::activation::act_body(act, src, dst)
}

/// `act` of bf16 or f16 values: each block widened to f32, [`act_slice`], rounded back once
/// (as PyTorch's CPU kernels round).
pub fn act_half<E: HalfElem>(act: Act, src: &[E], dst: &mut [E]) {
    let (mut wide, mut out) = ([0f32; HALF_BLOCK], [0f32; HALF_BLOCK]);
    for (s, d) in src.chunks(HALF_BLOCK).zip(dst.chunks_mut(HALF_BLOCK)) {
        let n = s.len();
        E::widen_into(s, &mut wide[..n]);
        act_slice(act, &wide[..n], &mut out[..n]);
        E::narrow_into(&out[..n], d);
    }
}

/// The activations' definitions in f64, which the tests of these kernels and of every backend's
/// activation ops compare with.
pub mod reference {
    /// transformers' tanh GELU.
    pub fn gelu(x: f32) -> f64 {
        let v = x as f64;
        let u = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
        // 0.5 v (1 + tanh u) = v / (1 + e^{-2u}), without cancellation.
        v / (1.0 + (-2.0 * u).exp())
    }

    pub fn sin(x: f32) -> f64 {
        (x as f64).sin()
    }

    pub fn silu(x: f32) -> f64 {
        let v = x as f64;
        v / (1.0 + (-v).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generic::activation::{act_body, SIN_REDUCED_MAX};

    use reference::{gelu as gelu_ref, silu as silu_ref, sin as sin_ref};

    /// Error in units of the last place of the f32 nearest the reference (for references below
    /// 1e-30, where the exp underflows, an absolute 1e-30 passes).
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        if want.abs() < 1e-30 {
            return if (got as f64 - want).abs() < 1e-30 { 0.0 } else { f64::INFINITY };
        }
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
        (got as f64 - want).abs() / ulp
    }

    fn inputs() -> Vec<f32> {
        let mut x: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 3e-4).collect();
        x.extend((-2000..=2000).map(|i| i as f32 * 0.05));
        x.extend([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 3e38, -3e38]);
        x
    }

    #[test]
    fn activations_are_within_a_few_ulp_of_f64() {
        let x = inputs();
        for (act, reference, bound) in [
            (Act::GeluTanh, gelu_ref as fn(f32) -> f64, 4.0),
            (Act::Silu, silu_ref as fn(f32) -> f64, 4.0),
            (Act::Sin, sin_ref as fn(f32) -> f64, 4.0),
        ] {
            let mut y = vec![0f32; x.len()];
            act_slice(act, &x, &mut y);
            let mut worst = (0.0, 0.0);
            for (&xi, &yi) in x.iter().zip(&y) {
                let e = ulps(yi, reference(xi));
                if e > worst.0 {
                    worst = (e, xi);
                }
            }
            assert!(worst.0 <= bound, "{act:?}: {} ulp at x = {}", worst.0, worst.1);
        }
    }

    #[test]
    fn activations_handle_special_values() {
        for act in [Act::GeluTanh, Act::Silu] {
            let x = [f32::NAN, f32::INFINITY, 0.0, -0.0];
            let mut y = [1f32; 4];
            act_slice(act, &x, &mut y);
            assert!(y[0].is_nan(), "{act:?}");
            assert_eq!(y[1], f32::INFINITY, "{act:?}");
            assert_eq!((y[2], y[3]), (0.0, 0.0), "{act:?}");
            let mut big = [0f32; 2];
            act_slice(act, &[-1e4, -3e38], &mut big);
            assert!(big.iter().all(|v| v.abs() < 1e-30 && v.is_finite()), "{act:?}: {big:?}");
        }
    }

    /// Large arguments up to and past the reduced range, and the special values libm handles.
    #[test]
    fn sin_is_close_over_its_whole_range() {
        let mut x: Vec<f32> = (-100_000..=100_000).map(|i| i as f32 * 0.7331).collect();
        x.extend([SIN_REDUCED_MAX, -SIN_REDUCED_MAX, 1e6, 3e38, f32::MIN_POSITIVE, -0.0]);
        // The f32s nearest to multiples of π, where sin is small and the reduction must be exact.
        x.extend((1..21_000).map(|m| (m as f64 * std::f64::consts::PI) as f32));
        let mut y = vec![0f32; x.len()];
        act_slice(Act::Sin, &x, &mut y);
        for (&xi, &yi) in x.iter().zip(&y) {
            assert!(ulps(yi, (xi as f64).sin()) <= 4.0, "sin({xi}) = {yi}");
        }
        let mut special = [0f32; 3];
        act_slice(Act::Sin, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY], &mut special);
        assert!(special.iter().all(|v| v.is_nan()), "{special:?}");
    }

    #[test]
    fn simd_and_portable_builds_agree() {
        let x = inputs();
        for act in [Act::GeluTanh, Act::Silu, Act::Sin] {
            let (mut a, mut b) = (vec![0f32; x.len()], vec![0f32; x.len()]);
            act_slice(act, &x, &mut a);
            act_body(act, &x, &mut b);
            let (a, b): (Vec<u32>, Vec<u32>) =
                (a.iter().map(|v| v.to_bits()).collect(), b.iter().map(|v| v.to_bits()).collect());
            assert!(a == b, "{act:?}");
        }
    }
}
