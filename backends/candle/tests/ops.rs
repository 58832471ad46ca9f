//! Every op of the candle backend against values computed independently in plain Rust, through
//! infer-core's public `Tensor` / `Backend` API only (plus candle's quantizer to make GGML
//! blocks).

use infer_backend_candle::CandleBackend;
use infer_core::{AttentionOpts, Backend, BinaryOp, CmpOp, Conv1dParams, DType, ReduceOp, RopeLayout, Tensor, UnaryOp};

fn be() -> Backend {
    CandleBackend::backend().expect("cpu backend")
}

/// Deterministic uniform values in [-1, 1).
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

fn u8s(x: &Tensor) -> Vec<u8> {
    assert_eq!(x.dtype(), DType::U8);
    x.to_bytes().unwrap()
}

fn i64s(x: &Tensor) -> Vec<i64> {
    assert_eq!(x.dtype(), DType::I64);
    x.to_bytes().unwrap().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

#[track_caller]
fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
        assert!(ok, "element {i}: got {g}, want {w} (tol {tol})\n got {got:?}\nwant {want:?}");
    }
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Index of a broadcast operand for output multi-index `idx`.
fn bidx(idx: &[usize], shape: &[usize]) -> usize {
    let off = idx.len() - shape.len();
    let st = strides(shape);
    shape.iter().enumerate().map(|(i, &n)| if n == 1 { 0 } else { idx[off + i] * st[i] }).sum()
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for i in (0..shape.len()).rev() {
        idx[i] = flat % shape[i];
        flat /= shape[i];
    }
    idx
}

fn erf(x: f64) -> f64 {
    // Abramowitz & Stegun 7.1.26 is too coarse for a 1e-5 check; use the series / continued
    // fraction split.
    if x.abs() < 2.5 {
        let mut sum = x;
        let mut term = x;
        let x2 = x * x;
        for n in 1..200 {
            term *= -x2 / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        let s = x.signum();
        let x = x.abs();
        // erfc continued fraction (Lentz)
        let mut f = x;
        let mut c = x;
        let mut d = 0.0;
        for n in 1..200 {
            let an = n as f64 / 2.0;
            d = x + an * d;
            d = 1.0 / d;
            c = x + an / c;
            let delta = c * d;
            f *= delta;
        }
        let erfc = (-x * x).exp() / f / std::f64::consts::PI.sqrt();
        s * (1.0 - erfc)
    }
}

// ---- creation / bytes ------------------------------------------------------------------------

#[test]
fn bytes_roundtrip_every_dense_dtype_and_unaligned_input() {
    let b = be();
    for (dtype, elem) in
        [(DType::F32, 4), (DType::F16, 2), (DType::BF16, 2), (DType::U8, 1), (DType::U32, 4), (DType::I64, 8)]
    {
        let n = 6;
        let payload: Vec<u8> = (0..n * elem)
            .map(|i| match dtype {
                // keep float bit patterns finite
                DType::F16 | DType::BF16 if i % 2 == 1 => 0x3c,
                _ => (i * 7 + 1) as u8,
            })
            .collect();
        // Offset by one byte so the slice is unaligned.
        let mut buf = vec![0u8; payload.len() + 1];
        buf[1..].copy_from_slice(&payload);
        let x = Tensor::from_bytes(&b, &buf[1..], dtype, &[2, 3]).unwrap();
        assert_eq!(x.dims(), &[2, 3]);
        assert_eq!(x.dtype(), dtype);
        assert_eq!(x.to_bytes().unwrap(), payload, "{dtype}");
    }
    // Strided tensors come back row-major.
    let x = t(&b, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    assert_eq!(x.transpose(0, 1).unwrap().to_vec_f32().unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    // Wrong byte count is an error.
    assert!(Tensor::from_bytes(&b, &[0u8; 5], DType::F32, &[2]).is_err());
}

/// The loader's one-pass conversion gives exactly what a copy then `to_dtype` gives, for every
/// pair of float types, from unaligned bytes.
#[test]
fn from_bytes_as_equals_copy_then_convert() {
    let b = be();
    let floats = [DType::F32, DType::F16, DType::BF16];
    // Values that round differently in each type, plus exact ones and a subnormal f16.
    let mut values = rand_vec(61, 5);
    values.extend([0.0, -1.0, 65504.0, 1e-6, 1.234_567_8]);
    let shape = [values.len()];
    for from in floats {
        let stored = t(&b, &values, &shape).to_dtype(from).unwrap().to_bytes().unwrap();
        let mut buf = vec![0u8; stored.len() + 1];
        buf[1..].copy_from_slice(&stored);
        for to in floats {
            let want = Tensor::from_bytes(&b, &stored, from, &shape).unwrap().to_dtype(to).unwrap();
            let got = Tensor::from_bytes_as(&b, &buf[1..], from, to, &shape).unwrap();
            assert_eq!(got.dtype(), to);
            assert_eq!(got.to_bytes().unwrap(), want.to_bytes().unwrap(), "{from} -> {to}");
        }
    }
    // Large tensors are filled in parallel pieces: every element lands in its place.
    let n = 3 << 18 | 5;
    let big = rand_vec(n, 9);
    let stored = t(&b, &big, &[n]).to_dtype(DType::BF16).unwrap().to_bytes().unwrap();
    let want = Tensor::from_bytes(&b, &stored, DType::BF16, &[n]).unwrap().to_dtype(DType::F32).unwrap();
    let got = Tensor::from_bytes_as(&b, &stored, DType::BF16, DType::F32, &[n]).unwrap();
    assert_eq!(got.to_vec_f32().unwrap(), want.to_vec_f32().unwrap());
    let f32_bytes: Vec<u8> = big.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(Tensor::from_bytes(&b, &f32_bytes, DType::F32, &[n]).unwrap().to_vec_f32().unwrap(), big);
    assert!(Tensor::from_bytes_as(&b, &[0u8; 6], DType::BF16, DType::F32, &[2]).is_err());
    assert!(Tensor::from_bytes_as(&b, &[0u8; 8], DType::U32, DType::F32, &[2]).is_err());
}

#[test]
fn full_and_dtype_casts() {
    let b = be();
    let x = Tensor::full(&b, 2.5, DType::BF16, &[2, 2]).unwrap();
    assert_eq!(x.dtype(), DType::BF16);
    assert_eq!(x.to_vec_f32().unwrap(), vec![2.5; 4]);
    let i = Tensor::full(&b, 7.0, DType::I64, &[3]).unwrap();
    assert_eq!(i64s(&i), vec![7, 7, 7]);
    assert!(Tensor::full(&b, 1.0, DType::Q8_0, &[32]).is_err());

    let f = t(&b, &[1.7, -2.2, 3.0, 0.49], &[4]);
    assert_eq!(f.to_dtype(DType::I64).unwrap().dtype(), DType::I64);
    assert_eq!(i64s(&f.to_dtype(DType::I64).unwrap()), vec![1, -2, 3, 0]); // truncation, like torch
    assert_eq!(f.to_dtype(DType::U32).unwrap().to_vec_u32().unwrap()[2], 3);
    let h = f.to_dtype(DType::F16).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_close(&h.to_vec_f32().unwrap(), &[1.7, -2.2, 3.0, 0.49], 1e-3);
    let bf = h.to_dtype(DType::BF16).unwrap();
    assert_close(&bf.to_vec_f32().unwrap(), &[1.7, -2.2, 3.0, 0.49], 1e-2);
    let u = tu8(&b, &[0, 200, 255], &[3]);
    assert_eq!(u.to_vec_f32().unwrap(), vec![0., 200., 255.]);
}

// ---- element-wise --------------------------------------------------------------------------

#[test]
fn unary_ops_match_formulas() {
    let b = be();
    let v: Vec<f32> = rand_vec(64, 1).iter().map(|x| x * 3.0).collect();
    let x = t(&b, &v, &[8, 8]);
    let pos: Vec<f32> = v.iter().map(|x| x.abs() + 0.1).collect();
    let xp = t(&b, &pos, &[8, 8]);
    let gelu_tanh = |x: f32| {
        let x = x as f64;
        (0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())) as f32
    };
    let gelu_erf = |x: f32| (0.5 * x as f64 * (1.0 + erf(x as f64 / std::f64::consts::SQRT_2))) as f32;
    type Case<'a> = (UnaryOp, &'a Tensor, &'a [f32], Box<dyn Fn(f32) -> f32>);
    let cases: Vec<Case> = vec![
        (UnaryOp::Neg, &x, &v, Box::new(|x| -x)),
        (UnaryOp::Exp, &x, &v, Box::new(f32::exp)),
        (UnaryOp::Log, &xp, &pos, Box::new(f32::ln)),
        (UnaryOp::Sqrt, &xp, &pos, Box::new(f32::sqrt)),
        (UnaryOp::Recip, &xp, &pos, Box::new(|x| 1.0 / x)),
        (UnaryOp::Abs, &x, &v, Box::new(f32::abs)),
        (UnaryOp::Sqr, &x, &v, Box::new(|x| x * x)),
        (UnaryOp::Sin, &x, &v, Box::new(f32::sin)),
        (UnaryOp::Cos, &x, &v, Box::new(f32::cos)),
        (UnaryOp::Tanh, &x, &v, Box::new(f32::tanh)),
        (UnaryOp::Sigmoid, &x, &v, Box::new(|x| 1.0 / (1.0 + (-x).exp()))),
        (UnaryOp::Relu, &x, &v, Box::new(|x| x.max(0.0))),
        (UnaryOp::Silu, &x, &v, Box::new(|x| x / (1.0 + (-x).exp()))),
        (UnaryOp::GeluTanh, &x, &v, Box::new(gelu_tanh)),
        (UnaryOp::GeluErf, &x, &v, Box::new(gelu_erf)),
    ];
    for (op, input, vals, f) in cases {
        let got = input.unary(op).unwrap().to_vec_f32().unwrap();
        let want: Vec<f32> = vals.iter().map(|&x| f(x)).collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{op:?} at {i}: got {g}, want {w}");
        }
    }
    // Unary on bf16 stays bf16.
    let y = x.to_dtype(DType::BF16).unwrap().silu().unwrap();
    assert_eq!(y.dtype(), DType::BF16);
}

#[test]
fn binary_ops_broadcast_like_pytorch() {
    let b = be();
    let (sa, sb) = ([2usize, 1, 3], [4usize, 1]);
    let va = rand_vec(6, 2);
    let vb: Vec<f32> = rand_vec(4, 3).iter().map(|x| x + 2.0).collect();
    let (a, bt) = (t(&b, &va, &sa), t(&b, &vb, &sb));
    let out_shape = [2usize, 4, 3];
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum] {
        let y = a.binary(op, &bt).unwrap();
        assert_eq!(y.dims(), &out_shape);
        let got = y.to_vec_f32().unwrap();
        for (flat, g) in got.iter().enumerate() {
            let idx = unravel(flat, &out_shape);
            let (x, z) = (va[bidx(&idx, &sa)], vb[bidx(&idx, &sb)]);
            let w = match op {
                BinaryOp::Add => x + z,
                BinaryOp::Sub => x - z,
                BinaryOp::Mul => x * z,
                BinaryOp::Div => x / z,
                BinaryOp::Maximum => x.max(z),
                BinaryOp::Minimum => x.min(z),
            };
            assert!((g - w).abs() < 1e-6, "{op:?} {idx:?}: {g} vs {w}");
        }
    }
    // f32 with bf16 promotes to f32; integer division is true division.
    let bf = t(&b, &[1.0, 2.0], &[2]).to_dtype(DType::BF16).unwrap();
    let s = t(&b, &[0.25, 0.5], &[2]).add(&bf).unwrap();
    assert_eq!(s.dtype(), DType::F32);
    assert_eq!(s.to_vec_f32().unwrap(), vec![1.25, 2.5]);
    let q = tu(&b, &[7, 9], &[2]).div(&tu(&b, &[2, 4], &[2])).unwrap();
    assert_eq!(q.dtype(), DType::F32);
    assert_eq!(q.to_vec_f32().unwrap(), vec![3.5, 2.25]);
    // Shapes that do not broadcast are an error naming the op and shapes.
    let e = t(&b, &[0.; 3], &[3]).add(&t(&b, &[0.; 2], &[2])).unwrap_err().to_string();
    assert!(e.contains("binary") && e.contains("[3]") && e.contains("[2]"), "{e}");
    assert!(!e.contains('\n'), "one line, no candle backtrace: {e}");
}

#[test]
fn compare_where_affine_powf_clamp() {
    let b = be();
    let a = t(&b, &[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let c = t(&b, &[2., 5.], &[2, 1]);
    let want = |f: fn(f32, f32) -> bool| -> Vec<u8> {
        let av = [1., 2., 3., 4., 5., 6.];
        (0..6).map(|i| f(av[i], [2., 5.][i / 3]) as u8).collect()
    };
    assert_eq!(u8s(&a.compare(CmpOp::Eq, &c).unwrap()), want(|x, y| x == y));
    assert_eq!(u8s(&a.compare(CmpOp::Ne, &c).unwrap()), want(|x, y| x != y));
    assert_eq!(u8s(&a.compare(CmpOp::Lt, &c).unwrap()), want(|x, y| x < y));
    assert_eq!(u8s(&a.compare(CmpOp::Le, &c).unwrap()), want(|x, y| x <= y));
    assert_eq!(u8s(&a.compare(CmpOp::Gt, &c).unwrap()), want(|x, y| x > y));
    assert_eq!(u8s(&a.compare(CmpOp::Ge, &c).unwrap()), want(|x, y| x >= y));

    // where with a broadcast condition (1, 3) and a scalar-like on_false (1,).
    let cond = tu8(&b, &[1, 0, 1], &[1, 3]);
    let y = cond.where_cond(&a, &t(&b, &[-1.], &[1])).unwrap();
    assert_eq!(y.dims(), &[2, 3]);
    assert_eq!(y.to_vec_f32().unwrap(), vec![1., -1., 3., 4., -1., 6.]);

    assert_eq!(a.affine(2.0, -1.0).unwrap().to_vec_f32().unwrap(), vec![1., 3., 5., 7., 9., 11.]);
    assert_close(
        &a.powf(1.5).unwrap().to_vec_f32().unwrap(),
        &[1f32, 2., 3., 4., 5., 6.].map(|x: f32| x.powf(1.5)),
        1e-6,
    );
    assert_eq!(a.clamp(2.0, 4.5).unwrap().to_vec_f32().unwrap(), vec![2., 2., 3., 4., 4.5, 4.5]);
    assert_eq!(a.clamp(f64::NEG_INFINITY, 3.0).unwrap().to_vec_f32().unwrap(), vec![1., 2., 3., 3., 3., 3.]);
}

// ---- shapes & indexing ---------------------------------------------------------------------

#[test]
fn shape_ops() {
    let b = be();
    let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let x = t(&b, &v, &[2, 3, 4]);
    // permute then reshape (strided input)
    let p = x.permute(&[2, 0, 1]).unwrap();
    assert_eq!(p.dims(), &[4, 2, 3]);
    let pv = p.reshape(&[4, 6]).unwrap().to_vec_f32().unwrap();
    let want: Vec<f32> = (0..24)
        .map(|f| {
            let (k, i, j) = (f / 6, (f % 6) / 3, f % 3);
            v[i * 12 + j * 4 + k]
        })
        .collect();
    assert_eq!(pv, want);
    assert_eq!(p.contiguous().unwrap().to_vec_f32().unwrap(), want);
    // narrow
    let n = x.narrow(2, 1, 2).unwrap();
    assert_eq!(n.dims(), &[2, 3, 2]);
    let nv = n.to_vec_f32().unwrap();
    assert_eq!(nv[..4], [1., 2., 5., 6.]);
    // concat along the middle
    let c = Tensor::concat(&[&x, &x.narrow(1, 0, 1).unwrap()], 1).unwrap();
    assert_eq!(c.dims(), &[2, 4, 4]);
    let cv = c.to_vec_f32().unwrap();
    assert_eq!(cv[12..16], [0., 1., 2., 3.]);
    assert_eq!(cv[16..20], [12., 13., 14., 15.]);
    // broadcast_to
    let bt = t(&b, &[1., 2.], &[2, 1]).broadcast_to(&[3, 2, 2]).unwrap();
    assert_eq!(bt.to_vec_f32().unwrap(), vec![1., 1., 2., 2., 1., 1., 2., 2., 1., 1., 2., 2.]);
    // bad permutation is an error
    assert!(x.permute(&[0, 0, 1]).is_err());
}

/// Large views whose last dim is strided take the tiled copy: every permutation of a rank-3 and
/// some of a rank-4 tensor (odd sizes: partial tiles), f32 and bf16, and a narrowed view with an
/// offset, all against the values read by index.
#[test]
fn strided_views_copy_in_tiles() {
    let b = be();
    let dims = [5usize, 131, 37];
    let v: Vec<f32> = (0..dims.iter().product::<usize>()).map(|i| i as f32).collect();
    let x = t(&b, &v, &dims);
    let at = |i: [usize; 3]| v[(i[0] * dims[1] + i[1]) * dims[2] + i[2]];
    for perm in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
        let p = x.permute(&perm).unwrap();
        let pd = [dims[perm[0]], dims[perm[1]], dims[perm[2]]];
        let mut want = Vec::with_capacity(v.len());
        for i in 0..pd[0] {
            for j in 0..pd[1] {
                for k in 0..pd[2] {
                    let mut idx = [0; 3];
                    (idx[perm[0]], idx[perm[1]], idx[perm[2]]) = (i, j, k);
                    want.push(at(idx));
                }
            }
        }
        assert_eq!(p.contiguous().unwrap().to_vec_f32().unwrap(), want, "f32 {perm:?}");
        let half = x.to_dtype(DType::BF16).unwrap().permute(&perm).unwrap().contiguous().unwrap();
        let half = half.to_vec_f32().unwrap();
        let want_half: Vec<f32> = want.iter().map(|&w| half::bf16::from_f32(w).to_f32()).collect();
        assert_eq!(half, want_half, "bf16 {perm:?}");
    }
    // The codec's interleave: (1, phases, c, t) -> (1, c, t, phases), from a narrowed view.
    let (ph, c, tt) = (3usize, 7usize, 400usize);
    let w: Vec<f32> = (0..2 * ph * c * tt).map(|i| i as f32).collect();
    let y = t(&b, &w, &[2, ph, c, tt]).narrow(0, 1, 1).unwrap().permute(&[0, 2, 3, 1]).unwrap();
    let got = y.contiguous().unwrap().to_vec_f32().unwrap();
    for (f, &g) in got.iter().enumerate() {
        let (ci, q, phi) = (f / (tt * ph), f / ph % tt, f % ph);
        assert_eq!(g, w[((ph + phi) * c + ci) * tt + q], "interleave value {f}");
    }
}

#[test]
fn index_select_and_gather() {
    let b = be();
    let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let x = t(&b, &v, &[3, 4]);
    let ids = tu(&b, &[2, 0, 2], &[3]);
    assert_eq!(
        x.index_select(&ids, 0).unwrap().to_vec_f32().unwrap(),
        vec![8., 9., 10., 11., 0., 1., 2., 3., 8., 9., 10., 11.]
    );
    let ids1 = tu(&b, &[3, 1], &[2]);
    assert_eq!(x.index_select(&ids1, 1).unwrap().to_vec_f32().unwrap(), vec![3., 1., 7., 5., 11., 9.]);
    // gather along dim 1 with ids (3, 2): out[i][j] = x[i][ids[i][j]]
    let g = tu(&b, &[1, 3, 0, 0, 2, 1], &[3, 2]);
    assert_eq!(x.gather(&g, 1).unwrap().to_vec_f32().unwrap(), vec![1., 3., 4., 4., 10., 9.]);
    // gather along dim 0
    let g0 = tu(&b, &[2, 1, 0, 0], &[1, 4]);
    assert_eq!(x.gather(&g0, 0).unwrap().to_vec_f32().unwrap(), vec![8., 5., 2., 3.]);
    // out of range is an error, not a crash
    assert!(x.index_select(&tu(&b, &[5], &[1]), 0).is_err());
}

#[test]
fn reductions() {
    let b = be();
    let v = rand_vec(24, 5);
    let x = t(&b, &v, &[2, 3, 4]);
    for dim in 0..3 {
        let shape = [2usize, 3, 4];
        let mut out_shape = shape.to_vec();
        out_shape[dim] = 1;
        let outs: usize = out_shape.iter().product();
        let along = |o: usize| -> Vec<f32> {
            let mut idx = unravel(o, &out_shape);
            (0..shape[dim])
                .map(|k| {
                    idx[dim] = k;
                    v[idx[0] * 12 + idx[1] * 4 + idx[2]]
                })
                .collect()
        };
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            let y = x.reduce(op, dim, true).unwrap();
            assert_eq!(y.dims(), out_shape.as_slice());
            let want: Vec<f32> = (0..outs)
                .map(|o| {
                    let a = along(o);
                    match op {
                        ReduceOp::Sum => a.iter().sum(),
                        ReduceOp::Mean => a.iter().sum::<f32>() / a.len() as f32,
                        ReduceOp::Max => a.iter().cloned().fold(f32::MIN, f32::max),
                        _ => a.iter().cloned().fold(f32::MAX, f32::min),
                    }
                })
                .collect();
            assert_close(&y.to_vec_f32().unwrap(), &want, 1e-5);
            let squeezed = x.reduce(op, dim, false).unwrap();
            assert_eq!(squeezed.rank(), 2);
        }
        for op in [ReduceOp::ArgMax, ReduceOp::ArgMin] {
            let y = x.reduce(op, dim, false).unwrap();
            assert_eq!(y.dtype(), DType::U32);
            let want: Vec<u32> = (0..outs)
                .map(|o| {
                    let a = along(o);
                    let mut best = 0;
                    for (k, &val) in a.iter().enumerate() {
                        if (op == ReduceOp::ArgMax && val > a[best]) || (op == ReduceOp::ArgMin && val < a[best]) {
                            best = k;
                        }
                    }
                    best as u32
                })
                .collect();
            assert_eq!(y.to_vec_u32().unwrap(), want, "{op:?} dim {dim}");
        }
    }
    // Integer sums are i64 (PyTorch), bf16 sums accumulate in f32.
    let s = tu8(&b, &[200, 100, 250], &[3]).reduce(ReduceOp::Sum, 0, false).unwrap();
    assert_eq!(i64s(&s), vec![550]);
    let ones = Tensor::full(&b, 1.0, DType::BF16, &[1, 1000]).unwrap();
    let s = ones.reduce(ReduceOp::Sum, 1, false).unwrap();
    assert_eq!(s.dtype(), DType::BF16);
    assert_eq!(s.to_vec_f32().unwrap(), vec![1000.0]);
    // argmax ties: first index
    assert_eq!(t(&b, &[1., 3., 3., 0.], &[4]).argmax(0).unwrap().to_vec_u32().unwrap(), vec![1]);
}

#[test]
fn softmax_log_softmax_cumsum_argsort() {
    let b = be();
    let v: Vec<f32> = rand_vec(12, 7).iter().map(|x| x * 4.0).collect();
    let x = t(&b, &v, &[3, 4]);
    let mut sm = vec![0f32; 12];
    let mut lsm = vec![0f32; 12];
    for r in 0..3 {
        let row = &v[r * 4..r * 4 + 4];
        let m = row.iter().cloned().fold(f32::MIN, f32::max);
        let z: f32 = row.iter().map(|x| (x - m).exp()).sum();
        for c in 0..4 {
            sm[r * 4 + c] = (row[c] - m).exp() / z;
            lsm[r * 4 + c] = row[c] - m - z.ln();
        }
    }
    assert_close(&x.softmax_last().unwrap().to_vec_f32().unwrap(), &sm, 1e-6);
    assert_close(&x.log_softmax_last().unwrap().to_vec_f32().unwrap(), &lsm, 1e-6);
    // bf16 softmax: computed in f32, returned as bf16
    let y = x.to_dtype(DType::BF16).unwrap().softmax_last().unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    assert_close(&y.to_vec_f32().unwrap(), &sm, 1e-2);
    // softmax of a transposed (strided) view
    let xt = x.transpose(0, 1).unwrap();
    let st = xt.softmax_last().unwrap().to_vec_f32().unwrap();
    let mut want = vec![0f32; 12];
    for c in 0..4 {
        let col: Vec<f32> = (0..3).map(|r| v[r * 4 + c]).collect();
        let m = col.iter().cloned().fold(f32::MIN, f32::max);
        let z: f32 = col.iter().map(|x| (x - m).exp()).sum();
        for r in 0..3 {
            want[c * 3 + r] = (col[r] - m).exp() / z;
        }
    }
    assert_close(&st, &want, 1e-6);

    // cumsum along both dims
    let c1 = x.cumsum(1).unwrap().to_vec_f32().unwrap();
    let c0 = x.cumsum(0).unwrap().to_vec_f32().unwrap();
    let mut w1 = v.clone();
    let mut w0 = v.clone();
    for r in 0..3 {
        for c in 1..4 {
            w1[r * 4 + c] += w1[r * 4 + c - 1];
        }
    }
    for r in 1..3 {
        for c in 0..4 {
            w0[r * 4 + c] += w0[(r - 1) * 4 + c];
        }
    }
    assert_close(&c1, &w1, 1e-6);
    assert_close(&c0, &w0, 1e-6);
    // long cumsum (vocab-sized) stays linear and exact on integers
    let n = 150_000;
    let big = Tensor::full(&b, 1.0, DType::F32, &[1, n]).unwrap().cumsum(1).unwrap().to_vec_f32().unwrap();
    assert_eq!(big[n - 1], n as f32);
    assert_eq!(i64s(&tu8(&b, &[200, 100, 1], &[3]).cumsum(0).unwrap()), vec![200, 300, 301]);

    // argsort, both directions, stable on ties
    let s = t(&b, &[0.5, -1.0, 2.0, 0.5, 3.0, 0.0], &[2, 3]);
    assert_eq!(s.argsort_last(false).unwrap().to_vec_u32().unwrap(), vec![1, 0, 2, 2, 0, 1]);
    assert_eq!(s.argsort_last(true).unwrap().to_vec_u32().unwrap(), vec![2, 0, 1, 1, 0, 2]);
    let ties = t(&b, &[1.0, 2.0, 1.0, 2.0], &[4]);
    assert_eq!(ties.argsort_last(true).unwrap().to_vec_u32().unwrap(), vec![1, 3, 0, 2]);
}

// ---- matmul / linear / embedding -----------------------------------------------------------

fn naive_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
        }
    }
    out
}

#[test]
fn matmul_broadcasts_batches_and_vectors() {
    let b = be();
    let (m, k, n) = (3, 5, 4);
    let va = rand_vec(2 * m * k, 11);
    let vb = rand_vec(k * n, 12);
    let a = t(&b, &va, &[2, m, k]);
    let w = t(&b, &vb, &[k, n]);
    let y = a.matmul(&w).unwrap();
    assert_eq!(y.dims(), &[2, m, n]);
    let mut want = naive_matmul(&va[..m * k], &vb, m, k, n);
    want.extend(naive_matmul(&va[m * k..], &vb, m, k, n));
    assert_close(&y.to_vec_f32().unwrap(), &want, 1e-5);
    // (2,1,m,k) @ (3,k,n) -> (2,3,m,n)
    let vb3 = rand_vec(3 * k * n, 13);
    let y = a.reshape(&[2, 1, m, k]).unwrap().matmul(&t(&b, &vb3, &[3, k, n])).unwrap();
    assert_eq!(y.dims(), &[2, 3, m, n]);
    let yv = y.to_vec_f32().unwrap();
    for i in 0..2 {
        for j in 0..3 {
            let want = naive_matmul(&va[i * m * k..(i + 1) * m * k], &vb3[j * k * n..(j + 1) * k * n], m, k, n);
            assert_close(&yv[(i * 3 + j) * m * n..(i * 3 + j + 1) * m * n], &want, 1e-5);
        }
    }
    // transposed lhs against a broadcast (stride-0) rhs
    let at = t(&b, &va, &[2, k, m]).transpose(1, 2).unwrap();
    let wb = w.reshape(&[1, k, n]).unwrap().broadcast_to(&[2, k, n]).unwrap();
    let mut want = Vec::new();
    for i in 0..2 {
        let ai: Vec<f32> = (0..m * k).map(|f| va[i * m * k + (f % k) * m + f / k]).collect();
        want.extend(naive_matmul(&ai, &vb, m, k, n));
    }
    assert_close(&at.matmul(&wb).unwrap().to_vec_f32().unwrap(), &want, 1e-5);
    // vector @ matrix
    let v = t(&b, &va[..k], &[k]);
    let y = v.matmul(&w).unwrap();
    assert_eq!(y.dims(), &[n]);
    assert_close(&y.to_vec_f32().unwrap(), &naive_matmul(&va[..k], &vb, 1, k, n), 1e-5);
}

fn naive_linear(x: &[f32], w: &[f32], bias: Option<&[f32]>, m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|l| x[i * k + l] * w[j * k + l]).sum::<f32>() + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

#[test]
fn linear_dense_with_bias_all_ranks() {
    let b = be();
    let (k, n) = (16, 6);
    let vw = rand_vec(n * k, 21);
    let vb = rand_vec(n, 22);
    let w = t(&b, &vw, &[n, k]);
    let bias = t(&b, &vb, &[n]);
    for shape in [vec![k], vec![3, k], vec![2, 3, k], vec![2, 1, 2, k], vec![1, 1, k]] {
        let m: usize = shape[..shape.len() - 1].iter().product();
        let vx = rand_vec(m * k, 23);
        let x = t(&b, &vx, &shape);
        let y = x.linear(&w, Some(&bias)).unwrap();
        let mut out = shape.clone();
        *out.last_mut().unwrap() = n;
        assert_eq!(y.dims(), out.as_slice());
        assert_close(&y.to_vec_f32().unwrap(), &naive_linear(&vx, &vw, Some(&vb), m, k, n), 1e-5);
        assert_close(&x.linear(&w, None).unwrap().to_vec_f32().unwrap(), &naive_linear(&vx, &vw, None, m, k, n), 1e-5);
    }
    // strided input
    let vx = rand_vec(k * 3, 24);
    let xt = t(&b, &vx, &[k, 3]).transpose(0, 1).unwrap();
    let mut xr = vec![0f32; 3 * k];
    for i in 0..3 {
        for l in 0..k {
            xr[i * k + l] = vx[l * 3 + i];
        }
    }
    assert_close(&xt.linear(&w, None).unwrap().to_vec_f32().unwrap(), &naive_linear(&xr, &vw, None, 3, k, n), 1e-5);
    // f16 and bf16 weights with matching activations
    for dt in [DType::F16, DType::BF16] {
        let y = t(&b, &vx[..k], &[1, k]).to_dtype(dt).unwrap().linear(&w.to_dtype(dt).unwrap(), None).unwrap();
        assert_eq!(y.dtype(), dt);
        assert_close(&y.to_vec_f32().unwrap(), &naive_linear(&vx[..k], &vw, None, 1, k, n), 3e-2);
    }
    // mismatched dtypes: a clear error naming the op and the shapes
    let e = t(&b, &vx[..k], &[1, k]).linear(&w.to_dtype(DType::BF16).unwrap(), None).unwrap_err().to_string();
    assert!(e.contains("linear") && e.contains("bf16[6, 16]") && e.contains("f32[1, 16]"), "{e}");
}

#[test]
fn linear_decode_kernel_and_gemm_agree_with_naive() {
    // Shapes big enough for the threaded decode kernel, k not a multiple of its 16-wide blocks;
    // 1..=4 rows take the decode kernel, 5 and 39 rows gemm (f32) or the panel path (f16, bf16).
    let b = be();
    let (n, k) = (300, 333);
    let vw = rand_vec(n * k, 25);
    let w32 = t(&b, &vw, &[n, k]);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let w = w32.to_dtype(dt).unwrap();
        let wr = w.to_vec_f32().unwrap(); // the weight as rounded to dt
        for m in [1, 2, 4, 5, 39] {
            let vx = rand_vec(m * k, 26 + m as u64);
            let x = t(&b, &vx, &[m, k]).to_dtype(dt).unwrap();
            let xr = x.to_vec_f32().unwrap();
            let y = x.linear(&w, None).unwrap();
            assert_eq!((y.dims(), y.dtype()), (&[m, n][..], dt));
            let tol = if dt == DType::F32 { 1e-5 } else { 1e-2 };
            assert_close(&y.to_vec_f32().unwrap(), &naive_linear(&xr, &wr, None, m, k, n), tol);
        }
    }
}

#[test]
fn embedding_dense() {
    let b = be();
    let v: Vec<f32> = (0..15).map(|i| i as f32).collect();
    let table = t(&b, &v, &[5, 3]);
    let ids = tu(&b, &[4, 0, 2, 2], &[2, 2]);
    let y = ids.embedding(&table).unwrap();
    assert_eq!(y.dims(), &[2, 2, 3]);
    assert_eq!(y.to_vec_f32().unwrap(), vec![12., 13., 14., 0., 1., 2., 6., 7., 8., 6., 7., 8.]);
    assert!(tu(&b, &[5], &[1]).embedding(&table).is_err());
}

// ---- quantized -----------------------------------------------------------------------------

fn quantize(v: &[f32], shape: &[usize], g: candle_core::quantized::GgmlDType) -> Vec<u8> {
    let x = candle_core::Tensor::from_vec(v.to_vec(), shape, &candle_core::Device::Cpu).unwrap();
    let q = candle_core::quantized::QTensor::quantize(&x, g).unwrap();
    q.data().unwrap().into_owned()
}

#[test]
fn quantized_linear_embedding_and_dequantize() {
    use candle_core::quantized::GgmlDType;
    let b = be();
    let (n, k) = (8, 512);
    let vw = rand_vec(n * k, 31);
    let vx = rand_vec(3 * k, 32);
    let want_f32 = naive_linear(&vx, &vw, None, 3, k, n);
    let scale = want_f32.iter().fold(0f32, |m, v| m.max(v.abs()));
    // Tolerances, as max |error| / max |y|:
    //  - against a dense linear with the *dequantized* weight (checks the kernel; candle also
    //    quantizes the activations, to Q8_0 / Q8K): 1%;
    //  - against the original f32 weight (checks the quantization round trip): Q8_0 2%, Q4K 10%.
    for (dt, g, tol_orig) in [(DType::Q8_0, GgmlDType::Q8_0, 0.02), (DType::Q4K, GgmlDType::Q4K, 0.10)] {
        assert!(b.supports_dtype(dt));
        let bytes = quantize(&vw, &[n, k], g);
        assert_eq!(bytes.len(), dt.storage_bytes(n * k));
        // unaligned input slice
        let mut buf = vec![0u8; bytes.len() + 3];
        buf[3..].copy_from_slice(&bytes);
        let w = Tensor::from_bytes(&b, &buf[3..], dt, &[n, k]).unwrap();
        assert_eq!(w.dtype(), dt);
        assert_eq!(w.dims(), &[n, k]);
        assert_eq!(w.to_bytes().unwrap(), bytes, "raw blocks come back");
        let deq = w.to_dtype(DType::F32).unwrap();
        assert_eq!(deq.dims(), &[n, k]);
        let vdeq = deq.to_vec_f32().unwrap();

        let x = t(&b, &vx, &[1, 3, k]);
        let y = x.linear(&w, None).unwrap();
        assert_eq!(y.dims(), &[1, 3, n]);
        let got = y.to_vec_f32().unwrap();
        let want_deq = naive_linear(&vx, &vdeq, None, 3, k, n);
        // NaN anywhere is an infinite error (f32::max alone drops NaN).
        let err = |want: &[f32]| {
            got.iter().zip(want).map(|(g, w)| (g - w).abs()).fold(0f32, |m, d| {
                if d.is_finite() {
                    m.max(d)
                } else {
                    f32::INFINITY
                }
            }) / scale
        };
        assert!(err(&want_deq) < 0.01, "{dt}: kernel error {} vs dequantized weight", err(&want_deq));
        assert!(err(&want_f32) < tol_orig, "{dt}: error {} vs f32 weight", err(&want_f32));
        // decode-shaped input (one row), bf16 activations, and a bias
        let bias = t(&b, &[1.0; 8], &[8]);
        let y1 = t(&b, &vx[..k], &[1, 1, k]).to_dtype(DType::BF16).unwrap().linear(&w, Some(&bias)).unwrap();
        assert_eq!(y1.dtype(), DType::BF16);
        let want1: Vec<f32> = want_deq[..n].iter().map(|v| v + 1.0).collect();
        let g1 = y1.to_vec_f32().unwrap();
        assert!(g1.iter().zip(&want1).all(|(g, w)| (g - w).abs() < 0.02 * scale + 0.02), "{g1:?} vs {want1:?}");

        // quantized embedding == rows of the dequantized table
        let ids = tu(&b, &[7, 0, 3], &[3]);
        let rows = ids.embedding(&w).unwrap();
        assert_eq!(rows.dims(), &[3, k]);
        let rv = rows.to_vec_f32().unwrap();
        for (r, &id) in [7usize, 0, 3].iter().enumerate() {
            assert_eq!(&rv[r * k..(r + 1) * k], &vdeq[id * k..(id + 1) * k]);
        }
        // quantized tensors refuse element-wise ops with a clear error
        let e = w.add(&w).unwrap_err().to_string();
        assert!(e.contains("quantized"), "{e}");
    }
    // last dim not divisible by the block: error
    assert!(Tensor::from_bytes(&b, &[0u8; 34], DType::Q8_0, &[2, 16]).is_err());
}

#[test]
fn to_dtype_quantizes_float_matrices() {
    use candle_core::quantized::GgmlDType;
    let b = be();
    let (n, k) = (4, 256);
    let vw = rand_vec(n * k, 41);
    for (dt, g) in [(DType::Q8_0, GgmlDType::Q8_0), (DType::Q4K, GgmlDType::Q4K)] {
        // From f32 and from bf16 (widened first, as candle's quantizer does): candle's blocks.
        let w32 = t(&b, &vw, &[n, k]);
        let q = w32.to_dtype(dt).unwrap();
        assert_eq!((q.dtype(), q.dims()), (dt, &[n, k][..]));
        assert_eq!(q.to_bytes().unwrap(), quantize(&vw, &[n, k], g), "{dt}: candle's quantizer's blocks");
        let wb = w32.to_dtype(DType::BF16).unwrap();
        let vb = wb.to_vec_f32().unwrap();
        assert_eq!(wb.to_dtype(dt).unwrap().to_bytes().unwrap(), quantize(&vb, &[n, k], g), "{dt} from bf16");
        // and it runs as a linear weight
        let x = t(&b, &vw[..k], &[1, 1, k]);
        assert_eq!(x.linear(&q, None).unwrap().dims(), &[1, 1, n]);
    }
    // rows that are not whole blocks, non-matrices, integers: one clear error each
    let e = t(&b, &vw[..4 * 48], &[4, 48]).to_dtype(DType::Q8_0).unwrap_err().to_string();
    assert!(e.contains("whole blocks of 32"), "{e}");
    assert!(t(&b, &vw[..64], &[64]).to_dtype(DType::Q8_0).is_err());
    assert!(tu(&b, &[0; 32], &[1, 32]).to_dtype(DType::Q8_0).unwrap_err().to_string().contains("float"));
}

// ---- norms & rope --------------------------------------------------------------------------

#[test]
fn rms_norm_and_layer_norm() {
    let b = be();
    let (rows, d) = (5, 16);
    let v: Vec<f32> = rand_vec(rows * d, 41).iter().map(|x| x * 3.0 + 0.5).collect();
    let w = rand_vec(d, 42);
    let bias = rand_vec(d, 43);
    let eps = 1e-5f32;
    let mut rms = vec![0f32; rows * d];
    let mut ln = vec![0f32; rows * d];
    let mut ln_nobias = vec![0f32; rows * d];
    for r in 0..rows {
        let row = &v[r * d..(r + 1) * d];
        let ms: f32 = row.iter().map(|x| x * x).sum::<f32>() / d as f32;
        let mean: f32 = row.iter().sum::<f32>() / d as f32;
        let var: f32 = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / d as f32;
        for c in 0..d {
            rms[r * d + c] = row[c] / (ms + eps).sqrt() * w[c];
            ln_nobias[r * d + c] = (row[c] - mean) / (var + eps).sqrt() * w[c];
            ln[r * d + c] = ln_nobias[r * d + c] + bias[c];
        }
    }
    let x = t(&b, &v, &[1, rows, d]);
    let (wt, bt) = (t(&b, &w, &[d]), t(&b, &bias, &[d]));
    assert_close(&x.rms_norm(&wt, eps).unwrap().to_vec_f32().unwrap(), &rms, 1e-5);
    assert_close(&x.layer_norm(&wt, Some(&bt), eps).unwrap().to_vec_f32().unwrap(), &ln, 1e-4);
    assert_close(&x.layer_norm(&wt, None, eps).unwrap().to_vec_f32().unwrap(), &ln_nobias, 1e-4);
    // bf16 in, bf16 out, f32 inside
    let xb = x.to_dtype(DType::BF16).unwrap();
    let y = xb.rms_norm(&wt.to_dtype(DType::BF16).unwrap(), eps).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    assert_close(&y.to_vec_f32().unwrap(), &rms, 2e-2);
    // strided input
    let xt = t(&b, &v, &[d, rows]).transpose(0, 1).unwrap();
    let vt: Vec<f32> = (0..rows * d).map(|f| v[(f % d) * rows + f / d]).collect();
    let want: Vec<f32> = (0..rows)
        .flat_map(|r| {
            let row = &vt[r * d..(r + 1) * d];
            let ms: f32 = row.iter().map(|x| x * x).sum::<f32>() / d as f32;
            row.iter().zip(&w).map(move |(x, w)| x / (ms + eps).sqrt() * w).collect::<Vec<_>>()
        })
        .collect();
    assert_close(&xt.rms_norm(&wt, eps).unwrap().to_vec_f32().unwrap(), &want, 1e-5);
}

fn naive_rope(x: &[f32], cos: &[f32], sin: &[f32], bh: usize, tt: usize, d: usize, interleaved: bool) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for h in 0..bh {
        for i in 0..tt {
            let base = (h * tt + i) * d;
            for p in 0..d / 2 {
                let (c, s) = (cos[i * d / 2 + p], sin[i * d / 2 + p]);
                let (a, bidx) =
                    if interleaved { (base + 2 * p, base + 2 * p + 1) } else { (base + p, base + p + d / 2) };
                out[a] = x[a] * c - x[bidx] * s;
                out[bidx] = x[a] * s + x[bidx] * c;
            }
        }
    }
    out
}

#[test]
fn rope_split_half_and_interleaved() {
    let b = be();
    let (bs, h, tt, d) = (2, 3, 4, 8);
    let vx = rand_vec(bs * h * tt * d, 51);
    let offset = 5; // positions 5..9 of a longer sequence
    let mut cos = vec![0f32; tt * d / 2];
    let mut sin = vec![0f32; tt * d / 2];
    for i in 0..tt {
        for p in 0..d / 2 {
            let theta = (offset + i) as f32 / 10000f32.powf(2.0 * p as f32 / d as f32);
            cos[i * d / 2 + p] = theta.cos();
            sin[i * d / 2 + p] = theta.sin();
        }
    }
    let x = t(&b, &vx, &[bs, h, tt, d]);
    let (ct, st) = (t(&b, &cos, &[tt, d / 2]), t(&b, &sin, &[tt, d / 2]));
    let split = x.rope(&ct, &st, RopeLayout::SplitHalf).unwrap().to_vec_f32().unwrap();
    let inter = x.rope(&ct, &st, RopeLayout::Interleaved).unwrap().to_vec_f32().unwrap();
    assert_close(&split, &naive_rope(&vx, &cos, &sin, bs * h, tt, d, false), 1e-5);
    assert_close(&inter, &naive_rope(&vx, &cos, &sin, bs * h, tt, d, true), 1e-5);
    assert!(split.iter().zip(&inter).any(|(a, b)| (a - b).abs() > 1e-3), "layouts must differ");
    // strided x (b, t, h, d) transposed to (b, h, t, d)
    let xt = x.transpose(1, 2).unwrap().contiguous().unwrap().transpose(1, 2).unwrap();
    assert_close(&xt.rope(&ct, &st, RopeLayout::SplitHalf).unwrap().to_vec_f32().unwrap(), &split, 1e-6);
    // bf16 x with f32 tables
    let yb = x.to_dtype(DType::BF16).unwrap().rope(&ct, &st, RopeLayout::SplitHalf).unwrap();
    assert_eq!(yb.dtype(), DType::BF16);
    assert_close(&yb.to_vec_f32().unwrap(), &split, 2e-2);
}

// ---- attention -----------------------------------------------------------------------------

struct AttnCase {
    b: usize,
    hq: usize,
    hkv: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
}

#[allow(clippy::too_many_arguments)]
fn naive_attention(
    c: &AttnCase,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<(&[f32], &[usize])>,
    scale: f32,
    causal: bool,
    window: usize,
    softcap: f32,
) -> Vec<f32> {
    let rep = c.hq / c.hkv;
    let mut out = vec![0f32; c.b * c.hq * c.tq * c.dv];
    for bi in 0..c.b {
        for h in 0..c.hq {
            let kh = h / rep;
            for i in 0..c.tq {
                let pos = (c.tk - c.tq + i) as isize;
                let mut s = vec![f32::NEG_INFINITY; c.tk];
                for (j, sj) in s.iter_mut().enumerate() {
                    let visible = (!causal || j as isize <= pos) && (window == 0 || j as isize > pos - window as isize);
                    if !visible {
                        continue;
                    }
                    let qo = ((bi * c.hq + h) * c.tq + i) * c.d;
                    let ko = ((bi * c.hkv + kh) * c.tk + j) * c.d;
                    let mut x: f32 = (0..c.d).map(|l| q[qo + l] * k[ko + l]).sum::<f32>() * scale;
                    if softcap > 0.0 {
                        x = softcap * (x / softcap).tanh();
                    }
                    if let Some((m, ms)) = mask {
                        x += m[bidx(&[bi, h, i, j], ms)];
                    }
                    *sj = x;
                }
                let mx = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let z: f32 = s.iter().map(|x| (x - mx).exp()).sum();
                for e in 0..c.dv {
                    let o: f32 =
                        (0..c.tk).map(|j| (s[j] - mx).exp() / z * v[((bi * c.hkv + kh) * c.tk + j) * c.dv + e]).sum();
                    out[((bi * c.hq + h) * c.tq + i) * c.dv + e] = o;
                }
            }
        }
    }
    out
}

#[test]
fn attention_gqa_causal_offset_window_mask_softcap() {
    let b = be();
    let c = AttnCase { b: 2, hq: 6, hkv: 2, tq: 3, tk: 7, d: 8, dv: 5 };
    let vq = rand_vec(c.b * c.hq * c.tq * c.d, 61);
    let vk = rand_vec(c.b * c.hkv * c.tk * c.d, 62);
    let vv = rand_vec(c.b * c.hkv * c.tk * c.dv, 63);
    let q = t(&b, &vq, &[c.b, c.hq, c.tq, c.d]);
    let k = t(&b, &vk, &[c.b, c.hkv, c.tk, c.d]);
    let v = t(&b, &vv, &[c.b, c.hkv, c.tk, c.dv]);
    let scale = 1.0 / (c.d as f32).sqrt();
    let opts = |causal, window, softcap| AttentionOpts { scale: scale * 3.0, causal, window, softcap };
    for (causal, window, softcap) in [(true, 0, 0.0), (false, 0, 0.0), (true, 3, 0.0), (true, 2, 1.5), (false, 0, 2.0)]
    {
        let y = Tensor::attention(&q, &k, &v, None, opts(causal, window, softcap)).unwrap();
        assert_eq!(y.dims(), &[c.b, c.hq, c.tq, c.dv]);
        let want = naive_attention(&c, &vq, &vk, &vv, None, scale * 3.0, causal, window, softcap);
        assert_close(&y.to_vec_f32().unwrap(), &want, 1e-5);
    }
    // additive masks of several broadcast shapes, with causal and softcap
    let mask_shapes: [&[usize]; 4] =
        [&[c.tq, c.tk], &[c.b, 1, 1, c.tk], &[1, c.hq, c.tq, c.tk], &[c.b, c.hq, c.tq, c.tk]];
    for (mi, ms) in mask_shapes.iter().enumerate() {
        let n: usize = ms.iter().product();
        let mv: Vec<f32> =
            rand_vec(n, 70 + mi as u64).iter().map(|x| if *x > 0.6 { f32::NEG_INFINITY } else { x * 2.0 }).collect();
        let m = t(&b, &mv, ms);
        let full: Vec<usize> = std::iter::repeat_n(1, 4 - ms.len()).chain(ms.iter().cloned()).collect();
        for (causal, softcap) in [(true, 0.0), (false, 1.0)] {
            let y = Tensor::attention(&q, &k, &v, Some(&m), opts(causal, 0, softcap)).unwrap();
            let want = naive_attention(&c, &vq, &vk, &vv, Some((&mv, &full)), scale * 3.0, causal, 0, softcap);
            assert_close(&y.to_vec_f32().unwrap(), &want, 1e-5);
        }
    }
    // decode step (tq = 1) against a narrowed, strided KV buffer (as a KV cache hands it over)
    let cap = 10;
    let kbuf = Tensor::zeros(&b, DType::F32, &[c.b, c.hkv, cap, c.d]).unwrap().slice_assign(&k, 2, 0).unwrap();
    let vbuf = Tensor::zeros(&b, DType::F32, &[c.b, c.hkv, cap, c.dv]).unwrap().slice_assign(&v, 2, 0).unwrap();
    let (kn, vn) = (kbuf.narrow(2, 0, c.tk).unwrap(), vbuf.narrow(2, 0, c.tk).unwrap());
    let q1 = q.narrow(2, c.tq - 1, 1).unwrap();
    let y = Tensor::attention(&q1, &kn, &vn, None, opts(true, 0, 0.0)).unwrap();
    let c1 = AttnCase { tq: 1, ..c };
    let vq1 = q1.to_vec_f32().unwrap();
    assert_close(
        &y.to_vec_f32().unwrap(),
        &naive_attention(&c1, &vq1, &vk, &vv, None, scale * 3.0, true, 0, 0.0),
        1e-5,
    );
    // bf16 inputs: bf16 output, f32 inside
    let yb = Tensor::attention(
        &q.to_dtype(DType::BF16).unwrap(),
        &k.to_dtype(DType::BF16).unwrap(),
        &v.to_dtype(DType::BF16).unwrap(),
        None,
        opts(true, 0, 0.0),
    )
    .unwrap();
    assert_eq!(yb.dtype(), DType::BF16);
    assert_close(&yb.to_vec_f32().unwrap(), &naive_attention(&c, &vq, &vk, &vv, None, scale * 3.0, true, 0, 0.0), 3e-2);
    // errors
    assert!(Tensor::attention(&k, &q, &v, None, opts(true, 0, 0.0)).is_err(), "hq not a multiple of hkv / tq > tk");
}

// ---- convolutions --------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn naive_conv1d(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    (b, cin, l): (usize, usize, usize),
    (cout, k): (usize, usize),
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
) -> (Vec<f32>, usize) {
    let l_out = (l + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
    let (cin_g, cout_g) = (cin / groups, cout / groups);
    let mut out = vec![0f32; b * cout * l_out];
    for bi in 0..b {
        for oc in 0..cout {
            let g = oc / cout_g;
            for o in 0..l_out {
                let mut acc = bias.map_or(0.0, |bb| bb[oc]);
                for ic in 0..cin_g {
                    for j in 0..k {
                        let pos = (o * stride + j * dilation) as isize - padding as isize;
                        if pos >= 0 && (pos as usize) < l {
                            acc += x[(bi * cin + g * cin_g + ic) * l + pos as usize] * w[(oc * cin_g + ic) * k + j];
                        }
                    }
                }
                out[(bi * cout + oc) * l_out + o] = acc;
            }
        }
    }
    (out, l_out)
}

#[allow(clippy::too_many_arguments)]
fn naive_conv_transpose1d(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    (b, cin, l): (usize, usize, usize),
    (cout, k): (usize, usize),
    stride: usize,
    padding: usize,
    output_padding: usize,
    dilation: usize,
    groups: usize,
) -> (Vec<f32>, usize) {
    let l_out = (l - 1) * stride + dilation * (k - 1) + output_padding + 1 - 2 * padding;
    let (cin_g, cout_g) = (cin / groups, cout / groups);
    let mut out = vec![0f32; b * cout * l_out];
    for bi in 0..b {
        for ic in 0..cin {
            let g = ic / cin_g;
            for oc in 0..cout_g {
                for i in 0..l {
                    for j in 0..k {
                        let pos = (i * stride + j * dilation) as isize - padding as isize;
                        if pos >= 0 && (pos as usize) < l_out {
                            out[(bi * cout + g * cout_g + oc) * l_out + pos as usize] +=
                                x[(bi * cin + ic) * l + i] * w[(ic * cout_g + oc) * k + j];
                        }
                    }
                }
            }
        }
        if let Some(bb) = bias {
            for oc in 0..cout {
                for o in 0..l_out {
                    out[(bi * cout + oc) * l_out + o] += bb[oc];
                }
            }
        }
    }
    (out, l_out)
}

#[test]
fn conv1d_stride_padding_dilation_groups() {
    let b = be();
    // (b, cin, l, cout, k, stride, padding, dilation, groups)
    let cases = [
        (2, 4, 11, 6, 3, 1, 0, 1, 1),
        (2, 4, 11, 6, 3, 2, 1, 2, 2),
        (1, 6, 9, 3, 4, 3, 2, 1, 3),
        (2, 5, 13, 5, 7, 1, 3, 1, 5),   // depthwise (direct kernel)
        (1, 4, 10, 4, 3, 2, 2, 3, 4),   // depthwise, strided + dilated
        (2, 3, 3000, 4, 7, 1, 3, 2, 1), // dense, several column tiles on the pool's threads
        (1, 2, 2500, 3, 4, 2, 5, 1, 1), // dense, strided, padding wider than a tile's overhang
        (1, 4, 20, 5, 3, 1, 1, 1, 1),   // dense, one tile: output channels split across threads
        (2, 3, 3000, 5, 1, 1, 0, 1, 1), // pointwise: the input read in place, several tiles
        (1, 8, 20, 70, 1, 1, 0, 1, 1),  // pointwise, one tile: output channels split
    ];
    for (i, &(bs, cin, l, cout, k, stride, padding, dilation, groups)) in cases.iter().enumerate() {
        let vx = rand_vec(bs * cin * l, 80 + i as u64);
        let vw = rand_vec(cout * cin / groups * k, 90 + i as u64);
        let vb = rand_vec(cout, 100 + i as u64);
        let x = t(&b, &vx, &[bs, cin, l]);
        let w = t(&b, &vw, &[cout, cin / groups, k]);
        let p = Conv1dParams { stride, padding, dilation, groups };
        for with_bias in [false, true] {
            let bias = t(&b, &vb, &[cout]);
            let y = x.conv1d(&w, with_bias.then_some(&bias), p).unwrap();
            let (want, l_out) = naive_conv1d(
                &vx,
                &vw,
                with_bias.then_some(&vb[..]),
                (bs, cin, l),
                (cout, k),
                stride,
                padding,
                dilation,
                groups,
            );
            assert_eq!(y.dims(), &[bs, cout, l_out], "case {i}");
            assert_close(&y.to_vec_f32().unwrap(), &want, 1e-5);
        }
    }
    // A strided view of the input gives what its contiguous copy gives.
    let vx = rand_vec(3 * 40, 120);
    let x = t(&b, &vx, &[1, 3, 40]).narrow(2, 5, 30).unwrap();
    let w = t(&b, &rand_vec(4 * 3 * 5, 121), &[4, 3, 5]);
    let p = Conv1dParams { stride: 1, padding: 2, dilation: 1, groups: 1 };
    let want = x.contiguous().unwrap().conv1d(&w, None, p).unwrap().to_vec_f32().unwrap();
    assert_eq!(x.conv1d(&w, None, p).unwrap().to_vec_f32().unwrap(), want);
    // kernel longer than the padded input, or empty: an error, not a panic
    let x = t(&b, &[0.; 4], &[1, 1, 4]);
    assert!(x.conv1d(&t(&b, &[0.; 9], &[1, 1, 9]), None, Conv1dParams::default()).is_err());
    assert!(x.conv1d(&t(&b, &[], &[1, 1, 0]), None, Conv1dParams::default()).is_err());
    assert!(x.conv_transpose1d(&t(&b, &[], &[1, 1, 0]), None, Conv1dParams::default(), 0).is_err());
}

#[test]
fn conv_transpose1d_stride_padding_output_padding_groups() {
    let b = be();
    // (b, cin, l, cout, k, stride, padding, output_padding, dilation, groups)
    let cases = [
        (2, 4, 5, 6, 3, 1, 0, 0, 1, 1),
        (2, 4, 5, 6, 4, 2, 1, 1, 1, 2),
        (1, 3, 6, 2, 5, 3, 2, 2, 1, 1),
        (1, 2, 4, 4, 3, 2, 0, 0, 2, 2),
        (2, 6, 5, 6, 4, 2, 1, 0, 1, 6),     // depthwise upsampler (direct kernel)
        (1, 3, 4, 3, 3, 3, 1, 2, 1, 3),     // depthwise with output padding
        (2, 5, 300, 100, 4, 2, 2, 0, 1, 1), // dense: several column blocks and channel blocks
        (1, 3, 7, 4, 3, 2, 4, 1, 2, 1),     // dense, dilated, padding past the first taps
        (1, 4, 9, 3, 6, 3, 3, 0, 1, 1),     // dense, kernel = 2 strides, the codec's causal trim
        // Kernel and padding whole numbers of strides: as `stride` ordinary convolutions.
        (1, 8, 40, 5, 2, 2, 0, 0, 1, 1),   // one tap a phase
        (1, 6, 30, 7, 4, 2, 4, 0, 1, 1),   // padding past the kernel: phases start inside
        (1, 6, 30, 7, 6, 2, 0, 0, 1, 1),   // three taps a phase, zero padding on both sides
        (2, 20, 70, 9, 16, 8, 8, 0, 1, 1), // the codec's first upsampler's shape, batch 2
        (1, 5, 25, 4, 4, 2, 2, 1, 1, 1),   // output padding past the phases: the gemm path
        // Short inputs (l <= 16, 2·l < cin) take the folded path: all taps at once, then folded.
        (1, 64, 5, 40, 16, 8, 8, 0, 1, 1), // the codec's first upsampler streaming one frame
        (2, 50, 3, 30, 3, 2, 4, 1, 2, 1),  // dilated, padding past the first taps, batch 2
        (1, 300, 12, 100, 4, 2, 2, 0, 1, 1), // several channel blocks across the pool
    ];
    for (i, &(bs, cin, l, cout, k, stride, padding, output_padding, dilation, groups)) in cases.iter().enumerate() {
        let vx = rand_vec(bs * cin * l, 110 + i as u64);
        let vw = rand_vec(cin * cout / groups * k, 120 + i as u64);
        let vb = rand_vec(cout, 130 + i as u64);
        let x = t(&b, &vx, &[bs, cin, l]);
        let w = t(&b, &vw, &[cin, cout / groups, k]);
        let bias = t(&b, &vb, &[cout]);
        let p = Conv1dParams { stride, padding, dilation, groups };
        let y = x.conv_transpose1d(&w, Some(&bias), p, output_padding).unwrap();
        let (want, l_out) = naive_conv_transpose1d(
            &vx,
            &vw,
            Some(&vb),
            (bs, cin, l),
            (cout, k),
            stride,
            padding,
            output_padding,
            dilation,
            groups,
        );
        assert_eq!(y.dims(), &[bs, cout, l_out], "case {i}");
        assert_close(&y.to_vec_f32().unwrap(), &want, 1e-5);
    }
}

// ---- snake -----------------------------------------------------------------------------------

/// The fused Snake is its composition bit for bit, on the pool (40 000 values a channel: several
/// work items per row, a ragged last block) and on one thread, with |alpha · x| past the sine's
/// fast range in places (libm there, as the composition's sine).
#[test]
fn snake_equals_its_composition_exactly() {
    let b = be();
    for (c, l) in [(3, 40_000), (4, 9)] {
        let mut vx: Vec<f32> = rand_vec(c * l, 150).iter().map(|v| v * 6.0).collect();
        vx[1] = 1e6;
        vx[2] = f32::NAN;
        let alpha: Vec<f32> = rand_vec(c, 151).iter().map(|v| v.exp()).collect();
        let inv_beta: Vec<f32> = rand_vec(c, 152).iter().map(|v| 1.0 / (v.exp() + 1e-9)).collect();
        let x = t(&b, &vx, &[1, c, l]);
        let (a, ib) = (t(&b, &alpha, &[1, c, 1]), t(&b, &inv_beta, &[1, c, 1]));
        let fused = x.snake(&a, &ib).unwrap().to_vec_f32().unwrap();
        let composed = x.add(&x.mul(&a).unwrap().sin().unwrap().sqr().unwrap().mul(&ib).unwrap()).unwrap();
        let composed = composed.to_vec_f32().unwrap();
        for (i, (f, w)) in fused.iter().zip(&composed).enumerate() {
            assert!(f.to_bits() == w.to_bits() || (f.is_nan() && w.is_nan()), "{c}x{l} value {i}: {f} vs {w}");
        }
        // A view whose rows are contiguous (narrowed along time) is read in place: the same
        // values as its contiguous copy.
        let view = x.narrow(2, 1, l - 2).unwrap();
        let got = view.snake(&a, &ib).unwrap().to_vec_f32().unwrap();
        let want = view.contiguous().unwrap().snake(&a, &ib).unwrap().to_vec_f32().unwrap();
        let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()));
        assert!(same && got.len() == c * (l - 2), "{c}x{l}: snake of a narrowed view");
    }
}

// ---- slice assign --------------------------------------------------------------------------

#[test]
fn slice_assign_writes_in_place() {
    let b = be();
    let buf = Tensor::zeros(&b, DType::F32, &[1, 2, 4, 3]).unwrap();
    // A view taken before the write shares the storage: it must see the write.
    let view = buf.narrow(2, 0, 2).unwrap();
    let src = t(&b, &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.], &[1, 2, 2, 3]);
    let out = buf.clone().slice_assign(&src, 2, 1).unwrap();
    let want = vec![
        0., 0., 0., 1., 2., 3., 4., 5., 6., 0., 0., 0., //
        0., 0., 0., 7., 8., 9., 10., 11., 12., 0., 0., 0.,
    ];
    assert_eq!(out.to_vec_f32().unwrap(), want);
    assert_eq!(buf.to_vec_f32().unwrap(), want, "the original buffer was written in place");
    assert_eq!(view.to_vec_f32().unwrap(), vec![0., 0., 0., 1., 2., 3., 0., 0., 0., 7., 8., 9.]);
    // a second append, KV-cache style, with a bf16 src cast to the buffer's dtype
    let one = t(&b, &[-1., -2., -3., -4., -5., -6.], &[1, 2, 1, 3]).to_dtype(DType::BF16).unwrap();
    let out2 = out.slice_assign(&one, 2, 3).unwrap();
    let v = buf.to_vec_f32().unwrap();
    assert_eq!(&v[9..12], &[-1., -2., -3.]);
    assert_eq!(&v[21..24], &[-4., -5., -6.]);
    assert_eq!(out2.to_vec_f32().unwrap(), v);
    // a strided dst still gets the right values (copied)
    let base = t(&b, &[0.; 6], &[2, 3]);
    let tr = base.transpose(0, 1).unwrap(); // (3, 2), strided
    let y = tr.slice_assign(&t(&b, &[7., 8.], &[1, 2]), 0, 2).unwrap();
    assert_eq!(y.to_vec_f32().unwrap(), vec![0., 0., 0., 0., 7., 8.]);
    // out of range: error
    let z = Tensor::zeros(&b, DType::F32, &[2, 2]).unwrap();
    assert!(z.slice_assign(&t(&b, &[1., 2.], &[1, 2]), 0, 2).is_err());
}

// ---- backend info --------------------------------------------------------------------------

#[test]
fn device_and_memory() {
    let b = be();
    assert_eq!(b.name(), "candle");
    let d = b.device();
    assert!(d.description.as_str().starts_with("cpu ("), "{}", d.description);
    let m = b.memory();
    assert!(m.active_bytes > 0 && m.peak_bytes >= m.active_bytes && m.device_total_bytes > m.active_bytes, "{m:?}");
    for dt in [DType::F32, DType::BF16, DType::Q4_0, DType::Q4K, DType::Q6K, DType::Q8K] {
        assert!(b.supports_dtype(dt), "{dt}");
    }
    let x = t(&b, &[1.], &[1]);
    x.eval().unwrap();
}
