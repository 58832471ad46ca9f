//! Every op of the MLX backend against the candle backend through infer-core's public `Tensor`
//! API: the shared conformance suite (backends/op_conformance.rs), then slice assignment, and
//! what only MLX has (lazy evaluation, device selection, clean MLX errors; on a Mac the GPU
//! against the CPU).

use infer_backend_mlx::MlxBackend;

fn under_test() -> Backend {
    MlxBackend::cpu().expect("mlx cpu backend")
}

const UNDER_TEST: &str = "mlx";

/// The least tolerance of a float comparison: MLX's CPU build matches candle exactly where the
/// suite says 0.
fn tol_floor() -> f32 {
    0.0
}

include!("../../op_conformance.rs");

// ---- slice assignment ------------------------------------------------------------------------

#[test]
fn slice_assign() {
    same("slice_assign", 0.0, |b| {
        let dst = Tensor::zeros(b, DType::F32, &[2, 5, 3]).unwrap();
        dst.slice_assign(&t(b, &rand_vec(12, 101), &[2, 2, 3]), 1, 2).unwrap()
    });
    same("slice_assign casts src", 0.0, |b| {
        let dst = Tensor::zeros(b, DType::BF16, &[4, 2]).unwrap();
        dst.slice_assign(&t(b, &[1.5, 2.5, 3.5, 4.5], &[2, 2]), 0, 1).unwrap()
    });
    same("slice_assign into a broadcast view", 0.0, |b| {
        let dst = t(b, &[1., 2.], &[1, 2]).broadcast_to(&[3, 2]).unwrap();
        dst.slice_assign(&t(b, &[7., 8.], &[1, 2]), 0, 1).unwrap()
    });
    same("slice_assign of a view of itself", 0.0, |b| {
        let dst = t(b, &[1., 2., 3., 4.], &[4]);
        let src = dst.narrow(0, 0, 2).unwrap();
        dst.slice_assign(&src, 0, 1).unwrap()
    });
    // A KV cache's pattern: appends into a preallocated buffer, each read through a view.
    same("kv cache appends", 0.0, |b| {
        let mut cache = Tensor::zeros(b, DType::F32, &[1, 2, 6, 4]).unwrap();
        let mut seen = Vec::new();
        for step in 0..3 {
            let new = t(b, &rand_vec(2 * 2 * 4, 200 + step), &[1, 2, 2, 4]);
            cache = cache.slice_assign(&new, 2, 2 * step as usize).unwrap();
            seen.push(cache.narrow(2, 0, 2 * step as usize + 2).unwrap().sum_keepdim(2).unwrap());
        }
        Tensor::concat(&seen.iter().collect::<Vec<_>>(), 2).unwrap()
    });
    both_fail("src too long", |b| {
        Tensor::zeros(b, DType::F32, &[3]).unwrap().slice_assign(&t(b, &[1., 2.], &[2]), 0, 2)
    });
}

// ---- what only MLX has -----------------------------------------------------------------------

#[test]
fn lazy_graph_devices_and_errors() {
    let b = under_test();
    let info = b.device();
    assert_eq!(info.kind, infer_core::DeviceKind::Cpu);
    assert!(info.description.as_str().contains("MLX"), "{}", info.description);
    // Ops only build a graph; eval computes it, and the values are those of an eager run.
    let x = t(&b, &rand_vec(64, 7), &[8, 8]);
    let y = x.matmul(&x).unwrap().silu().unwrap().sum_keepdim(1).unwrap();
    y.eval().unwrap();
    y.eval().unwrap(); // evaluating twice is harmless
    let z = t(&candle(), &rand_vec(64, 7), &[8, 8]);
    let want = z.matmul(&z).unwrap().silu().unwrap().sum_keepdim(1).unwrap().to_vec_f32().unwrap();
    for (g, w) in y.to_vec_f32().unwrap().iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
    }
    assert!(b.memory().peak_bytes > 0);
    // No GPU (or a GPU): either a backend on it or one clear line saying why not.
    for dev in ["gpu", "metal"] {
        match MlxBackend::new(dev) {
            Ok(gpu) => assert_eq!(gpu.device_kind(), infer_core::DeviceKind::Metal),
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("Metal needs macOS on Apple silicon") || e.contains("no Metal GPU"), "{e}");
                assert!(e.contains("--device cpu") && !e.contains('\n'), "{e}");
            }
        }
    }
    let e = MlxBackend::new("cuda").unwrap_err().to_string();
    assert!(e.contains("cuda") && e.contains("--device cpu|gpu"), "{e}");
    // The default device: the GPU where MLX has one, else the CPU.
    let default = MlxBackend::new("").unwrap();
    let want = if infer_backend_mlx::sys::metal_available() {
        infer_core::DeviceKind::Metal
    } else {
        infer_core::DeviceKind::Cpu
    };
    assert_eq!(default.device_kind(), want);
    // A tensor of another backend is refused by name.
    let other = t(&candle(), &[1.0], &[1]);
    let e = Tensor::exec(&b, infer_core::Op::Unary(UnaryOp::Neg), &[&other]).unwrap_err().to_string();
    assert!(e.contains("different backends"), "{e}");
    // An MLX error comes back as one line naming the op.
    let e = t(&b, &[1., 2., 3., 4.], &[2, 2]).matmul(&t(&b, &[1., 2., 3.], &[3, 1])).unwrap_err().to_string();
    assert!(e.contains("matmul") && !e.contains('\n'), "{e}");
}

/// On a Mac: the same ops on the Metal GPU agree with the CPU. Ignored elsewhere (libtest says
/// so) rather than passing without a GPU; the macOS workflow runs it with `--include-ignored`.
#[test]
#[ignore = "needs a Metal GPU: the macOS workflow runs it"]
fn gpu_matches_cpu() {
    let gpu = MlxBackend::new("gpu").unwrap_or_else(|e| panic!("no Metal GPU: {e}"));
    let gpu = Backend::from_impl(gpu);
    let cpu = under_test();
    let (bb, hq, hkv, tq, tk, d) = (1, 4, 2, 5, 9, 16);
    let run = |b: &Backend| {
        let q = t(b, &rand_vec(bb * hq * tq * d, 1), &[bb, hq, tq, d]);
        let k = t(b, &rand_vec(bb * hkv * tk * d, 2), &[bb, hkv, tk, d]);
        let v = t(b, &rand_vec(bb * hkv * tk * d, 3), &[bb, hkv, tk, d]);
        let a =
            Tensor::attention(&q, &k, &v, None, AttentionOpts { scale: 0.25, causal: true, window: 4, softcap: 0.0 })
                .unwrap();
        let w = t(b, &rand_vec(d * d, 4), &[d, d]);
        let y = a.linear(&w, None).unwrap().rms_norm(&t(b, &rand_vec(d, 5), &[d]), 1e-6).unwrap();
        let ids = y.reduce(ReduceOp::ArgMax, 3, false).unwrap();
        (y.to_vec_f32().unwrap(), ids.to_vec_u32().unwrap())
    };
    let ((a, ia), (g, ig)) = (run(&cpu), run(&gpu));
    assert_eq!(ia, ig);
    for (x, y) in a.iter().zip(&g) {
        assert!((x - y).abs() <= 1e-3 * (1.0 + x.abs()), "cpu {x} vs gpu {y}");
    }
}
