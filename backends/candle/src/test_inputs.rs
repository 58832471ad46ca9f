//! The unit tests' seeded inputs: the benches' (infer-cpu-kernels' `bench_inputs`), as slices
//! and as candle tensors.

use candle_core::{Device, Tensor};

pub use infer_cpu_kernels::bench_inputs::values;

/// An f32 CPU tensor of `shape` holding [`values`].
pub fn tensor(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(values(shape.iter().product(), seed), shape, &Device::Cpu).unwrap()
}
