//! The activations' portable code ([`crate::activation`]): one body that every build (portable,
//! AVX2, AVX-512) compiles, so all of them give the same bits.

use crate::activation::Act;

/// `act` of `src` into `dst` (same length).
#[inline(always)]
pub fn act_body(act: Act, src: &[f32], dst: &mut [f32]) {
    match act {
        Act::Silu => dst.iter_mut().zip(src).for_each(|(y, &x)| *y = silu(x)),
        Act::GeluTanh => dst.iter_mut().zip(src).for_each(|(y, &x)| *y = gelu_tanh(x)),
        Act::Sin => {
            dst.iter_mut().zip(src).for_each(|(y, &x)| *y = sin_reduced(x));
            // Beyond the reduction's range (and for NaN / ±inf): libm, one value at a time. A
            // separate function: inlined, AVX-512's masked vectorization called sinf for every
            // lane and blended (a quarter of a codec decode).
            if src.iter().any(|&x| x.is_nan() || x.abs() > SIN_REDUCED_MAX) {
                sin_beyond_reduction(src, dst);
            }
        }
    }
}

#[cold]
#[inline(never)]
fn sin_beyond_reduction(src: &[f32], dst: &mut [f32]) {
    for (y, &x) in dst.iter_mut().zip(src) {
        if x.is_nan() || x.abs() > SIN_REDUCED_MAX {
            *y = x.sin();
        }
    }
}

/// Largest |x| [`sin_reduced`] serves: the quadrant count `n` then has at most 16 bits.
pub(crate) const SIN_REDUCED_MAX: f32 = 65536.0;

/// `sin x` for |x| <= [`SIN_REDUCED_MAX`]: `x = n π/2 + r` in f64, |r| <= π/4, then Cephes'
/// `sinf` / `cosf` polynomials (≈ 1 ulp) on r, chosen and signed by the quadrant `n mod 4`.
/// π/2 is split Cody-Waite style into a 36-bit head (`n` times it is exact, and so is `x`
/// minus that) and a tail, so `r` keeps its relative accuracy even where `x` is close to a
/// multiple of π and the result is small. Branch-free, so the compiler vectorizes it.
#[inline(always)]
#[allow(clippy::excessive_precision)] // Cephes' coefficients as published
fn sin_reduced(x: f32) -> f32 {
    const ROUND64: f64 = 6_755_399_441_055_744.0;
    let t = x as f64 * std::f64::consts::FRAC_2_PI + ROUND64;
    let quadrant = t.to_bits() & 3;
    let n = t - ROUND64;
    const PI_2_HEAD: f64 = 1.570_796_326_792_333_3;
    const PI_2_TAIL: f64 = 2.563_344_151_594_519e-12;
    let r = ((x as f64 - n * PI_2_HEAD) - n * PI_2_TAIL) as f32;
    let z = r * r;
    let sin_r = ((-1.951_529_589_1e-4f32 * z + 8.332_160_873_6e-3) * z - 1.666_665_461_1e-1) * z * r + r;
    let cos_r = ((2.443_315_711_809_948e-5f32 * z - 1.388_731_625_493_765e-3) * z + 4.166_664_568_298_827e-2) * z * z
        - 0.5 * z
        + 1.0;
    let v = if quadrant & 1 == 0 { sin_r } else { cos_r };
    if quadrant & 2 == 0 {
        v
    } else {
        -v
    }
}

/// `x · σ(x)`.
#[inline(always)]
fn silu(x: f32) -> f32 {
    x_sigmoid(x, -(x as f64))
}

/// `0.5 x (1 + tanh(u)) = x · σ(2u)`, `u = √(2/π) (x + 0.044715 x³)`. The sigmoid form has no
/// `1 + tanh` cancellation for negative x; `2u` is formed in f64 so that its rounding is not
/// magnified by `exp` (relative error ≈ |2u| × the argument's) in the negative tail.
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    const TWO_SQRT_2_OVER_PI: f64 = 2.0 * 0.797_884_560_802_865_4;
    let v = x as f64;
    x_sigmoid(x, -TWO_SQRT_2_OVER_PI * (v + 0.044715 * (v * v * v)))
}

/// `x / (1 + e^w)`, i.e. `x · σ(-w)`, evaluated as `x · e^{-|w|} / (1 + e^{-|w|})` when `w > 0`
/// so that `exp` never overflows. NaN propagates.
#[inline(always)]
fn x_sigmoid(x: f32, w: f64) -> f32 {
    let e = exp_neg(-w.abs());
    let num = if w > 0.0 { x * e } else { x };
    num / (1.0 + e)
}

/// `e^a` for `a <= 0` (NaN propagates): `a = n ln2 + r` in f64 (exact enough that only the
/// polynomial's error remains), `e^r` by Cephes' `expf` polynomial (|r| <= ln2/2, ≈ 1 ulp), and
/// `2^n` built in the exponent bits. Below -87 (e^a < 1.7e-38, subnormal territory) it is 0.
#[inline(always)]
#[allow(clippy::excessive_precision)] // Cephes' coefficients as published (each rounds to its f32)
fn exp_neg(a: f64) -> f32 {
    const LOG2_E: f64 = std::f64::consts::LOG2_E;
    const LN_2: f64 = std::f64::consts::LN_2;
    // Adding 1.5 · 2^52 rounds an f64 of magnitude < 2^51 to an integer (ties to even).
    const ROUND64: f64 = 6_755_399_441_055_744.0;
    // Likewise 1.5 · 2^23 for f32: afterwards the low mantissa bits hold the integer.
    const ROUND32: f32 = 12_582_912.0;
    let tiny = a < -87.0;
    let a = if tiny { -87.0 } else { a };
    let n = (a * LOG2_E + ROUND64) - ROUND64;
    let r = (a - n * LN_2) as f32;
    let p = 1.987_569_15e-4f32;
    let p = p * r + 1.398_199_950_7e-3;
    let p = p * r + 8.333_451_907_3e-3;
    let p = p * r + 4.166_579_589_4e-2;
    let p = p * r + 1.666_666_545_9e-1;
    let p = p * r + 5.000_000_120_1e-1;
    let er = p * (r * r) + r + 1.0;
    // n is an integer in [-126, 0]: 2^n from its bits.
    let nb = ((n as f32 + ROUND32).to_bits() as i32).wrapping_sub(ROUND32.to_bits() as i32);
    let two_n = f32::from_bits((nb.wrapping_add(127) << 23) as u32);
    if tiny {
        0.0
    } else {
        er * two_n
    }
}
