//! The native kernels against candle's GGML implementation (quantization, dequantization and
//! its own quantized matmul, which pairs activations the same way), through [`GgmlMatrix`]. The
//! SIMD kernels against the scalar ones: infer-cpu-kernels' own tests.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::*;

const FORMATS: [(DType, GgmlDType); 4] = [
    (DType::Q8_0, GgmlDType::Q8_0),
    (DType::Q5_0, GgmlDType::Q5_0),
    (DType::Q4K, GgmlDType::Q4K),
    (DType::Q6K, GgmlDType::Q6K),
];

/// A deterministic xorshift stream.
fn xorshift(seed: u64) -> impl Iterator<Item = u64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    std::iter::repeat_with(move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    })
}

/// Deterministic values with a spread of magnitudes and signs (a few large outliers per row).
fn values(n: usize, seed: u64) -> Vec<f32> {
    xorshift(seed)
        .take(n)
        .enumerate()
        .map(|(i, s)| {
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            if i % 97 == 3 {
                u * 8.0
            } else {
                u
            }
        })
        .collect()
}

fn quantized(dtype: DType, g: GgmlDType, rows: usize, cols: usize) -> (GgmlMatrix, QTensor) {
    let w = Tensor::from_vec(values(rows * cols, 7), (rows, cols), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&w, g).unwrap();
    let bytes = q.data().unwrap().into_owned();
    (GgmlMatrix::new(&bytes, dtype, &[rows, cols]).unwrap().unwrap(), q)
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    // NaN or infinity anywhere is an infinite error (f32::max alone drops NaN).
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, |m, d| if d.is_finite() { m.max(d) } else { f32::INFINITY })
        / scale
}

#[test]
fn dequantize_matches_candle_exactly() {
    for (dtype, g) in FORMATS {
        let (ours, q) = quantized(dtype, g, 3, 512);
        let want = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(ours.dequantize(), want, "{dtype}");
    }
}

#[test]
fn matmul_matches_candle_qmatmul() {
    // 512 columns: two k-quant super-blocks; 37 rows: not a multiple of any chunk size.
    let (rows, cols) = (37, 512);
    for (dtype, g) in FORMATS {
        let (ours, q) = quantized(dtype, g, rows, cols);
        for m in [1usize, 3] {
            let x = values(m * cols, 11 + m as u64);
            let got = ours.matmul(&x, m);
            let xt = Tensor::from_vec(x.clone(), (m, cols), &Device::Cpu).unwrap();
            // The same blocks: quantizing the same values again is deterministic.
            let w = Tensor::from_vec(values(rows * cols, 7), (rows, cols), &Device::Cpu).unwrap();
            let qm = QMatMul::from_qtensor(QTensor::quantize(&w, g).unwrap()).unwrap();
            assert_eq!(q.data().unwrap(), QTensor::quantize(&w, g).unwrap().data().unwrap());
            let want = qm.forward(&xt).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            // Same integer products; only the f32 summation order and rare rounding ties differ.
            let rel = max_rel(&got, &want);
            assert!(rel < 2e-3, "{dtype} m={m}: max relative difference {rel} against candle");
            // And close to the f32 product with the dequantized weight: activation rounding only,
            // coarser for Q8_K (one scale per 256 values, set by this data's 8x outliers).
            let wf = ours.dequantize();
            let exact: Vec<f32> = (0..m)
                .flat_map(|i| {
                    let (x, wf) = (&x, &wf);
                    (0..rows).map(move |j| (0..cols).map(|c| x[i * cols + c] * wf[j * cols + c]).sum::<f32>())
                })
                .collect();
            let rel = max_rel(&got, &exact);
            assert!(rel < 5e-2, "{dtype} m={m}: max relative difference {rel} against the f32 product");
        }
    }
}

/// Batched (tiled) products equal the one-row ones bit for bit: prefill and decode agree. 5 and
/// 7 activation rows run the wide tile (4), the pair tile (2) and single rows.
#[test]
fn tiles_match_single_rows_exactly() {
    let (rows, cols) = (9usize, 640usize);
    for (dtype, g) in FORMATS {
        let (ours, _) = quantized(dtype, g, rows, cols.div_ceil(256) * 256);
        let k = ours.cols();
        for m in [5, 7] {
            let x = values(m * k, 3);
            let batched = ours.matmul(&x, m);
            for i in 0..m {
                let one = ours.matmul(&x[i * k..(i + 1) * k], 1);
                assert_eq!(one, batched[i * rows..(i + 1) * rows], "{dtype}, {m} rows: row {i}");
            }
        }
    }
}

/// Q5_0 rows of an odd block count take the AVX2 one-row kernel on AVX-512 CPUs, an even count
/// the AVX-512 one; the AVX-512 tiles take any count: either way tiles equal single rows.
/// 7 activation rows run one wide tile (4), one pair tile (2) and one single row.
#[test]
fn q5_0_tiles_match_single_rows_for_odd_and_even_block_counts() {
    for cols in [21 * 32, 22 * 32] {
        let (ours, _) = quantized(DType::Q5_0, GgmlDType::Q5_0, 9, cols);
        for m in [5, 7] {
            let x = values(m * cols, 4);
            let batched = ours.matmul(&x, m);
            for i in 0..m {
                let one = ours.matmul(&x[i * cols..(i + 1) * cols], 1);
                assert_eq!(one, batched[i * 9..(i + 1) * 9], "{cols} columns, {m} rows: row {i}");
            }
        }
    }
}

#[test]
fn unsupported_shapes_fall_back() {
    assert!(GgmlMatrix::new(&[0u8; 34], DType::Q4_0, &[1, 32]).unwrap().is_none());
    assert!(GgmlMatrix::new(&[0u8; 144], DType::Q4K, &[2, 128]).unwrap().is_none());
    assert!(GgmlMatrix::new(&[0u8; 33], DType::Q8_0, &[1, 32]).is_err());
}
