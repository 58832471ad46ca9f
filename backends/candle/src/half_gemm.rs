//! Half-precision weight products with more rows than the decode kernel takes (prefill, encoder
//! batches) on candle tensors: y (m, n) = x (m, k) @ wᵀ for a row-major bf16 or f16 weight w
//! (n, k), through infer-cpu-kernels' `half_gemm` (AMX tiles, AVX-512 BF16 tiles or widened
//! panels; see there) on candle's pool.
//!
//! candle has no bf16 gemm: it widened the whole weight to f32 on every call (a 9216 × 3072
//! weight is a fresh 113 MB buffer per product).

use candle_core::{DType as C, Result, Tensor};
use half::{bf16, f16};

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use infer_cpu_kernels::half_gemm::amx;
#[cfg(target_arch = "x86_64")]
pub use infer_cpu_kernels::half_gemm::tiles;
pub use infer_cpu_kernels::half_gemm::{best_kernel, HalfKernel};
use infer_cpu_kernels::half_gemm::{panel_rows, product};

use crate::half_slices;
use crate::pool::CandlePool;
use crate::weight_rows::{with_rows, WeightRows};

/// `x @ wᵀ` for a bf16 or f16 `w` (n, k), row-major, and `x` (m, k) of the same dtype; `None`
/// when the operands are anything else (the caller falls back to candle's matmul).
pub fn try_linear(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    try_linear_with(x, w, best_kernel())
}

/// [`try_linear`] on `kernel` for bf16 products, or the best kernel below it that this CPU and
/// shape can run (AMX needs [`amx::available`], `vdpbf16ps` AVX-512 BF16 and an even k):
/// benchmarks and tests compare the kernels through it.
pub fn try_linear_with(x: &Tensor, w: &Tensor, kernel: HalfKernel) -> Result<Option<Tensor>> {
    let Ok((n, k)) = w.dims2() else { return Ok(None) };
    with_rows(w, |rows| linear_rows(x, rows, n, k, kernel)).unwrap_or(Ok(None))
}

/// [`try_linear_with`] on the weight rows `w` (n, k) wherever they are.
pub fn linear_rows(x: &Tensor, w: WeightRows<'_>, n: usize, k: usize, kernel: HalfKernel) -> Result<Option<Tensor>> {
    let (m, kx) = x.dims2()?;
    // f32 activations also take half-precision weights (the panels widen them).
    let widening = x.dtype() == C::F32 && matches!(w.dtype(), C::BF16 | C::F16);
    if m == 0 || k == 0 || n == 0 || k != kx || (x.dtype() != w.dtype() && !widening) || w.numel() != n * k {
        return Ok(None);
    }
    #[cfg(target_arch = "x86_64")]
    if let (WeightRows::Bf16(w), false) = (w, widening) {
        let amx = kernel >= HalfKernel::Amx && infer_cpu_kernels::cpu_features::amx_available();
        if amx || (kernel >= HalfKernel::Dpbf16 && k.is_multiple_of(2) && tiles::available()) {
            // x is bf16 too (the dtypes match): its values are exact tile operands.
            #[cfg(target_os = "linux")]
            if amx {
                // The tiles round their sums to bf16 as they store them: no f32 product.
                let mut out = vec![bf16::ZERO; m * n];
                with_bf16_values(x, |xb| amx::product(w, xb, m, n, k, &CandlePool, &mut out))?;
                return Tensor::from_vec(out, (m, n), x.device()).map(Some);
            }
            let mut out = vec![0f32; m * n];
            with_bf16_values(x, |xb| tiles::product(w, xb, m, n, k, &CandlePool, &mut out))?;
            return narrowed(out, (m, n), x.dtype()).map(Some);
        }
    }
    let _ = kernel;
    let rows = panel_rows(n, k, threads());
    let mut out = vec![0f32; m * n];
    match w {
        WeightRows::Bf16(v) => {
            product(v, &x.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?, m, n, k, rows, &CandlePool, &mut out)
        }
        WeightRows::F16(v) => {
            product(v, &x.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?, m, n, k, rows, &CandlePool, &mut out)
        }
        WeightRows::F32(_) => return Ok(None),
    }
    narrowed(out, (m, n), x.dtype()).map(Some)
}

/// `f` on the values of the bf16 tensor `x`: its storage in place where contiguous, else a copy.
fn with_bf16_values<R>(x: &Tensor, f: impl FnOnce(&[bf16]) -> R) -> Result<R> {
    {
        let (storage, layout) = x.storage_and_layout();
        if let (candle_core::Storage::Cpu(candle_core::CpuStorage::BF16(v)), Some((a, z))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&v[a..z]));
        }
    }
    Ok(f(&x.flatten_all()?.to_vec1::<bf16>()?))
}

/// The f32 product `out` as a tensor of `dtype`: bf16 and f16 rounded as `from_f32` rounds (to
/// nearest, ties to even), in parallel pieces, straight into the tensor's buffer.
fn narrowed(out: Vec<f32>, shape: (usize, usize), dtype: C) -> Result<Tensor> {
    let dev = &candle_core::Device::Cpu;
    match dtype {
        C::BF16 => Tensor::from_vec(half_slices::narrowed::<bf16>(&out), shape, dev),
        C::F16 => Tensor::from_vec(half_slices::narrowed::<f16>(&out), shape, dev),
        _ => Tensor::from_vec(out, shape, dev)?.to_dtype(dtype),
    }
}

/// candle's thread count, looked up once (the lookup may read /proc/cpuinfo).
fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(candle_core::utils::get_num_threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_inputs::values;

    /// Every kernel through the tensor entry point, asked for by name: each runs (or falls back
    /// to one this CPU has) and agrees with the reference; f16 always takes the panels.
    #[test]
    fn every_kernel_through_tensors() -> Result<()> {
        let (m, n, k) = (37, 45, 70);
        let dev = &candle_core::Device::Cpu;
        let w: Vec<bf16> = values(n * k, 3).into_iter().map(bf16::from_f32).collect();
        let x: Vec<bf16> = values(m * k, 4).into_iter().map(bf16::from_f32).collect();
        let (wt, xt) = (Tensor::from_slice(&w, (n, k), dev)?, Tensor::from_slice(&x, (m, k), dev)?);
        for kernel in [HalfKernel::Panels, HalfKernel::Dpbf16, HalfKernel::Amx] {
            let y = try_linear_with(&xt, &wt, kernel)?.expect("bf16 operands");
            let got = y.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()?;
            // The output is rounded to bf16: half a bf16 ulp more.
            let want = try_linear_with(&xt.to_dtype(C::F32)?, &wt.to_dtype(C::F32)?, kernel)?;
            assert!(want.is_none(), "f32 operands are not this module's");
            for i in 0..m {
                for j in 0..n {
                    let dot: f64 = (0..k).map(|l| x[i * k + l].to_f64() * w[j * k + l].to_f64()).sum();
                    let g = got[i * n + j] as f64;
                    assert!((g - dot).abs() <= dot.abs() / 128.0 + 1e-3, "{kernel:?} ({i}, {j}): {g} vs {dot}");
                }
            }
        }
        Ok(())
    }

    /// Reports the kernel this process picks (and checks a product on it) when run by
    /// [`isa_cap_keeps_amx_off`] in a child process; a no-op otherwise.
    #[test]
    fn child_reports_kernel() {
        if std::env::var_os("INFER_HALF_GEMM_CHILD").is_none() {
            return;
        }
        let (m, n, k) = (21, 35, 66);
        let w: Vec<bf16> = values(n * k, 5).into_iter().map(bf16::from_f32).collect();
        let x: Vec<bf16> = values(m * k, 6).into_iter().map(bf16::from_f32).collect();
        let dev = &candle_core::Device::Cpu;
        let (wt, xt) = (Tensor::from_slice(&w, (n, k), dev).unwrap(), Tensor::from_slice(&x, (m, k), dev).unwrap());
        let y = try_linear(&xt, &wt).unwrap().unwrap().to_dtype(C::F32).unwrap();
        let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|l| x[i * k + l].to_f64() * w[j * k + l].to_f64()).sum();
                assert!((got[i * n + j] as f64 - dot).abs() <= dot.abs() / 128.0 + 1e-3);
            }
        }
        println!("half_gemm kernel: {:?}", best_kernel());
    }

    /// `INFER_GGML_ISA` caps the product kernel (read once per process, so each cap runs in a
    /// child process): `avx512` keeps AMX off and the `vdpbf16ps` tiles on (where the CPU has
    /// them), `avx2` leaves the panels.
    #[test]
    fn isa_cap_keeps_amx_off() {
        let exe = std::env::current_exe().unwrap();
        // What the hardware has (this process may itself run under a cap).
        #[cfg(target_arch = "x86_64")]
        let dpbf16 = tiles::available() && infer_cpu_kernels::features().fma;
        #[cfg(not(target_arch = "x86_64"))]
        let dpbf16 = false;
        for (cap, want) in
            [("avx512", if dpbf16 { HalfKernel::Dpbf16 } else { HalfKernel::Panels }), ("avx2", HalfKernel::Panels)]
        {
            let out = std::process::Command::new(&exe)
                .args(["--exact", "half_gemm::tests::child_reports_kernel", "--nocapture", "--test-threads=1"])
                .env("INFER_HALF_GEMM_CHILD", "1")
                .env("INFER_GGML_ISA", cap)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "child with INFER_GGML_ISA={cap} failed: {stdout}");
            let line = format!("half_gemm kernel: {want:?}");
            assert!(stdout.contains(&line), "INFER_GGML_ISA={cap}: expected {line:?} in {stdout}");
        }
    }
}
