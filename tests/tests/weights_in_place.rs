//! Weights left in the checkpoint's mapped pages (the candle backend's mapped tensors): lookup
//! tables (`Weights::get_table`) read exactly the rows a copied table gives, stay in their stored
//! dtype, still work in any other op (copied on first use), and refuse bad ids and shapes with
//! clear errors; half-precision linear weights (`Weights::get_linear` at their stored dtype) give
//! bit for bit the products of copied weights, for decode and prefill row counts; computed in
//! f32, they stay in place as f32 tensors whose products, bytes and other ops are those of the
//! widened copy.

use infer_backend_candle::CandleBackend;
use infer_core::{DType, Tensor, Weights};

const ROWS: usize = 50;
const DIM: usize = 24;

/// A bf16 table and an f16 one with varied values.
fn checkpoint(dir: &std::path::Path) {
    let value = |i: usize| ((i * 7919 % 1013) as f32 - 506.0) / 64.0;
    let bf16: Vec<u8> = (0..ROWS * DIM).flat_map(|i| half::bf16::from_f32(value(i)).to_le_bytes()).collect();
    let f16: Vec<u8> = (0..ROWS * DIM).flat_map(|i| half::f16::from_f32(value(i + 3)).to_le_bytes()).collect();
    infer_tests::write_safetensors(
        dir,
        &[
            ("table_bf16", safetensors::Dtype::BF16, vec![ROWS, DIM], &bf16[..]),
            ("table_f16", safetensors::Dtype::F16, vec![ROWS, DIM], &f16[..]),
        ],
    );
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn mapped_tables_read_the_rows_a_copied_table_reads() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint(tmp.path());
    let backend = CandleBackend::backend().unwrap();
    let w = Weights::from_dir(tmp.path(), &backend, DType::F32).unwrap();
    let ids = Tensor::from_u32(&backend, &[0, 49, 7, 7, 23, 1], &[2, 3]).unwrap();
    for (name, stored) in [("table_bf16", DType::BF16), ("table_f16", DType::F16)] {
        let mapped = w.get_table(name, &[ROWS, DIM]).unwrap();
        let copied = w.get_shaped(name, &[ROWS, DIM]).unwrap();
        assert_eq!((mapped.dtype(), copied.dtype()), (stored, DType::F32), "{name}: stored dtype kept");
        let rows = ids.embedding(&mapped).unwrap();
        assert_eq!((rows.dims(), rows.dtype()), (&[2, 3, DIM][..], stored), "{name}");
        assert_eq!(bits(&rows.to_dtype(DType::F32).unwrap()), bits(&ids.embedding(&copied).unwrap()), "{name}");

        // Any other op computes on a copy: a product over the table, and its bytes.
        let x = Tensor::from_f32(&backend, &[0.5; DIM], &[1, DIM]).unwrap().to_dtype(stored).unwrap();
        let want = x.to_dtype(DType::F32).unwrap().linear(&copied, None).unwrap();
        let got = x.linear(&mapped, None).unwrap().to_dtype(DType::F32).unwrap();
        let close = got
            .to_vec_f32()
            .unwrap()
            .iter()
            .zip(want.to_vec_f32().unwrap())
            .all(|(a, b)| (a - b).abs() <= 0.05 * b.abs().max(1.0));
        assert!(close, "{name}: linear over the mapped table");
        let bytes = mapped.to_bytes().unwrap();
        assert_eq!(bytes.len(), ROWS * DIM * 2, "{name}: to_bytes");

        let bad = Tensor::from_u32(&backend, &[ROWS as u32], &[1]).unwrap();
        let err = bad.embedding(&mapped).unwrap_err().to_string();
        assert!(err.contains("outside the table"), "{name}: {err}");
    }
    let err = w.get_table("table_bf16", &[ROWS, DIM + 1]).unwrap_err().to_string();
    assert!(err.contains("has shape") && err.contains("table_bf16"), "{err}");
    assert!(w.get_table("missing", &[ROWS, DIM]).is_err());
}

#[test]
fn linear_weights_read_in_place_give_the_products_of_copied_ones() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint(tmp.path());
    let backend = CandleBackend::backend().unwrap();
    for (name, stored) in [("table_bf16", DType::BF16), ("table_f16", DType::F16)] {
        let w = Weights::from_dir(tmp.path(), &backend, stored).unwrap();
        let in_place = w.get_linear(name, ROWS, DIM).unwrap();
        let copied = w.get_shaped(name, &[ROWS, DIM]).unwrap();
        assert_eq!(in_place.dtype(), stored);
        // 1 and 3 rows: the decode kernel; 40: the half-precision product.
        for rows in [1, 3, 40] {
            let x: Vec<f32> = (0..rows * DIM).map(|i| (i as f32 * 0.37).sin()).collect();
            let x = Tensor::from_f32(&backend, &x, &[rows, DIM]).unwrap().to_dtype(stored).unwrap();
            let got = x.linear(&in_place, None).unwrap().to_dtype(DType::F32).unwrap();
            let want = x.linear(&copied, None).unwrap().to_dtype(DType::F32).unwrap();
            assert_eq!((got.dims(), bits(&got)), (want.dims(), bits(&want)), "{name}, {rows} rows");
        }
        let err = w.get_linear(name, ROWS, DIM + 1).unwrap_err().to_string();
        assert!(err.contains("has shape"), "{err}");
    }
}

#[test]
fn half_linear_weights_computed_in_f32_stay_in_place_as_f32() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint(tmp.path());
    let backend = CandleBackend::backend().unwrap();
    let w = Weights::from_dir(tmp.path(), &backend, DType::F32).unwrap();
    for name in ["table_bf16", "table_f16"] {
        let in_place = w.get_linear(name, ROWS, DIM).unwrap();
        let copied = w.get_shaped(name, &[ROWS, DIM]).unwrap();
        assert_eq!((in_place.dtype(), copied.dtype()), (DType::F32, DType::F32), "{name}");
        // Widening is exact: the same values, bytes and results of other ops.
        assert_eq!(in_place.to_bytes().unwrap(), copied.to_bytes().unwrap(), "{name}: bytes");
        assert_eq!(bits(&in_place.add(&in_place).unwrap()), bits(&copied.add(&copied).unwrap()), "{name}: add");
        // 1 and 3 rows: the decode kernel; 5 and 40: the panels (f32 tiles); 300: the panels (gemm).
        for rows in [1, 3, 5, 40, 300] {
            let xs: Vec<f32> = (0..rows * DIM).map(|i| (i as f32 * 0.37).sin()).collect();
            let x = Tensor::from_f32(&backend, &xs, &[rows, DIM]).unwrap();
            let got = x.linear(&in_place, None).unwrap();
            assert_eq!((got.dims(), got.dtype()), (&[rows, ROWS][..], DType::F32), "{name}, {rows} rows");
            let (got, wf) = (got.to_vec_f32().unwrap(), copied.to_vec_f32().unwrap());
            for i in 0..rows {
                for j in 0..ROWS {
                    let terms = (0..DIM).map(|l| xs[i * DIM + l] as f64 * wf[j * DIM + l] as f64);
                    let (want, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                    // f32 accumulation in any order: at most k · eps · Σ|terms| away.
                    let tol = DIM as f64 * f32::EPSILON as f64 * mag;
                    let g = got[i * ROWS + j] as f64;
                    assert!((g - want).abs() <= tol, "{name}, {rows} rows, ({i}, {j}): {g} vs {want}");
                }
            }
        }
        // f32 activations only: a bf16 input against the f32-typed weight is refused clearly.
        let x = Tensor::from_f32(&backend, &[0.5; DIM], &[1, DIM]).unwrap().to_dtype(DType::BF16).unwrap();
        let err = x.linear(&in_place, None).unwrap_err().to_string();
        assert!(err.contains("convert"), "{name}: {err}");
    }
}

/// Quantized weights left in a GGUF file's pages keep the mapping alive, not the parsed file:
/// its metadata (Gemma 3's 262k-piece vocabulary: ~27 MB of strings and values) is freed once
/// loading is done. The real Gemma GGUF (tools/models/fetch.sh gemma).
#[test]
fn gguf_weights_in_place_do_not_keep_the_metadata() {
    let path = infer_tests::models_dir().join("gemma-3-270m-q4_k_m.gguf");
    let g = std::sync::Arc::new(infer_core::GgufFile::open(&path).unwrap());
    let backend = CandleBackend::backend().unwrap();
    let w = infer_core::gguf::weights(g.clone(), &backend, DType::F32, std::sync::Arc::new(|n: &str| n.to_string()))
        .unwrap();
    let t = w.get_shaped("blk.0.ffn_up.weight", &[2048, 640]).unwrap();
    assert_eq!(t.dtype(), DType::Q5_0, "kept as stored blocks");
    drop(w);
    assert_eq!(std::sync::Arc::strong_count(&g), 1, "the tensor holds the parsed file");
    // The tensor still reads its blocks from the mapping.
    let x = Tensor::from_f32(&backend, &[0.25; 640], &[1, 640]).unwrap();
    let y = x.linear(&t, None).unwrap().to_vec_f32().unwrap();
    assert!(y.len() == 2048 && y.iter().all(|v| v.is_finite()) && y.iter().any(|&v| v != 0.0));
}
