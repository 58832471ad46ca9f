//! Decode-shaped dense linear layers on candle tensors: y (m, n) = x (m, k) @ wᵀ for a handful
//! of rows m and a row-major weight w (n, k) in f32, f16 or bf16, read in place (a tensor's
//! storage or a checkpoint's mapped bytes) by infer-cpu-kernels' `gemv` on candle's pool.

use candle_core::{DType as C, Result, Tensor};
use half::bf16;
use infer_cpu_kernels::gemv::{self as kernels, Rows};

pub use infer_cpu_kernels::gemv::{axpy4_f32, axpy_f32, bf16_kernel, dot_f32, has_fma, Bf16Kernel, Widen, MAX_ROWS};

use crate::pool::CandlePool;
use crate::weight_rows::{with_rows, WeightRows};

/// `x @ wᵀ` when the shapes suit this kernel (x (m, k) with m <= MAX_ROWS, w (n, k) row-major,
/// same float dtype); `None` to let the caller use gemm.
pub fn try_linear(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    try_linear_with(x, w, bf16_kernel())
}

/// [`try_linear`] with bf16 rows dotted by `bf16` (or the best kernel below it this CPU has):
/// benchmarks and tests compare the kernels through it.
pub fn try_linear_with(x: &Tensor, w: &Tensor, bf16: Bf16Kernel) -> Result<Option<Tensor>> {
    let Ok((n, k)) = w.dims2() else { return Ok(None) };
    with_rows(w, |rows| linear_rows(x, rows, n, k, bf16)).unwrap_or(Ok(None))
}

/// [`try_linear_with`] on the weight rows `w` (n, k) wherever they are.
pub fn linear_rows(x: &Tensor, w: WeightRows<'_>, n: usize, k: usize, bf16: Bf16Kernel) -> Result<Option<Tensor>> {
    let (m, kx) = x.dims2()?;
    // f32 activations also take half-precision rows (widened as they are read).
    let dtypes_fit = x.dtype() == w.dtype() || (x.dtype() == C::F32 && matches!(w.dtype(), C::BF16 | C::F16));
    if m == 0 || m > MAX_ROWS || k != kx || k == 0 || n == 0 || !dtypes_fit || w.numel() != n * k {
        return Ok(None);
    }
    // For `vdpbf16ps` bf16 activations are exact operands; f32 ones stay f32 (the widening kernel).
    let bf16_pairs = w.dtype() == C::BF16 && x.dtype() == C::BF16 && kernels::takes_bf16_pairs(bf16);
    let (xf, xb) = if bf16_pairs {
        (Vec::new(), x.flatten_all()?.to_vec1::<bf16>()?)
    } else {
        (x.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?, Vec::new())
    };
    let rows = match w {
        WeightRows::F32(v) => Rows::F32(v),
        WeightRows::Bf16(v) => Rows::Bf16(v),
        WeightRows::F16(v) => Rows::F16(v),
    };
    let mut out = vec![0f32; m * n];
    kernels::product(rows, &xf, &xb, bf16_pairs, (m, n, k), bf16, &CandlePool, &mut out);
    let y = Tensor::from_vec(out, (m, n), x.device())?;
    Ok(Some(if x.dtype() == C::F32 { y } else { y.to_dtype(x.dtype())? }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in ±1 with a few outliers (×8), deterministic (the kernels' tests' inputs).
    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let u = (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0;
                if i % 97 == 3 {
                    u * 8.0
                } else {
                    u
                }
            })
            .collect()
    }

    /// The op-level entry with each kernel forced (a kernel the CPU lacks falls back to the best
    /// it has): 1..=4 rows of bf16 activations against bf16 weights, n and k off the kernels' steps.
    #[test]
    fn forced_bf16_kernels_agree_through_try_linear() {
        use candle_core::Device;
        let (n, k) = (300, 333);
        let w = Tensor::from_vec(values(n * k, 3), (n, k), &Device::Cpu).unwrap().to_dtype(C::BF16).unwrap();
        let wr = w.to_dtype(C::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for m in 1..=MAX_ROWS {
            let x = Tensor::from_vec(values(m * k, 4 + m as u32), (m, k), &Device::Cpu).unwrap();
            let x = x.to_dtype(C::BF16).unwrap();
            let xr = x.to_dtype(C::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for kernel in [Bf16Kernel::Scalar, Bf16Kernel::Avx2, Bf16Kernel::Avx512Bf16] {
                let y = try_linear_with(&x, &w, kernel).unwrap().expect("decode-shaped");
                assert_eq!((y.dims(), y.dtype()), (&[m, n][..], C::BF16));
                let y = y.to_dtype(C::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let terms = (0..k).map(|l| xr[i * k + l] as f64 * wr[j * k + l] as f64);
                        let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                        // The bf16 output's rounding (2⁻⁸ relative) plus f32 accumulation's.
                        let tol = want.abs() / 256.0 + k as f64 * f32::EPSILON as f64 * mag;
                        let g = y[i * n + j] as f64;
                        assert!((g - want).abs() <= tol, "{kernel:?} m {m} ({i}, {j}): {g} vs {want}");
                    }
                }
            }
        }
    }
}
