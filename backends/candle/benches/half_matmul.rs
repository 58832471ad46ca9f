//! Half-precision (bf16, f16) weight products, old path and new side by side in one run:
//!
//! - decode matvec (1 and 4 rows): GB/s of weight bytes read, the AVX2 widening kernel against
//!   AVX-512 BF16 `vdpbf16ps` (where the CPU has it), on weights past the last-level cache
//!   (several matrices taken in turn) and on one matrix that stays in cache;
//! - f32 weights with 25-128 rows: gemm against [`f32_tiles`] (AVX2 and AVX-512 widths);
//! - many rows (39, 128): GFLOP/s of candle's matmul (bf16: the whole weight widened to f32 per
//!   call; f16: gemm's f16 kernel) against `half_gemm`'s kernels (f32 panels, AVX-512 BF16
//!   `vdpbf16ps` tiles, AMX-BF16 tiles where the process may use them), with f32 gemm on the
//!   same shape as the ceiling.
//!
//! `cargo bench -p infer-backend-candle --bench half_matmul [-- NAME...]`; threads:
//! `RAYON_NUM_THREADS` (tools/bench/half_matmul.sh runs 1 and 2). NAME: run the rows whose
//! label contains it.

mod common;

use common::{best, values};

use candle_core::{DType, Device, Tensor};
use infer_backend_candle::f32_tiles::{self, TileIsa};
use infer_backend_candle::gemv::{self, Bf16Kernel};
use infer_backend_candle::half_gemm::{self, HalfKernel};

/// (n, k) weight shapes: Voxtral Realtime's 4B decoder (d 3072, FFN 9216).
const SHAPES: [(usize, usize); 2] = [(3072, 3072), (9216, 3072)];
/// More (n, k) shapes for the many-row products: Qwen3-0.6B's (d 1024, q 2048, FFN 3072).
const SMALL_SHAPES: [(usize, usize); 3] = [(2048, 1024), (3072, 1024), (1024, 3072)];
/// (n, k) f32 weights with a few dozen rows: the Qwen3-TTS codec's pre-transformer (d 512,
/// 1024 attention / MLP) and ConvNeXt MLP (1024 -> 4096 -> 1024).
const F32_SHAPES: [(usize, usize); 4] = [(1024, 512), (512, 1024), (4096, 1024), (1024, 4096)];
/// Weight bytes the streaming matvec cycles through (past a 105 MB L3).
const STREAM_BYTES: usize = 512 << 20;

fn tensor(n: usize, k: usize, seed: u64, dtype: DType) -> Tensor {
    Tensor::from_vec(values(n * k, seed), (n, k), &Device::Cpu).unwrap().to_dtype(dtype).unwrap()
}

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let want = |label: &str| filter.is_empty() || filter.iter().any(|f| label.contains(f.as_str()));
    let threads = candle_core::utils::get_num_threads();
    println!(
        "threads {threads}; bf16 matvec kernel selected: {:?}; bf16 product kernel: {:?}",
        gemv::bf16_kernel(),
        half_gemm::best_kernel()
    );
    let kernels = [("avx2", Bf16Kernel::Avx2), ("avx512bf16", Bf16Kernel::Avx512Bf16)];

    println!("\n| matvec bf16 (n x k) | rows | weights | kernel | GB/s |");
    println!("| --- | ---: | --- | --- | ---: |");
    for (n, k) in SHAPES {
        let copies = STREAM_BYTES.div_ceil(n * k * 2);
        let ws: Vec<Tensor> = (0..copies).map(|c| tensor(n, k, 10 + c as u64, DType::BF16)).collect();
        for m in [1, 4] {
            let x = tensor(m, k, 3, DType::BF16);
            for (stream, label) in [(true, "streaming"), (false, "in cache")] {
                for (name, kernel) in kernels {
                    if !want(&format!("matvec {n}x{k} {m} {label} {name}")) {
                        continue;
                    }
                    let mut next = 0;
                    let s = best(20, || {
                        let w = &ws[if stream { next % copies } else { 0 }];
                        next += 1;
                        gemv::try_linear_with(&x, w, kernel).unwrap().unwrap();
                    });
                    let gbs = (n * k * 2) as f64 / s / 1e9;
                    println!("| {n}x{k} | {m} | {label} | {name} | {gbs:.1} |");
                }
            }
        }
    }

    println!("\n| product (n x k) | rows | dtype | path | ms | GFLOP/s |");
    println!("| --- | ---: | --- | --- | ---: | ---: |");
    for (n, k) in SHAPES.into_iter().chain(SMALL_SHAPES) {
        for m in [39, 128] {
            let flops = 2.0 * (m * n * k) as f64;
            let row = |dtype: &str, path: &str, s: f64| {
                println!("| {n}x{k} | {m} | {dtype} | {path} | {:.1} | {:.1} |", s * 1e3, flops / s / 1e9);
            };
            if want(&format!("gemm {n}x{k} {m} f32")) {
                let (w, x) = (tensor(n, k, 1, DType::F32), tensor(m, k, 2, DType::F32));
                let wt = w.t().unwrap();
                row("f32", "candle matmul", best(3, || drop(x.matmul(&wt).unwrap())));
            }
            for dtype in [DType::BF16, DType::F16] {
                let label = format!("gemm {n}x{k} {m} {dtype:?}");
                if !want(&label) {
                    continue;
                }
                let (w, x) = (tensor(n, k, 1, dtype), tensor(m, k, 2, dtype));
                let wt = w.t().unwrap();
                let name = format!("{dtype:?}").to_lowercase();
                row(&name, "candle matmul", best(3, || drop(x.matmul(&wt).unwrap())));
                let run = |kernel| best(3, || drop(half_gemm::try_linear_with(&x, &w, kernel).unwrap().unwrap()));
                row(&name, "panels", run(HalfKernel::Panels));
                if dtype == DType::BF16 {
                    row(&name, "vdpbf16ps tiles", run(HalfKernel::Dpbf16));
                    if half_gemm::best_kernel() == HalfKernel::Amx {
                        row(&name, "amx tiles", run(HalfKernel::Amx));
                    }
                }
            }
        }
    }

    println!("\n| f32 product (n x k) | rows | path | ms | GFLOP/s |");
    println!("| --- | ---: | --- | ---: | ---: |");
    for (n, k) in F32_SHAPES {
        for m in [25, 39, 96, 128, 256, 512] {
            if !want(&format!("f32 {n}x{k} {m}")) {
                continue;
            }
            let flops = 2.0 * (m * n * k) as f64;
            let row =
                |path: &str, s: f64| println!("| {n}x{k} | {m} | {path} | {:.2} | {:.1} |", s * 1e3, flops / s / 1e9);
            let (w, x) = (tensor(n, k, 1, DType::F32), tensor(m, k, 2, DType::F32));
            let wt = w.t().unwrap();
            row("candle matmul (gemm)", best(5, || drop(x.matmul(&wt).unwrap())));
            let wv = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for tiles in [TileIsa::Avx2, TileIsa::Avx512] {
                if f32_tiles::best_isa().is_some_and(|b| tiles == TileIsa::Avx2 || b == TileIsa::Avx512) {
                    // Past MAX_ROWS the tiles decline (gemm runs): no row for them.
                    if f32_tiles::linear_rows_with(&x, &wv, n, k, tiles).unwrap().is_some() {
                        let s = best(5, || drop(f32_tiles::linear_rows_with(&x, &wv, n, k, tiles).unwrap()));
                        row(&format!("f32 tiles {tiles:?}"), s);
                    }
                }
            }
        }
    }
}
