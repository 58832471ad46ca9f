//! Reproducible inputs and the best-of timing loop that the kernels' benchmarks (and the
//! backends' benches and tests built on them) share, so every one of them measures the same data.

use std::time::Instant;

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
