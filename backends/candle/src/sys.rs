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
    #[allow(unused_mut)]
    let mut f = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            f.push("avx512f");
        }
        if std::is_x86_feature_detected!("avx512vnni") {
            f.push("avx512vnni");
        }
        if std::is_x86_feature_detected!("avx2") {
            f.push("avx2");
        }
        if std::is_x86_feature_detected!("fma") {
            f.push("fma");
        }
        if std::is_x86_feature_detected!("f16c") {
            f.push("f16c");
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        f.push("neon");
    }
    f
}

/// A `key:   1234 kB` line of a /proc file, in bytes.
fn proc_kb(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Process memory: active = resident set (VmRSS), peak = its high-water mark (VmHWM), total =
/// the machine's RAM (MemTotal). The CPU backend's tensors live in the process heap, so RSS is
/// the honest figure (it includes mmapped weights that were touched). 0 where unknown.
pub fn memory_stats() -> MemoryStats {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    MemoryStats {
        active_bytes: proc_kb(&status, "VmRSS").unwrap_or(0),
        peak_bytes: proc_kb(&status, "VmHWM").unwrap_or(0),
        device_total_bytes: proc_kb(&meminfo, "MemTotal").unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::proc_kb;

    #[test]
    fn parses_proc_lines() {
        let s = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(proc_kb(s, "VmRSS"), Some(1024 * 1024));
        assert_eq!(proc_kb(s, "VmHWM"), Some(2048 * 1024));
        assert_eq!(proc_kb(s, "VmSwap"), None);
    }
}
