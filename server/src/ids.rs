//! Response ids (`chatcmpl-…`) and timestamps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A fresh id: `prefix-` then the server's start time and a counter, unique per process.
pub fn new_id(prefix: &str) -> String {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start =
        *START.get_or_init(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0));
    format!("{prefix}-{start:x}{:06x}", NEXT.fetch_add(1, Ordering::Relaxed))
}
