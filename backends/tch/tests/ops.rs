//! Every op of the tch backend against the candle backend through infer-core's public `Tensor`
//! API: the shared conformance suite (backends/op_conformance.rs), then in-place slice
//! assignment, and the things only tch has (CUDA device selection, thread setting, clean
//! libtorch errors).
//!
//! `INFER_TCH_TEST_DEVICE=cuda` runs the whole suite with tch on the GPU (tools/gpu_check.sh);
//! the default is the CPU.

use infer_backend_tch::TchBackend;

/// The device the suite runs tch on: `$INFER_TCH_TEST_DEVICE`, else the CPU.
fn test_device() -> String {
    std::env::var("INFER_TCH_TEST_DEVICE").unwrap_or_else(|_| "cpu".into())
}

fn under_test() -> Backend {
    let device = test_device();
    Backend::from_impl(TchBackend::new(&device).unwrap_or_else(|e| panic!("tch backend on {device}: {e}")))
}

const UNDER_TEST: &str = "tch";

/// The least tolerance of a float comparison. On the CPU tch must match candle exactly where
/// the suite says 0. CUDA's math library is not the CPU's libm (its expf, tanhf, erff are within
/// 2–4 ulps of the rounded result, per the CUDA C Programming Guide), and its reductions sum
/// in another order, so on a GPU an exact check becomes 1e-5 relative: far below any wrong
/// formula, above a few ulps.
fn tol_floor() -> f32 {
    if test_device().starts_with("cuda") {
        1e-5
    } else {
        0.0
    }
}

include!("../../op_conformance.rs");

// ---- in-place slice assignment ---------------------------------------------------------------

#[test]
fn slice_assign_writes_in_place() {
    let b = under_test();
    let buf = Tensor::zeros(&b, DType::F32, &[2, 5, 3]).unwrap();
    let alias = buf.reshape(&[10, 3]).unwrap(); // shares storage
    let view = buf.narrow(1, 0, 4).unwrap(); // a view into it, as a KV cache reads it
    let src = t(&b, &rand_vec(2 * 2 * 3, 101), &[2, 2, 3]);
    let out = buf.slice_assign(&src, 1, 2).unwrap();
    let want = out.to_vec_f32().unwrap();
    assert_eq!(alias.to_vec_f32().unwrap(), want, "the write is visible through every view of the buffer");
    assert_eq!(view.narrow(1, 2, 2).unwrap().to_vec_f32().unwrap(), src.to_vec_f32().unwrap());
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
    both_fail("src too long", |b| {
        Tensor::zeros(b, DType::F32, &[3]).unwrap().slice_assign(&t(b, &[1., 2.], &[2]), 0, 2)
    });
}

// ---- what only tch has -----------------------------------------------------------------------

#[test]
fn devices_threads_and_errors() {
    let b = TchBackend::cpu().unwrap();
    let info = b.device();
    assert_eq!(info.kind, infer_core::DeviceKind::Cpu);
    assert!(info.description.as_str().contains("intra-op threads"), "{}", info.description);
    assert!(b.memory().peak_bytes > 0);
    let threads = infer_backend_tch::sys::configure_threads();
    assert!(threads >= 1);
    assert_eq!(tch::get_num_threads() as usize, threads);
    // No GPU (or a GPU): either a backend on it or one clear line saying why not.
    match TchBackend::new("cuda") {
        Ok(cuda) => assert!(cuda.tch_device().is_cuda()),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("no CUDA device") && !e.contains('\n'), "{e}");
        }
    }
    assert!(TchBackend::new("metal").unwrap_err().to_string().contains("metal"));
    // A tensor of another backend is refused by name.
    let other = t(&candle(), &[1.0], &[1]);
    let e = Tensor::exec(&b, infer_core::Op::Unary(UnaryOp::Neg), &[&other]).unwrap_err().to_string();
    assert!(e.contains("different backends"), "{e}");
}

/// On a GPU machine: the same ops on CUDA agree with the CPU. Ignored elsewhere (libtest says
/// so) rather than passing without a GPU; tools/gpu_check.sh runs it with `--include-ignored`.
#[test]
#[ignore = "needs a CUDA device: tools/gpu_check.sh runs it"]
fn cuda_matches_cpu() {
    let cuda = TchBackend::new("cuda").unwrap_or_else(|e| panic!("no CUDA device: {e}"));
    let cuda = Backend::from_impl(cuda);
    let cpu = TchBackend::cpu().unwrap();
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
    let ((a, ia), (g, ig)) = (run(&cpu), run(&cuda));
    assert_eq!(ia, ig);
    for (x, y) in a.iter().zip(&g) {
        assert!((x - y).abs() <= 1e-3 * (1.0 + x.abs()), "cpu {x} vs cuda {y}");
    }
}
