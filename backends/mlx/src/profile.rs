//! The cost of the lazy graph, measured: with `INFER_MLX_PROFILE=1` the backend counts the ops
//! a step adds and the time spent adding them (graph building, through the plugin boundary)
//! against the time spent evaluating, and prints one line per evaluation (an `eval` call or a
//! read-back: the step boundary) to stderr. Off, it costs one relaxed load per op.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

static OPS: AtomicU64 = AtomicU64::new(0);
static BUILD_NS: AtomicU64 = AtomicU64::new(0);

pub fn enabled() -> bool {
    static ON: OnceLock<AtomicBool> = OnceLock::new();
    ON.get_or_init(|| AtomicBool::new(std::env::var("INFER_MLX_PROFILE").is_ok_and(|v| v == "1")))
        .load(Ordering::Relaxed)
}

/// Runs `f` (adding one op to the graph), counting it.
pub fn op<T>(f: impl FnOnce() -> T) -> T {
    if !enabled() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    OPS.fetch_add(1, Ordering::Relaxed);
    BUILD_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

/// Runs `f` (an evaluation), then prints and resets the step's figures.
pub fn evaluation<T>(what: &str, f: impl FnOnce() -> T) -> T {
    if !enabled() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let eval_us = t.elapsed().as_secs_f64() * 1e6;
    let ops = OPS.swap(0, Ordering::Relaxed);
    let build_us = BUILD_NS.swap(0, Ordering::Relaxed) as f64 / 1e3;
    eprintln!("mlx {what}: {ops} ops, graph building {build_us:.0} us, evaluation {eval_us:.0} us");
    r
}
