//! Keeps freed memory in the process for the next tensor instead of handing it back to the
//! kernel. A model's forward pass allocates and frees tensors of the same few sizes over and over
//! (an audio codec's activations are 10–20 MB each); with glibc's defaults many of them are fresh
//! `mmap`s or trimmed heap, so every op pays first-touch page faults again. Measured on the
//! Qwen3-TTS codec decode (2 s of audio, 2 threads): ~20% faster, same peak RSS
//! (docs/benchmarks-log.md). A bf16 text model's prefill gains as much (Qwen3-0.6B's shape, 128
//! tokens, 2 threads on a Xeon with AMX: 128-140 -> 168-181 tok/s); a small GGUF model's
//! prefill and decode are unchanged. Text commands apply it once the model is loaded: applied
//! before, a GGUF model's load-time scratch (dequantized and repacked blocks, below the 32 MiB
//! threshold) stayed in the heap and raised peak RSS by 9-31 MB (Qwen2.5-Coder 0.5B: 627 -> 658
//! MB; after the load: 627). Audio commands apply it before the load, as they always have (a
//! Qwen3-TTS A/B of before vs after the load was within this host's noise, at the same peak
//! RSS). `infer serve` applies it once its models are loaded (`infer_server::serve_with`). A host
//! that embeds the library chooses for itself.

/// Large allocations below this stay on the heap (glibc caps the setting at 32 MiB on 64-bit).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 32 << 20;
/// Free memory at the heap's top is returned to the kernel only beyond this.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: i32 = 512 << 20;
/// Extra room requested whenever the heap grows, so growth comes in fewer, larger steps.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TOP_PAD: i32 = 64 << 20;

/// Applies the settings above unless the user tunes glibc's allocator through its own
/// `MALLOC_*_` environment variables (those win). Calling it again changes nothing.
pub fn keep_freed_memory_for_reuse() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::vars_os().any(|(k, _)| k.to_string_lossy().starts_with("MALLOC_")) {
            return;
        }
        // SAFETY: mallopt only changes allocator parameters (it takes the arena lock itself).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            libc::mallopt(libc::M_TOP_PAD, TOP_PAD);
        }
    }
}
