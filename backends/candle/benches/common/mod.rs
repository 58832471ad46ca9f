//! What the backend's benchmarks share: infer-cpu-kernels' reproducible inputs and best-of
//! timing loop, and the inputs as candle tensors.

// Each bench compiles this module for itself and uses part of it.
#![allow(dead_code)]

use candle_core::{Device, Tensor};

pub use infer_cpu_kernels::bench_inputs::{best, values};

/// An f32 CPU tensor of `shape` holding [`values`].
pub fn tensor(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(values(shape.iter().product(), seed), shape, &Device::Cpu).unwrap()
}
