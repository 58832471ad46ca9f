//! Rough timings of the decode-critical ops of the candle backend (one row through a linear
//! layer per weight dtype, decode attention against a long cache, a KV-cache append).
//!
//! `cargo run --release -p infer-backend-candle --example bench_ops [n] [k]`

use std::time::Instant;

use infer_backend_candle::CandleBackend;
use infer_core::{AttentionOpts, DType, Tensor};

/// The benches' seeded inputs.
use infer_cpu_kernels::bench_inputs::values as rand_vec;

/// Median seconds per call of `f` over `iters` calls, after `warm` warm-up calls.
fn time(warm: usize, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    let mut v: Vec<f64> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() -> infer_core::Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (n, k) = (args.first().copied().unwrap_or(4096), args.get(1).copied().unwrap_or(4096));
    let b = CandleBackend::backend()?;
    println!("{}", b.device().description);
    let wv = rand_vec(n * k, 1);
    let w32 = Tensor::from_f32(&b, &wv, &[n, k])?;
    let x32 = Tensor::from_f32(&b, &rand_vec(k, 2), &[1, 1, k])?;

    let quant = |g: candle_core::quantized::GgmlDType, dt: DType| -> infer_core::Result<Tensor> {
        let t = candle_core::Tensor::from_vec(wv.clone(), (n, k), &candle_core::Device::Cpu).unwrap();
        let q = candle_core::quantized::QTensor::quantize(&t, g).unwrap();
        Tensor::from_bytes(&b, &q.data().unwrap(), dt, &[n, k])
    };
    use candle_core::quantized::GgmlDType as G;
    let weights = vec![
        ("f32", w32.clone(), x32.clone()),
        ("f16", w32.to_dtype(DType::F16)?, x32.to_dtype(DType::F16)?),
        ("bf16", w32.to_dtype(DType::BF16)?, x32.to_dtype(DType::BF16)?),
        ("q8_0", quant(G::Q8_0, DType::Q8_0)?, x32.clone()),
        ("q4_k", quant(G::Q4K, DType::Q4K)?, x32.clone()),
        ("q6_k", quant(G::Q6K, DType::Q6K)?, x32.clone()),
    ];
    for (name, w, x) in &weights {
        let bytes = w.dtype().storage_bytes(n * k) as f64;
        let s = time(3, 15, || {
            x.linear(w, None).unwrap();
        });
        println!("linear (1,1,{k}) x {name} ({n},{k}): {:8.3} ms  {:6.2} GB/s of weights", s * 1e3, bytes / s / 1e9);
    }

    // Decode attention: 14 query heads, 2 kv heads, head dim 64, against a narrowed cache.
    for tk in [512usize, 4096] {
        let (hq, hkv, d, cap) = (14, 2, 64, tk + 256);
        let kbuf = Tensor::zeros(&b, DType::F32, &[1, hkv, cap, d])?;
        let kv = Tensor::from_f32(&b, &rand_vec(hkv * tk * d, 3), &[1, hkv, tk, d])?;
        let kbuf = kbuf.slice_assign(&kv, 2, 0)?;
        let k = kbuf.narrow(2, 0, tk)?;
        let q = Tensor::from_f32(&b, &rand_vec(hq * d, 4), &[1, hq, 1, d])?;
        let s = time(3, 30, || {
            Tensor::attention(&q, &k, &k, None, AttentionOpts::causal(0.125)).unwrap();
        });
        println!("attention decode hq {hq} hkv {hkv} d {d} tk {tk}: {:8.3} ms", s * 1e3);
        let one = Tensor::from_f32(&b, &rand_vec(hkv * d, 5), &[1, hkv, 1, d])?;
        let mut buf = Some(kbuf);
        let s = time(3, 30, || {
            buf = Some(buf.take().unwrap().slice_assign(&one, 2, tk).unwrap());
        });
        println!("slice_assign one position into a ({hkv},{cap},{d}) cache: {:8.3} us", s * 1e6);
    }
    // Prefill attention.
    let (hq, hkv, d, t) = (14, 2, 64, 1024);
    let q = Tensor::from_f32(&b, &rand_vec(hq * t * d, 6), &[1, hq, t, d])?;
    let kt = Tensor::from_f32(&b, &rand_vec(hkv * t * d, 7), &[1, hkv, t, d])?;
    let s = time(1, 5, || {
        Tensor::attention(&q, &kt, &kt, None, AttentionOpts::causal(0.125)).unwrap();
    });
    println!("attention prefill t {t}: {:8.3} ms", s * 1e3);
    let x = Tensor::from_f32(&b, &rand_vec(k, 8), &[1, 1, k])?;
    let w = Tensor::from_f32(&b, &rand_vec(k, 9), &[k])?;
    let s = time(10, 100, || {
        x.rms_norm(&w, 1e-6).unwrap();
    });
    println!("rms_norm (1,1,{k}): {:8.3} us per call (one FFI crossing + kernel)", s * 1e6);
    let m = b.memory();
    println!("rss {:.1} MiB, peak {:.1} MiB", m.active_bytes as f64 / 1048576.0, m.peak_bytes as f64 / 1048576.0);
    Ok(())
}
