//! This process's memory as the kernel reports it (`/proc/self/status`, `/proc/meminfo`): what
//! CPU backends, whose tensors live in the process, give as their memory figures.

use crate::backend::MemoryStats;

/// A `key:   1234 kB` line of a /proc file, in bytes.
fn proc_kb(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Active = resident set (VmRSS), peak = its high-water mark (VmHWM), total = the machine's RAM
/// (MemTotal). RSS includes the pages of memory-mapped weights that were touched, which is the
/// honest figure for a CPU backend. 0 where unknown (not Linux).
pub fn process_memory() -> MemoryStats {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    MemoryStats {
        active_bytes: proc_kb(&status, "VmRSS").unwrap_or(0),
        peak_bytes: proc_kb(&status, "VmHWM").unwrap_or(0),
        device_total_bytes: proc_kb(&meminfo, "MemTotal").unwrap_or(0),
    }
}

/// Hands the allocator's free pages back to the system. Loading a model parses metadata and
/// builds tables it then frees (a GGUF vocabulary is hundreds of thousands of small strings);
/// glibc keeps such memory resident inside its heap until asked, where it counts in the process's
/// RSS for the whole run. Elsewhere a no-op.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns unused heap pages; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
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
