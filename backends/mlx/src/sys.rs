//! Devices, the process-wide MLX lock, and memory figures.

use std::sync::{Mutex, MutexGuard};

use infer_core::{DeviceInfo, DeviceKind, Error, MemoryStats, Result};
use mlx_rs::{Device, Stream};

/// Serializes every MLX call of the process: MLX arrays are not safe to build from or evaluate
/// on several threads at once (see `tensor::MlxTensor`). Uncontended, a lock costs tens of
/// nanoseconds per op, next to the microseconds MLX spends adding a node.
pub fn mlx_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether MLX has a Metal GPU here (Apple silicon with the Metal build of MLX).
pub fn metal_available() -> bool {
    let mut res = false;
    // SAFETY: writes one bool.
    let status = unsafe { mlx_sys::mlx_metal_is_available(&mut res) };
    status == 0 && res
}

/// The one line for a GPU asked for where MLX has none.
pub fn no_gpu_reason(asked: &str) -> String {
    if cfg!(target_os = "macos") {
        format!(
            "mlx: device `{asked}`: MLX sees no Metal GPU on this Mac (Metal needs Apple silicon and the Metal build of \
             MLX); use --backend mlx --device cpu"
        )
    } else {
        format!(
            "mlx: device `{asked}`: Metal needs macOS on Apple silicon; this MLX is the CPU build: use --backend mlx \
             --device cpu (or --backend candle)"
        )
    }
}

/// The MLX device and its default stream for an infer device name: "" (the GPU where MLX has
/// one, else the CPU), "cpu", "gpu" / "metal" (the Metal GPU).
pub fn select_device(name: &str) -> Result<(DeviceKind, Stream)> {
    let name = name.trim();
    let gpu = match name {
        "" => metal_available(),
        "cpu" | "cpu:0" => false,
        "gpu" | "gpu:0" | "metal" | "metal:0" => {
            if !metal_available() {
                return Err(Error::unsupported(no_gpu_reason(name)));
            }
            true
        }
        other => {
            return Err(Error::unsupported(format!(
                "mlx drives the CPU and the Metal GPU (--device cpu|gpu); device `{other}` needs another backend"
            )))
        }
    };
    let (kind, device) = if gpu { (DeviceKind::Metal, Device::gpu()) } else { (DeviceKind::Cpu, Device::cpu()) };
    let stream = Stream::try_default_on_device(&device)
        .map_err(|e| Error::backend(format!("mlx: no stream on {}: {}", kind.name(), e.what())))?;
    Ok((kind, stream))
}

/// MLX's version string, e.g. "0.32.2".
pub fn mlx_version() -> String {
    // SAFETY: an mlx_string is created, read and freed here.
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        let v = if mlx_sys::mlx_version(&mut s) == 0 {
            let p = mlx_sys::mlx_string_data(s);
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        } else {
            String::new()
        };
        mlx_sys::mlx_string_free(s);
        v
    }
}

pub fn device_info(kind: DeviceKind) -> DeviceInfo {
    let description = match kind {
        DeviceKind::Metal => format!("metal gpu (MLX {})", mlx_version()),
        _ if cfg!(target_os = "macos") => format!("cpu (MLX {}, Accelerate)", mlx_version()),
        _ => format!("cpu (MLX {} CPU build)", mlx_version()),
    };
    DeviceInfo { kind, ordinal: 0, description: description.into() }
}

/// MLX's own allocator figures (active, peak); the total is the machine's memory (unified on
/// Apple silicon).
pub fn memory_stats() -> MemoryStats {
    let _guard = mlx_lock();
    let total = infer_core::process_memory::process_memory().device_total_bytes;
    MemoryStats {
        active_bytes: mlx_rs::memory::active_memory().unwrap_or(0) as u64,
        peak_bytes: mlx_rs::memory::peak_memory().unwrap_or(0) as u64,
        device_total_bytes: total,
    }
}
