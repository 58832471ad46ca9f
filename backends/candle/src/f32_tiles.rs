//! f32 weight products with a few dozen activation rows on candle tensors: infer-cpu-kernels'
//! `f32_tiles` (register tiles that read the weight in place) on candle's pool.

use candle_core::{Result, Tensor};

pub use infer_cpu_kernels::f32_tiles::{best_isa, TileIsa, MAX_ROWS};

use crate::pool::CandlePool;

/// `x @ wᵀ` for f32 `x` (m, k) and the f32 weight rows `w` (n, k) when m is in this kernel's
/// range and the CPU has the tiles; `None` otherwise (the caller uses gemm).
pub fn linear_rows(x: &Tensor, w: &[f32], n: usize, k: usize) -> Result<Option<Tensor>> {
    let Some(tiles) = best_isa() else { return Ok(None) };
    linear_rows_with(x, w, n, k, tiles)
}

/// [`linear_rows`] on `tiles` (capped to what the CPU has): tests and benchmarks pick the width.
pub fn linear_rows_with(x: &Tensor, w: &[f32], n: usize, k: usize, tiles: TileIsa) -> Result<Option<Tensor>> {
    let (m, kx) = x.dims2()?;
    if m <= crate::gemv::MAX_ROWS || m > MAX_ROWS || k != kx || n == 0 || k == 0 || w.len() != n * k {
        return Ok(None);
    }
    if x.dtype() != candle_core::DType::F32 {
        return Ok(None);
    }
    let Some(best) = best_isa() else { return Ok(None) };
    let tiles = if best == TileIsa::Avx2 { TileIsa::Avx2 } else { tiles };
    let xs = x.flatten_all()?.to_vec1::<f32>()?;
    let mut out = vec![0f32; m * n];
    infer_cpu_kernels::f32_tiles::product(w, &xs, m, n, k, tiles, &CandlePool, &mut out);
    Tensor::from_vec(out, (m, n), x.device()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_inputs::values;

    /// The tensor entry point takes only its row range and f32 operands.
    #[test]
    fn takes_only_its_shapes() -> Result<()> {
        if best_isa().is_none() {
            return Ok(());
        }
        let dev = &candle_core::Device::Cpu;
        let (n, k) = (40, 64);
        let w = values(n * k, 3);
        for (m, taken) in [(4, false), (5, true), (MAX_ROWS, true), (MAX_ROWS + 1, false)] {
            let x = Tensor::from_vec(values(m * k, 4), (m, k), dev)?;
            let y = linear_rows(&x, &w, n, k)?;
            assert_eq!(y.is_some(), taken, "m {m}");
            if let Some(y) = y {
                let want = x.matmul(&Tensor::from_slice(&w, (n, k), dev)?.t()?)?;
                let diff = (y - want)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
                assert!(diff < 1e-4, "m {m}: {diff}");
            }
        }
        let x = Tensor::from_vec(values(8 * k, 5), (8, k), dev)?.to_dtype(candle_core::DType::BF16)?;
        assert!(linear_rows(&x, &w, n, k)?.is_none(), "bf16 activations are not this kernel's");
        Ok(())
    }
}
