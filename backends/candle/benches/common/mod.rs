//! What the backend's benchmarks share: reproducible inputs and the best-of timing loop. The
//! library's unit tests include this file too (`bench_common` in src/lib.rs), for the same inputs.

// Each bench compiles this module for itself and uses part of it.
#![allow(dead_code)]

use std::time::Instant;

use candle_core::{Device, Tensor};

/// `n` values in [-1, 1) from a seeded LCG.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// An f32 CPU tensor of `shape` holding [`values`].
pub fn tensor(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(values(shape.iter().product(), seed), shape, &Device::Cpu).unwrap()
}

/// Best seconds per call of `f` (one warm-up call) over at least `runs` calls and 0.5 s.
pub fn best(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut best = f64::MAX;
    let mut i = 0;
    while i < runs || start.elapsed().as_secs_f64() < 0.5 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        i += 1;
    }
    best
}
