//! What one small op costs through the `Tensor` API at decode shapes (one token): the fixed
//! cost of a call (the op enum across the backend's vtable, candle's tensor, the output's
//! allocation) against its arithmetic. A decode step of a small model runs ~20 such ops a layer
//! between its products, serially.
//!
//! `cargo bench -p infer-backend-candle --bench op_overhead`; microseconds per call, best of 5
//! batches of 2000 calls.

use std::time::Instant;

use infer_backend_candle::CandleBackend;
use infer_core::{DType, Tensor};

fn main() {
    let be = CandleBackend::backend().unwrap();
    let x = Tensor::from_f32(&be, &(0..640).map(|i| (i as f32 * 0.1).sin()).collect::<Vec<_>>(), &[1, 1, 640]).unwrap();
    let y = x.scale(0.5).unwrap();
    let w = Tensor::from_f32(&be, &vec![1.0f32; 640], &[640]).unwrap();
    let wide = Tensor::from_f32(&be, &vec![0.5f32; 2048], &[1, 1, 2048]).unwrap();
    let heads = Tensor::from_f32(&be, &vec![0.5f32; 1024], &[1, 4, 1, 256]).unwrap();
    let hw = Tensor::from_f32(&be, &vec![1.0f32; 256], &[256]).unwrap();
    let mat = Tensor::from_f32(&be, &vec![0.01f32; 2048 * 640], &[2048, 640]).unwrap().to_dtype(DType::Q8_0).unwrap();
    type Case<'a> = (&'a str, Box<dyn Fn() -> Tensor + 'a>);
    let cases: Vec<Case> = vec![
        ("add 640", Box::new(|| x.add(&y).unwrap())),
        ("rms_norm 640", Box::new(|| x.rms_norm(&w, 1e-6).unwrap())),
        ("gelu_tanh 2048", Box::new(|| wide.gelu_tanh().unwrap())),
        ("mul 2048", Box::new(|| wide.mul(&wide).unwrap())),
        ("rms_norm 4x256", Box::new(|| heads.rms_norm(&hw, 1e-6).unwrap())),
        ("narrow", Box::new(|| wide.narrow(2, 256, 1024).unwrap())),
        ("reshape", Box::new(|| wide.reshape(&[1, 1, 8, 256]).unwrap())),
        ("linear q8_0 2048x640", Box::new(|| x.linear(&mat, None).unwrap())),
    ];
    for (name, f) in cases {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..2000 {
                std::hint::black_box(f());
            }
            best = best.min(t.elapsed().as_secs_f64() / 2000.0);
        }
        println!("{name:24} {:7.2} us", best * 1e6);
    }
}
