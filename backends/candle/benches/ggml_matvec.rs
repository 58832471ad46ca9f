//! Decode-shaped quantized matvecs (one activation row) on the native GGML kernels: GB/s of
//! weight bytes streamed, to compare with the machine's read bandwidth (tools/bench/membw.c).
//!
//! `cargo bench -p infer-backend-candle --bench ggml_matvec [-- NAME...]` (threads:
//! `CANDLE_NUM_THREADS`; NAME: run the cases whose name contains it). With `PREFILL_ROWS=m`
//! each case multiplies `m` activation rows instead (the prefill tiles) and reports GOP/s.

use std::sync::Arc;
use std::time::Instant;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RArc, RSlice};

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use infer_backend_candle::ggml::GgmlMatrix;
use infer_core::{DType, SharedBytesImpl, SharedBytesImpl_TO};

/// Gemma 3 270M's tied output projection and an FFN matrix, Qwen2.5 0.5B's FFN down.
/// The "hot" rows fit in L2 (about 1 MB): they measure the kernels' compute speed, the others
/// (100-180 MB, past the last-level cache) how close streaming comes to the read bandwidth.
const CASES: [(&str, DType, GgmlDType, usize, usize); 8] = [
    ("output q8_0", DType::Q8_0, GgmlDType::Q8_0, 262_144, 640),
    ("hot q8_0", DType::Q8_0, GgmlDType::Q8_0, 1536, 640),
    ("ffn q5_0", DType::Q5_0, GgmlDType::Q5_0, 2048 * 128, 640),
    ("hot q5_0", DType::Q5_0, GgmlDType::Q5_0, 2048, 640),
    ("attn_out q4_k", DType::Q4K, GgmlDType::Q4K, 640 * 256, 1024),
    ("hot q4_k", DType::Q4K, GgmlDType::Q4K, 1024, 1024),
    ("ffn_down q6_k", DType::Q6K, GgmlDType::Q6K, 896 * 32, 4864),
    ("hot q6_k", DType::Q6K, GgmlDType::Q6K, 128, 4864),
];

fn main() {
    // `cargo bench ... -- hot` runs the cases whose name contains "hot" (cargo adds `--bench`).
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    for (name, dtype, g, rows, cols) in CASES {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let values: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1013) as f32 / 1013.0) - 0.5).collect();
        let w = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
        let bytes = QTensor::quantize(&w, g).unwrap().data().unwrap().into_owned();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let m = GgmlMatrix::new(&bytes, dtype, &[rows, cols]).unwrap().unwrap();
        run(name, &m, &x, bytes.len());
        if bytes.len() > 64 << 20 {
            run(&format!("{name} (mapped)"), &mapped(&bytes, dtype, rows, cols), &x, bytes.len());
        }
    }
    if filter.is_empty() || filter.iter().any(|f| "layers q5_0".contains(f.as_str())) {
        layer_stack();
    }
}

/// A decoder's layers as a decode step meets them: many small matrices (Gemma 3 270M's FFN,
/// 2048 x 640 in Q5_0, 0.9 MB), each read once in turn, 72 of them (65 MB, past the last-level
/// cache). Each product is one dispatch over the pool, so this also counts what a product pays
/// once (waking the pool, the stream's first reads, the threads' uneven finish) that the one
/// large matrix hides.
fn layer_stack() {
    let (rows, cols, count) = (2048, 640, 72);
    let values: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1013) as f32 / 1013.0) - 0.5).collect();
    let w = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
    let bytes = QTensor::quantize(&w, GgmlDType::Q5_0).unwrap().data().unwrap().into_owned();
    let layers: Vec<GgmlMatrix> =
        (0..count).map(|_| GgmlMatrix::new(&bytes, DType::Q5_0, &[rows, cols]).unwrap().unwrap()).collect();
    let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
    let (best, sink) = best_of(3, 20, || layers.iter().map(|m| m.matmul(&x, 1)[0]).sum());
    let gb = (bytes.len() * count) as f64 / 1e9;
    let name = format!("layers q5_0 x{count}");
    println!("{name:22} {:7.1} MB  best {:7.3} ms  {:6.2} GB/s  ({sink:.1})", gb * 1e3, best * 1e3, gb / best);
}

/// The same blocks in a memory-mapped file, as a GGUF checkpoint's weights are multiplied.
fn mapped(bytes: &[u8], dtype: DType, rows: usize, cols: usize) -> GgmlMatrix {
    let mut file = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    let map = MappedFile(Arc::new(unsafe { memmap2::Mmap::map(&file) }.unwrap()));
    let owner = SharedBytesImpl_TO::from_ptr(RArc::new(map), TD_Opaque);
    GgmlMatrix::shared(owner, 0, bytes.len(), dtype, &[rows, cols]).unwrap().unwrap()
}

#[derive(Clone)]
struct MappedFile(Arc<memmap2::Mmap>);

impl SharedBytesImpl for MappedFile {
    fn bytes(&self) -> RSlice<'_, u8> {
        self.0[..].into()
    }
}

fn run(name: &str, m: &GgmlMatrix, x: &[f32], n_bytes: usize) {
    let small = n_bytes < 4 << 20;
    if let Some(rows) = std::env::var("PREFILL_ROWS").ok().and_then(|v| v.parse::<usize>().ok()) {
        let xs: Vec<f32> = (0..rows).flat_map(|r| x.iter().map(move |v| v * (1.0 + r as f32 * 0.01))).collect();
        let (best, sink) = best_of(1, if small { 100 } else { 5 }, || m.matmul(&xs, rows)[0]);
        let ops = 2.0 * (m.rows() * x.len() * rows) as f64;
        println!("{name:22} x{rows}  best {:8.3} ms  {:6.1} GOP/s  ({sink:.1})", best * 1e3, ops / best / 1e9);
        return;
    }
    let (best, sink) = best_of(3, if small { 400 } else { 20 }, || m.matmul(x, 1)[0]);
    let gb = n_bytes as f64 / 1e9;
    println!("{name:22} {:7.1} MB  best {:7.3} ms  {:6.2} GB/s  ({sink:.1})", gb * 1e3, best * 1e3, gb / best);
}

/// The fastest of `runs` timed calls of `f` after `warm` untimed ones, and the sum of its results
/// (printed, so the products are not optimized away).
fn best_of(warm: usize, runs: usize, mut f: impl FnMut() -> f32) -> (f64, f32) {
    let mut sink = 0f32;
    for _ in 0..warm {
        sink += f();
    }
    let mut best = f64::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        sink += f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, sink)
}
