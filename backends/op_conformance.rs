// The op conformance suite shared by the backends that are checked against candle (tch, MLX):
// every op through infer-core's public `Tensor` API, on the same inputs as candle's op tests
// (whose own tests check each op against naive Rust). Shapes, dtypes and values must agree.
// A backend's tests/ops.rs defines `fn under_test() -> Backend`, `const UNDER_TEST: &str` and
// `fn tol_floor() -> f32` (the least relative tolerance of a float check: 0 where the backend
// must match candle exactly), then `include!`s this file; what only that backend has follows in
// its own file.
//
// "Measured" next to a tolerance: the largest |ours - candle's| / (1 + |candle's|) the check saw,
// tch and MLX on the CPU of an x86 AVX-512 machine, the same with candle on each of its kernel
// paths (`INFER_GGML_ISA` avx512, avx2, scalar) unless noted.

use infer_backend_candle::CandleBackend;
use infer_core::{AttentionOpts, Backend, BinaryOp, CmpOp, Conv1dParams, DType, ReduceOp, RopeLayout, Tensor, UnaryOp};

fn candle() -> Backend {
    CandleBackend::backend().expect("candle backend")
}

/// Deterministic uniform values in [-1, 1) (the generator of candle's op tests).
fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn t(b: &Backend, data: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_f32(b, data, shape).unwrap()
}

fn tu(b: &Backend, data: &[u32], shape: &[usize]) -> Tensor {
    Tensor::from_u32(b, data, shape).unwrap()
}

fn tu8(b: &Backend, data: &[u8], shape: &[usize]) -> Tensor {
    Tensor::from_bytes(b, data, DType::U8, shape).unwrap()
}

#[allow(dead_code)]
fn i64s(x: &Tensor) -> Vec<i64> {
    assert_eq!(x.dtype(), DType::I64);
    x.to_bytes().unwrap().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Runs `f` on both backends and checks that shapes, dtypes and values agree: integers exactly,
/// floats within `tol` (at least [`tol_floor`]) relative (NaN matches NaN).
#[track_caller]
fn same(what: &str, tol: f32, f: impl Fn(&Backend) -> Tensor) {
    let tol = tol.max(tol_floor());
    let (x, y) = (f(&under_test()), f(&candle()));
    assert_eq!(x.dims(), y.dims(), "{what}: shapes");
    assert_eq!(x.dtype(), y.dtype(), "{what}: dtypes");
    if x.dtype().is_float() {
        let (a, b) = (x.to_vec_f32().unwrap(), y.to_vec_f32().unwrap());
        for (i, (g, w)) in a.iter().zip(&b).enumerate() {
            let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()) || g == w;
            assert!(
                ok,
                "{what}: element {i}: {UNDER_TEST} {g}, candle {w} (tol {tol})\n {UNDER_TEST} {a:?}\n candle {b:?}"
            );
        }
    } else {
        assert_eq!(x.to_bytes().unwrap(), y.to_bytes().unwrap(), "{what}: values");
    }
}

/// Both backends fail (the error text is the backend's own).
#[track_caller]
fn both_fail(what: &str, f: impl Fn(&Backend) -> infer_core::Result<Tensor>) {
    let e = f(&under_test()).err().unwrap_or_else(|| panic!("{what}: {UNDER_TEST} accepted it"));
    assert!(f(&candle()).is_err(), "{what}: candle accepted it");
    let msg = e.to_string();
    assert!(!msg.contains('\n') && !msg.contains("Exception raised"), "{what}: one-line error: {msg}");
}

// ---- creation / bytes ------------------------------------------------------------------------

#[test]
fn bytes_roundtrip_every_dense_dtype_and_unaligned_input() {
    let b = under_test();
    for (dtype, elem) in
        [(DType::F32, 4), (DType::F16, 2), (DType::BF16, 2), (DType::U8, 1), (DType::U32, 4), (DType::I64, 8)]
    {
        let payload: Vec<u8> = (0..6 * elem)
            .map(|i| match dtype {
                DType::F16 | DType::BF16 if i % 2 == 1 => 0x3c,
                DType::U32 if i % 4 == 3 => 0xf1, // values above i32::MAX survive the i64 storage
                _ => (i * 7 + 1) as u8,
            })
            .collect();
        let mut buf = vec![0u8; payload.len() + 1];
        buf[1..].copy_from_slice(&payload);
        let x = Tensor::from_bytes(&b, &buf[1..], dtype, &[2, 3]).unwrap();
        assert_eq!((x.dims(), x.dtype()), (&[2usize, 3][..], dtype));
        assert_eq!(x.to_bytes().unwrap(), payload, "{dtype}");
    }
    let x = t(&b, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    assert_eq!(x.transpose(0, 1).unwrap().to_vec_f32().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    assert!(Tensor::from_bytes(&b, &[0u8; 5], DType::F32, &[2]).is_err());
    // Empty tensors.
    let e = Tensor::from_bytes(&b, &[], DType::F32, &[0, 3]).unwrap();
    assert_eq!(e.dims(), &[0, 3]);
    assert!(e.to_bytes().unwrap().is_empty());
}

#[test]
fn full_and_dtype_casts() {
    for dt in [DType::F32, DType::F16, DType::BF16, DType::U8, DType::U32, DType::I64] {
        same(&format!("full {dt}"), 0.0, |b| Tensor::full(b, 2.5, dt, &[2, 2]).unwrap());
    }
    assert!(Tensor::full(&under_test(), 1.0, DType::Q8_0, &[32]).is_err());
    let f = [1.7, -2.2, 3.0, 0.49];
    for to in [DType::F32, DType::F16, DType::BF16, DType::U8, DType::U32, DType::I64] {
        let src = if matches!(to, DType::U8 | DType::U32) { [1.7, 2.2, 3.0, 0.49] } else { f };
        same(&format!("f32 -> {to}"), 0.0, |b| t(b, &src, &[4]).to_dtype(to).unwrap());
        same(&format!("f32 -> {to} -> f32"), 0.0, |b| {
            t(b, &src, &[4]).to_dtype(to).unwrap().to_dtype(DType::F32).unwrap()
        });
    }
    same("f16 -> bf16", 0.0, |b| t(b, &f, &[4]).to_dtype(DType::F16).unwrap().to_dtype(DType::BF16).unwrap());
    same("u8 -> f32", 0.0, |b| tu8(b, &[0, 200, 255], &[3]).to_dtype(DType::F32).unwrap());
    same("u32 -> i64", 0.0, |b| tu(b, &[0, 7, u32::MAX], &[3]).to_dtype(DType::I64).unwrap());
}

// ---- element-wise ----------------------------------------------------------------------------

#[test]
fn unary_ops() {
    let v: Vec<f32> = rand_vec(64, 1).iter().map(|x| x * 3.0).collect();
    let pos: Vec<f32> = v.iter().map(|x| x.abs() + 0.1).collect();
    for op in [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Recip,
        UnaryOp::Abs,
        UnaryOp::Sqr,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Silu,
        UnaryOp::GeluTanh,
        UnaryOp::GeluErf,
    ] {
        let input = if matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Recip) { &pos } else { &v };
        // Measured (the worst op): tch 3.8e-7, MLX 2.0e-7.
        same(&format!("{op:?}"), 1e-5, |b| t(b, input, &[8, 8]).unary(op).unwrap());
        for dt in [DType::F16, DType::BF16] {
            // Measured: tch 2.5e-3, MLX 2.6e-3 (sigmoid in bf16).
            same(&format!("{op:?} {dt}"), 1e-2, |b| t(b, input, &[8, 8]).to_dtype(dt).unwrap().unary(op).unwrap());
        }
        // strided input
        // Measured: tch 1.8e-7, MLX 2.0e-7.
        same(&format!("{op:?} strided"), 1e-5, |b| t(b, input, &[8, 8]).transpose(0, 1).unwrap().unary(op).unwrap());
    }
}

#[test]
fn binary_ops_broadcast_and_promote() {
    let va = rand_vec(6, 2);
    let vb: Vec<f32> = rand_vec(4, 3).iter().map(|x| x + 2.0).collect();
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum] {
        // Measured: 0 (identical) on tch and MLX, here and in the five checks below.
        same(&format!("{op:?}"), 1e-6, |b| t(b, &va, &[2, 1, 3]).binary(op, &t(b, &vb, &[4, 1])).unwrap());
        same(&format!("{op:?} bf16+f32"), 1e-6, |b| {
            t(b, &va, &[2, 1, 3]).to_dtype(DType::BF16).unwrap().binary(op, &t(b, &vb, &[4, 1])).unwrap()
        });
        same(&format!("{op:?} f16+bf16"), 1e-6, |b| {
            let x = t(b, &va, &[6]).to_dtype(DType::F16).unwrap();
            x.binary(op, &t(b, &vb[..1], &[1]).to_dtype(DType::BF16).unwrap()).unwrap()
        });
        same(&format!("{op:?} u32"), 1e-6, |b| tu(b, &[7, 9, 12], &[3]).binary(op, &tu(b, &[2, 4, 3], &[3])).unwrap());
        same(&format!("{op:?} u8+u32"), 1e-6, |b| {
            tu8(b, &[7, 9, 12], &[3]).binary(op, &tu(b, &[2, 4, 3], &[3])).unwrap()
        });
        same(&format!("{op:?} u32+f32"), 1e-6, |b| tu(b, &[7, 9, 12], &[3]).binary(op, &t(b, &[0.5], &[1])).unwrap());
    }
    both_fail("shapes that do not broadcast", |b| t(b, &[0.; 3], &[3]).add(&t(b, &[0.; 2], &[2])));
    let b = under_test();
    let e = t(&b, &[0.; 3], &[3]).add(&t(&b, &[0.; 2], &[2])).unwrap_err().to_string();
    assert!(e.contains("binary") && e.contains("f32[3]") && e.contains("f32[2]"), "{e}");
}

#[test]
fn compare_where_affine_powf_clamp() {
    let av = [1., 2., 3., 4., 5., 6.];
    for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
        same(&format!("{op:?}"), 0.0, |b| t(b, &av, &[2, 3]).compare(op, &t(b, &[2., 5.], &[2, 1])).unwrap());
        same(&format!("{op:?} u32/f32"), 0.0, |b| {
            tu(b, &[1, 2, 3], &[3]).compare(op, &t(b, &[2.0, 2.5, 3.0], &[3])).unwrap()
        });
    }
    same("where", 0.0, |b| tu8(b, &[1, 0, 1], &[1, 3]).where_cond(&t(b, &av, &[2, 3]), &t(b, &[-1.], &[1])).unwrap());
    same("where float cond, bf16/f32 branches", 0.0, |b| {
        let c = t(b, &[0.0, 2.0, -1.0], &[3]);
        c.where_cond(&t(b, &[1., 2., 3.], &[3]).to_dtype(DType::BF16).unwrap(), &t(b, &[9.], &[1])).unwrap()
    });
    same("where u32", 0.0, |b| tu8(b, &[0, 1], &[2]).where_cond(&tu(b, &[5, 6], &[2]), &tu(b, &[7, 8], &[2])).unwrap());
    // Measured: affine and powf 0 on tch and MLX; affine bf16 tch 3.0e-3, MLX 0.
    same("affine", 1e-6, |b| t(b, &av, &[2, 3]).affine(2.0, -1.0).unwrap());
    same("affine bf16", 1e-2, |b| t(b, &av, &[2, 3]).to_dtype(DType::BF16).unwrap().affine(0.3, 0.7).unwrap());
    same("affine u32", 0.0, |b| tu(b, &[1, 2, 3], &[3]).affine(2.0, 1.0).unwrap());
    same("powf", 1e-6, |b| t(b, &av, &[2, 3]).powf(1.5).unwrap());
    same("clamp", 0.0, |b| t(b, &av, &[2, 3]).clamp(2.0, 4.5).unwrap());
    same("clamp one-sided", 0.0, |b| t(b, &av, &[2, 3]).clamp(f64::NEG_INFINITY, 3.0).unwrap());
    same("clamp bf16", 0.0, |b| t(b, &av, &[2, 3]).to_dtype(DType::BF16).unwrap().clamp(2.0, f64::NAN).unwrap());
}

// ---- shapes & indexing -----------------------------------------------------------------------

#[test]
fn shape_ops() {
    let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let x = |b: &Backend| t(b, &v, &[2, 3, 4]);
    same("permute+reshape", 0.0, |b| x(b).permute(&[2, 0, 1]).unwrap().reshape(&[4, 6]).unwrap());
    same("contiguous", 0.0, |b| x(b).permute(&[2, 0, 1]).unwrap().contiguous().unwrap());
    same("narrow", 0.0, |b| x(b).narrow(2, 1, 2).unwrap());
    same("concat", 0.0, |b| Tensor::concat(&[&x(b), &x(b).narrow(1, 0, 1).unwrap()], 1).unwrap());
    same("concat u32", 0.0, |b| Tensor::concat(&[&tu(b, &[1, 2], &[2]), &tu(b, &[3], &[1])], 0).unwrap());
    same("broadcast_to", 0.0, |b| t(b, &[1., 2.], &[2, 1]).broadcast_to(&[3, 2, 2]).unwrap());
    both_fail("bad permutation", |b| x(b).permute(&[0, 0, 1]));
    both_fail("narrow out of range", |b| x(b).narrow(2, 3, 2));
    both_fail("reshape to the wrong size", |b| x(b).reshape(&[5, 5]));
    both_fail("concat of mixed dtypes", |b| Tensor::concat(&[&x(b), &x(b).to_dtype(DType::BF16).unwrap()], 0));
}

#[test]
fn index_select_and_gather() {
    let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let x = |b: &Backend| t(b, &v, &[3, 4]);
    same("index_select 0", 0.0, |b| x(b).index_select(&tu(b, &[2, 0, 2], &[3]), 0).unwrap());
    same("index_select 1", 0.0, |b| x(b).index_select(&tu(b, &[3, 1], &[2]), 1).unwrap());
    // (candle's index_select wants a contiguous x; the backend under test may take strided views)
    let b = under_test();
    let y = x(&b).transpose(0, 1).unwrap().index_select(&tu(&b, &[2, 0], &[2]), 1).unwrap();
    assert_eq!(y.to_vec_f32().unwrap(), vec![8., 0., 9., 1., 10., 2., 11., 3.]);
    same("gather 1", 0.0, |b| x(b).gather(&tu(b, &[1, 3, 0, 0, 2, 1], &[3, 2]), 1).unwrap());
    same("gather 0", 0.0, |b| x(b).gather(&tu(b, &[2, 1, 0, 0], &[1, 4]), 0).unwrap());
    same("gather u32 values", 0.0, |b| tu(b, &[5, 6, 7], &[1, 3]).gather(&tu(b, &[2, 2, 0], &[1, 3]), 1).unwrap());
    both_fail("index out of range", |b| x(b).index_select(&tu(b, &[5], &[1]), 0));
    both_fail("gather out of range", |b| x(b).gather(&tu(b, &[9], &[1, 1]), 1));
}

// ---- reductions ------------------------------------------------------------------------------

#[test]
fn reductions() {
    let v = rand_vec(24, 5);
    for dim in 0..3 {
        for keepdim in [true, false] {
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin]
            {
                // Measured: 0 on tch and MLX, f32 and bf16.
                same(&format!("{op:?} dim {dim} keepdim {keepdim}"), 1e-5, |b| {
                    t(b, &v, &[2, 3, 4]).reduce(op, dim, keepdim).unwrap()
                });
                same(&format!("{op:?} bf16 dim {dim}"), 1e-2, |b| {
                    t(b, &v, &[2, 3, 4]).to_dtype(DType::BF16).unwrap().reduce(op, dim, keepdim).unwrap()
                });
            }
        }
    }
    same("u8 sum is i64", 0.0, |b| tu8(b, &[200, 100, 250], &[3]).reduce(ReduceOp::Sum, 0, false).unwrap());
    same("u32 sum is i64", 0.0, |b| tu(b, &[u32::MAX, 1], &[2]).reduce(ReduceOp::Sum, 0, false).unwrap());
    same("u32 max stays u32", 0.0, |b| tu(b, &[3, 9, 1], &[3]).reduce(ReduceOp::Max, 0, false).unwrap());
    same("bf16 sum of 1000 ones", 0.0, |b| {
        Tensor::full(b, 1.0, DType::BF16, &[1, 1000]).unwrap().reduce(ReduceOp::Sum, 1, false).unwrap()
    });
    same("argmax ties: first index", 0.0, |b| t(b, &[1., 3., 3., 0.], &[4]).argmax(0).unwrap());
    assert_eq!(t(&under_test(), &[1., 3., 3., 0.], &[4]).argmax(0).unwrap().to_vec_u32().unwrap(), vec![1]);
    both_fail("mean of integers", |b| tu(b, &[1, 2], &[2]).reduce(ReduceOp::Mean, 0, false));
    both_fail("dim out of range", |b| t(b, &v, &[2, 3, 4]).reduce(ReduceOp::Sum, 3, false));
}

#[test]
fn softmax_log_softmax_cumsum_argsort() {
    let v: Vec<f32> = rand_vec(12, 7).iter().map(|x| x * 4.0).collect();
    let x = |b: &Backend| t(b, &v, &[3, 4]);
    // Measured: softmax tch 1.2e-8, MLX 1.2e-8; log_softmax 0, 8.4e-8; strided 6.7e-9, 3.3e-8; bf16, -inf and
    // cumsum 0 on both.
    same("softmax", 1e-6, |b| x(b).softmax_last().unwrap());
    same("log_softmax", 1e-6, |b| x(b).log_softmax_last().unwrap());
    same("softmax bf16", 1e-2, |b| x(b).to_dtype(DType::BF16).unwrap().softmax_last().unwrap());
    same("softmax strided", 1e-6, |b| x(b).transpose(0, 1).unwrap().softmax_last().unwrap());
    same("softmax with -inf", 1e-6, |b| t(b, &[0.0, f32::NEG_INFINITY, 1.0], &[1, 3]).softmax_last().unwrap());
    same("cumsum 1", 1e-6, |b| x(b).cumsum(1).unwrap());
    same("cumsum 0", 1e-6, |b| x(b).cumsum(0).unwrap());
    same("cumsum bf16", 1e-2, |b| x(b).to_dtype(DType::BF16).unwrap().cumsum(1).unwrap());
    same("cumsum u8 is i64", 0.0, |b| tu8(b, &[200, 100, 1], &[3]).cumsum(0).unwrap());
    let n = 150_000;
    same("vocab-long cumsum", 0.0, |b| Tensor::full(b, 1.0, DType::F32, &[1, n]).unwrap().cumsum(1).unwrap());
    let s = [0.5, -1.0, 2.0, 0.5, 3.0, 0.0];
    same("argsort asc", 0.0, |b| t(b, &s, &[2, 3]).argsort_last(false).unwrap());
    same("argsort desc", 0.0, |b| t(b, &s, &[2, 3]).argsort_last(true).unwrap());
    let ties = t(&under_test(), &[1.0, 2.0, 1.0, 2.0], &[4]);
    assert_eq!(ties.argsort_last(true).unwrap().to_vec_u32().unwrap(), vec![1, 3, 0, 2]);
    assert_eq!(ties.argsort_last(false).unwrap().to_vec_u32().unwrap(), vec![0, 2, 1, 3]);
    both_fail("softmax of integers", |b| tu(b, &[1, 2], &[2]).softmax_last());
}

// ---- matmul / linear / embedding -------------------------------------------------------------

#[test]
fn matmul_broadcasts_batches_and_vectors() {
    let (m, k, n) = (3, 5, 4);
    let va = rand_vec(2 * m * k, 11);
    let vb = rand_vec(k * n, 12);
    let vb3 = rand_vec(3 * k * n, 13);
    // Measured: tch at most 1.0e-7, MLX 1.3e-8 (matrix @ vector, the others 0); bf16 0 on both.
    same("batched @ matrix", 1e-5, |b| t(b, &va, &[2, m, k]).matmul(&t(b, &vb, &[k, n])).unwrap());
    same("broadcast batches", 1e-5, |b| t(b, &va, &[2, 1, m, k]).matmul(&t(b, &vb3, &[3, k, n])).unwrap());
    same("strided a, broadcast b", 1e-5, |b| {
        let at = t(b, &va, &[2, k, m]).transpose(1, 2).unwrap();
        at.matmul(&t(b, &vb, &[1, k, n]).broadcast_to(&[2, k, n]).unwrap()).unwrap()
    });
    same("vector @ matrix", 1e-5, |b| t(b, &va[..k], &[k]).matmul(&t(b, &vb, &[k, n])).unwrap());
    same("matrix @ vector", 1e-5, |b| t(b, &vb, &[n, k]).matmul(&t(b, &va[..k], &[k])).unwrap());
    same("bf16", 1e-2, |b| {
        let a = t(b, &va, &[2, m, k]).to_dtype(DType::BF16).unwrap();
        a.matmul(&t(b, &vb, &[k, n]).to_dtype(DType::BF16).unwrap()).unwrap()
    });
    both_fail("mixed dtypes", |b| t(b, &va, &[2, m, k]).matmul(&t(b, &vb, &[k, n]).to_dtype(DType::F16).unwrap()));
    both_fail("inner dims differ", |b| t(b, &va, &[2, m, k]).matmul(&t(b, &vb, &[n, k])));
}

#[test]
fn linear_all_ranks_dtypes_and_bias() {
    let (k, n) = (16, 6);
    let vw = rand_vec(n * k, 21);
    let vb = rand_vec(n, 22);
    for shape in [vec![k], vec![3, k], vec![2, 3, k], vec![2, 1, 2, k], vec![1, 1, k]] {
        let m: usize = shape[..shape.len() - 1].iter().product();
        let vx = rand_vec(m * k, 23);
        // Measured, here and the check below: tch 1.6e-7, MLX 1.5e-7 (2.2e-7 with candle's scalar kernels); strided
        // x: tch 0, MLX 7.1e-8.
        same(&format!("linear {shape:?} + bias"), 1e-5, |b| {
            t(b, &vx, &shape).linear(&t(b, &vw, &[n, k]), Some(&t(b, &vb, &[n]))).unwrap()
        });
        same(&format!("linear {shape:?}"), 1e-5, |b| t(b, &vx, &shape).linear(&t(b, &vw, &[n, k]), None).unwrap());
    }
    let vx = rand_vec(3 * k, 24);
    same("strided x", 1e-5, |b| t(b, &vx, &[k, 3]).transpose(0, 1).unwrap().linear(&t(b, &vw, &[n, k]), None).unwrap());
    // decode (1 row) and prefill (many rows) shapes of a non-tiny weight, every float dtype
    let (n2, k2) = (300, 333);
    let vw2 = rand_vec(n2 * k2, 25);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for m in [1, 5, 64] {
            let vx = rand_vec(m * k2, 26 + m as u64);
            // Measured: f32 tch 5.0e-6, MLX 4.9e-6; f16 / bf16 tch 7.4e-3, MLX 0.
            let tol = if dt == DType::F32 { 1e-4 } else { 2e-2 };
            same(&format!("linear {dt} m={m}"), tol, |b| {
                let w = t(b, &vw2, &[n2, k2]).to_dtype(dt).unwrap();
                t(b, &vx, &[m, k2])
                    .to_dtype(dt)
                    .unwrap()
                    .linear(&w, Some(&t(b, &vb[..1], &[1]).broadcast_to(&[n2]).unwrap()))
                    .unwrap()
            });
        }
    }
    both_fail("mixed dtypes", |b| {
        t(b, &vx[..k], &[1, k]).linear(&t(b, &vw, &[n, k]).to_dtype(DType::BF16).unwrap(), None)
    });
    let b = under_test();
    let e = t(&b, &vx[..k], &[1, k]).linear(&t(&b, &vw, &[n, k]).to_dtype(DType::BF16).unwrap(), None);
    let e = e.unwrap_err().to_string();
    assert!(e.contains("linear") && e.contains("bf16[6, 16]") && e.contains("f32[1, 16]"), "{e}");
}

#[test]
fn embedding_and_quantized_weights() {
    let v: Vec<f32> = (0..15).map(|i| i as f32).collect();
    same("embedding", 0.0, |b| tu(b, &[4, 0, 2, 2], &[2, 2]).embedding(&t(b, &v, &[5, 3])).unwrap());
    same("embedding bf16", 0.0, |b| {
        tu(b, &[4, 0], &[2]).embedding(&t(b, &v, &[5, 3]).to_dtype(DType::BF16).unwrap()).unwrap()
    });
    both_fail("id out of range", |b| tu(b, &[5], &[1]).embedding(&t(b, &v, &[5, 3])));
    // GGML block formats are not consumed natively: the loader dequantizes them on the host.
    let b = under_test();
    for q in [DType::Q8_0, DType::Q4K, DType::Q6K] {
        assert!(!b.supports_dtype(q), "{q}");
        let e = Tensor::from_bytes(&b, &vec![0u8; q.storage_bytes(256)], q, &[256]).unwrap_err().to_string();
        assert!(e.contains("dequantized"), "{e}");
    }
    for d in [DType::F32, DType::F16, DType::BF16, DType::U8, DType::U32, DType::I64] {
        assert!(b.supports_dtype(d));
    }
}

// ---- fused -----------------------------------------------------------------------------------

#[test]
fn rms_norm_and_layer_norm() {
    let (rows, d) = (5, 16);
    let v: Vec<f32> = rand_vec(rows * d, 41).iter().map(|x| x * 3.0 + 0.5).collect();
    let w = rand_vec(d, 42);
    let bias = rand_vec(d, 43);
    let x = |b: &Backend| t(b, &v, &[1, rows, d]);
    // Measured: rms_norm 3.2e-8 on tch and MLX, strided 5.1e-8 on both; layer_norm tch 1.1e-7, MLX 0; f16 / bf16
    // 0 on both.
    same("rms_norm", 1e-5, |b| x(b).rms_norm(&t(b, &w, &[d]), 1e-5).unwrap());
    same("layer_norm", 1e-4, |b| x(b).layer_norm(&t(b, &w, &[d]), Some(&t(b, &bias, &[d])), 1e-5).unwrap());
    same("layer_norm no bias", 1e-4, |b| x(b).layer_norm(&t(b, &w, &[d]), None, 1e-5).unwrap());
    for dt in [DType::F16, DType::BF16] {
        same(&format!("rms_norm {dt}"), 1e-2, |b| {
            x(b).to_dtype(dt).unwrap().rms_norm(&t(b, &w, &[d]).to_dtype(dt).unwrap(), 1e-5).unwrap()
        });
        same(&format!("layer_norm {dt}"), 1e-2, |b| {
            x(b).to_dtype(dt).unwrap().layer_norm(&t(b, &w, &[d]).to_dtype(dt).unwrap(), None, 1e-5).unwrap()
        });
    }
    same("rms_norm strided", 1e-5, |b| {
        t(b, &v, &[d, rows]).transpose(0, 1).unwrap().rms_norm(&t(b, &w, &[d]), 1e-6).unwrap()
    });
}

#[test]
fn rope_split_half_and_interleaved() {
    let (bs, h, tt, d) = (2, 3, 4, 8);
    let vx = rand_vec(bs * h * tt * d, 51);
    let rows = tt + 3; // tables longer than the sequence: the first tt rows are used
    let mut cos = vec![0f32; rows * d / 2];
    let mut sin = vec![0f32; rows * d / 2];
    for i in 0..rows {
        for p in 0..d / 2 {
            let theta = (5 + i) as f32 / 10000f32.powf(2.0 * p as f32 / d as f32);
            cos[i * d / 2 + p] = theta.cos();
            sin[i * d / 2 + p] = theta.sin();
        }
    }
    for layout in [RopeLayout::SplitHalf, RopeLayout::Interleaved] {
        let tables = |b: &Backend| (t(b, &cos, &[rows, d / 2]), t(b, &sin, &[rows, d / 2]));
        // Measured: 0 on tch and MLX (strided too); bf16 4.5e-3 on both.
        same(&format!("{layout:?}"), 1e-5, |b| {
            let (c, s) = tables(b);
            t(b, &vx, &[bs, h, tt, d]).rope(&c, &s, layout).unwrap()
        });
        same(&format!("{layout:?} strided"), 1e-5, |b| {
            let (c, s) = tables(b);
            let x = t(b, &vx, &[bs, tt, h, d]).transpose(1, 2).unwrap();
            x.rope(&c, &s, layout).unwrap()
        });
        same(&format!("{layout:?} bf16"), 2e-2, |b| {
            let (c, s) = tables(b);
            t(b, &vx, &[bs, h, tt, d]).to_dtype(DType::BF16).unwrap().rope(&c, &s, layout).unwrap()
        });
    }
    both_fail("odd head dim", |b| {
        t(b, &vx[..bs * h * tt * 7], &[bs, h, tt, 7]).rope(
            &t(b, &cos, &[rows, 4]),
            &t(b, &sin, &[rows, 4]),
            RopeLayout::SplitHalf,
        )
    });
}

#[test]
fn attention_gqa_causal_offset_window_mask_softcap() {
    let (bb, hq, hkv, tq, tk, d, dv) = (2, 6, 2, 3, 7, 8, 5);
    let vq = rand_vec(bb * hq * tq * d, 61);
    let vk = rand_vec(bb * hkv * tk * d, 62);
    let vv = rand_vec(bb * hkv * tk * dv, 63);
    let qkv = |b: &Backend| (t(b, &vq, &[bb, hq, tq, d]), t(b, &vk, &[bb, hkv, tk, d]), t(b, &vv, &[bb, hkv, tk, dv]));
    let scale = 3.0 / (d as f32).sqrt();
    let opts = |causal, window, softcap| AttentionOpts { scale, causal, window, softcap };
    for (causal, window, softcap) in [
        (true, 0, 0.0),
        (false, 0, 0.0),
        (true, 3, 0.0),
        (true, 2, 1.5),
        (false, 0, 2.0),
        (false, 4, 0.0),
        (true, 50, 0.0),
    ] {
        // Measured: tch 8.0e-8, MLX 1.1e-7.
        same(&format!("causal {causal} window {window} softcap {softcap}"), 1e-5, |b| {
            let (q, k, v) = qkv(b);
            Tensor::attention(&q, &k, &v, None, opts(causal, window, softcap)).unwrap()
        });
    }
    // Prefill (tq == tk) and decode (tq == 1) shapes.
    for (q_len, window) in [(tk, 0), (tk, 3), (1, 0), (1, 3)] {
        // Measured: tch 1.0e-7, MLX 1.0e-7.
        same(&format!("tq {q_len} of tk {tk}, window {window}"), 1e-5, |b| {
            let (q, k, v) = qkv(b);
            let q = Tensor::concat(&[&q, &q, &q], 2).unwrap().narrow(2, 0, q_len).unwrap();
            Tensor::attention(&q, &k, &v, None, opts(true, window, 0.0)).unwrap()
        });
    }
    let mask_shapes: [&[usize]; 4] = [&[tq, tk], &[bb, 1, 1, tk], &[1, hq, tq, tk], &[bb, hq, tq, tk]];
    for (mi, ms) in mask_shapes.iter().enumerate() {
        let n: usize = ms.iter().product();
        let mv: Vec<f32> =
            rand_vec(n, 70 + mi as u64).iter().map(|x| if *x > 0.6 { f32::NEG_INFINITY } else { x * 2.0 }).collect();
        for (causal, window, softcap) in [(true, 0, 0.0), (false, 0, 1.0), (true, 2, 0.0)] {
            // Measured: tch 1.4e-7, MLX 8.3e-8.
            same(&format!("mask {ms:?} causal {causal} window {window} softcap {softcap}"), 1e-5, |b| {
                let (q, k, v) = qkv(b);
                Tensor::attention(&q, &k, &v, Some(&t(b, &mv, ms)), opts(causal, window, softcap)).unwrap()
            });
        }
    }
    // K/V read through narrowed views of a larger (cache) buffer.
    // Measured: tch 7.3e-8, MLX 8.8e-8.
    same("kv cache views", 1e-5, |b| {
        let (q, k, v) = qkv(b);
        let kbuf = Tensor::zeros(b, DType::F32, &[bb, hkv, 10, d]).unwrap().slice_assign(&k, 2, 0).unwrap();
        let vbuf = Tensor::zeros(b, DType::F32, &[bb, hkv, 10, dv]).unwrap().slice_assign(&v, 2, 0).unwrap();
        let q1 = q.narrow(2, tq - 1, 1).unwrap();
        Tensor::attention(
            &q1,
            &kbuf.narrow(2, 0, tk).unwrap(),
            &vbuf.narrow(2, 0, tk).unwrap(),
            None,
            opts(true, 0, 0.0),
        )
        .unwrap()
    });
    for dt in [DType::BF16, DType::F16] {
        // Measured: 0 on tch and MLX.
        same(&format!("{dt}"), 3e-2, |b| {
            let (q, k, v) = qkv(b);
            let c = |x: Tensor| x.to_dtype(dt).unwrap();
            Tensor::attention(&c(q), &c(k), &c(v), None, opts(true, 0, 0.0)).unwrap()
        });
    }
    both_fail("hq not a multiple of hkv", |b| {
        let (q, k, v) = qkv(b);
        Tensor::attention(&k, &q, &v, None, opts(true, 0, 0.0))
    });
}

// ---- audio activations -----------------------------------------------------------------------

#[test]
fn snake_per_channel() {
    let (c, l) = (5, 37);
    let vx: Vec<f32> = rand_vec(2 * c * l, 140).iter().map(|v| v * 4.0).collect();
    let alpha: Vec<f32> = rand_vec(c, 141).iter().map(|v| v.exp()).collect();
    let inv_beta: Vec<f32> = rand_vec(c, 142).iter().map(|v| 1.0 / (v.exp() + 1e-9)).collect();
    let snake = |b: &Backend, x: Tensor| x.snake(&t(b, &alpha, &[c]), &t(b, &inv_beta, &[1, c, 1])).unwrap();
    // Measured: tch 7.2e-8, MLX 4.1e-8 (strided 9.2e-8, 4.1e-8); bf16 0 on both.
    same("snake", 1e-5, |b| snake(b, t(b, &vx, &[2, c, l])));
    same("snake bf16", 1e-2, |b| snake(b, t(b, &vx, &[2, c, l]).to_dtype(DType::BF16).unwrap()));
    same("snake strided", 1e-5, |b| snake(b, t(b, &vx, &[2, l, c]).transpose(1, 2).unwrap()));
    both_fail("snake with too few factors", |b| {
        t(b, &vx, &[2, c, l]).snake(&t(b, &alpha[..c - 1], &[c - 1]), &t(b, &inv_beta, &[c]))
    });
    both_fail("snake of a 2-D x", |b| t(b, &vx, &[2 * c, l]).snake(&t(b, &alpha, &[c]), &t(b, &inv_beta, &[c])));
}

// ---- convolutions ----------------------------------------------------------------------------

#[test]
fn conv1d_stride_padding_dilation_groups() {
    let (bs, l) = (2, 11);
    for (cin, cout, k, stride, padding, dilation, groups, bias) in [
        (4, 6, 3, 1, 0, 1, 1, true),
        (4, 6, 3, 2, 1, 1, 1, false),
        (4, 6, 3, 1, 2, 2, 2, true),
        (6, 6, 5, 1, 4, 1, 6, true), // depthwise, causal-style padding
        (6, 6, 3, 3, 0, 2, 6, false),
        (4, 8, 1, 1, 0, 1, 4, true),
    ] {
        let vx = rand_vec(bs * cin * l, 81);
        let vw = rand_vec(cout * cin / groups * k, 82);
        let vb = rand_vec(cout, 83);
        let p = Conv1dParams { stride, padding, dilation, groups };
        for dt in [DType::F32, DType::BF16] {
            // Measured: f32 1.5e-7 on tch and MLX; bf16 tch 5.0e-3, MLX 0.
            let tol = if dt == DType::F32 { 1e-5 } else { 3e-2 };
            same(&format!("conv1d {cin}->{cout} k{k} s{stride} p{padding} d{dilation} g{groups} {dt}"), tol, |b| {
                let x = t(b, &vx, &[bs, cin, l]).to_dtype(dt).unwrap();
                let w = t(b, &vw, &[cout, cin / groups, k]).to_dtype(dt).unwrap();
                let bias = bias.then(|| t(b, &vb, &[cout]));
                x.conv1d(&w, bias.as_ref(), p).unwrap()
            });
        }
    }
    both_fail("kernel longer than the input", |b| {
        let p = Conv1dParams { stride: 1, padding: 0, dilation: 1, groups: 1 };
        t(b, &rand_vec(2 * 3, 1), &[1, 2, 3]).conv1d(&t(b, &rand_vec(2 * 2 * 5, 2), &[2, 2, 5]), None, p)
    });
}

#[test]
fn conv_transpose1d_stride_padding_output_padding_groups() {
    let (bs, l) = (2, 7);
    for (cin, cout, k, stride, padding, output_padding, dilation, groups, bias) in [
        (4, 6, 3, 1, 0, 0, 1, 1, true),
        (4, 6, 4, 2, 1, 0, 1, 1, false),
        (4, 6, 3, 3, 1, 2, 1, 2, true),
        (6, 6, 4, 2, 0, 1, 1, 6, true), // depthwise upsampling
        (4, 4, 3, 1, 2, 0, 2, 1, false),
    ] {
        let vx = rand_vec(bs * cin * l, 91);
        let vw = rand_vec(cin * cout / groups * k, 92);
        let vb = rand_vec(cout, 93);
        let p = Conv1dParams { stride, padding, dilation, groups };
        // Measured: tch 1.5e-7, MLX 1.5e-7.
        same(
            &format!("conv_transpose1d {cin}->{cout} k{k} s{stride} p{padding} op{output_padding} g{groups}"),
            1e-5,
            |b| {
                let w = t(b, &vw, &[cin, cout / groups, k]);
                let bias = bias.then(|| t(b, &vb, &[cout]));
                t(b, &vx, &[bs, cin, l]).conv_transpose1d(&w, bias.as_ref(), p, output_padding).unwrap()
            },
        );
    }
}
