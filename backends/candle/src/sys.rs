//! Device description and memory figures of the CPU the backend runs on.

use infer_core::{DeviceInfo, DeviceKind, MemoryStats};

/// "cpu (2 threads, avx512f avx2 fma f16c)": candle's thread count and the SIMD levels its
/// kernels pick at run time.
pub fn device_info() -> DeviceInfo {
    let threads = candle_core::utils::get_num_threads();
    let simd = simd_features();
    let description = if simd.is_empty() {
        format!("cpu ({threads} threads)")
    } else {
        format!("cpu ({threads} threads, {})", simd.join(" "))
    };
    DeviceInfo { kind: DeviceKind::Cpu, ordinal: 0, description: description.into() }
}

fn simd_features() -> Vec<&'static str> {
    infer_cpu_kernels::cpu_features::simd_names()
}

/// Process memory (the CPU backend's tensors live in the process heap, so RSS is the honest
/// figure; it includes mmapped weights that were touched).
pub fn memory_stats() -> MemoryStats {
    infer_core::process_memory::process_memory()
}
