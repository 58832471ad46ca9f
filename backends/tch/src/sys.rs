//! libtorch process settings (intra-op threads), device descriptions and memory figures.

use std::sync::OnceLock;

use infer_core::{DeviceInfo, DeviceKind, MemoryStats};

/// Environment variable that sets libtorch's intra-op (OpenMP) thread count.
pub const THREADS_ENV: &str = "INFER_TCH_THREADS";

/// The intra-op thread count the backend runs with, set once per process (libtorch's setting
/// is global): `$INFER_TCH_THREADS` when set to a positive number, else [`default_threads`].
pub fn configure_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let n = std::env::var(THREADS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(default_threads);
        tch::set_num_threads(n as i32);
        n
    })
}

/// Half-precision products on CUDA accumulate in f32 to the end, as on the CPU: PyTorch lets
/// cuBLAS reduce split-K partial sums in bf16/f16 by default (`torch.backends.cuda.matmul.
/// allow_bf16_reduced_precision_reduction`), the suspected cause of a bf16 linear of 333 inputs
/// 0.031 off candle's on an H100. Split-K itself stays allowed. Set once per process: the setting
/// is libtorch's global state (any other libtorch user in the process sees it too); a no-op for
/// the CPU kernels. Itanium C++ ABI targets only (Linux, macOS); elsewhere nothing is set.
#[cfg(not(target_env = "msvc"))]
pub fn configure_half_reductions() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let ctx = at_context();
        // SAFETY: the setters take (allow_reduced_precision, allow_splitk); (false, true) is a
        // combination they accept (only reduced precision without split-K is refused), so they
        // return without throwing.
        unsafe {
            at_set_allow_bf16_reduction_cublas(ctx, false, true);
            at_set_allow_fp16_reduction_cublas(ctx, false, true);
        }
    });
}

#[cfg(target_env = "msvc")]
pub fn configure_half_reductions() {}

/// libtorch's cuBLAS reduction settings for (bf16, f16): 0 reduced precision allowed, 1 f32
/// reductions with split-K, 2 f32 reductions without (`at::CuBLASReductionOption`).
#[cfg(not(target_env = "msvc"))]
pub fn half_reduction_options() -> (u8, u8) {
    let ctx = at_context();
    // SAFETY: const getters of the global context, returning a one-byte enum.
    unsafe { (at_allow_bf16_reduction_cublas(ctx), at_allow_fp16_reduction_cublas(ctx)) }
}

#[cfg(not(target_env = "msvc"))]
fn at_context() -> *mut std::ffi::c_void {
    // SAFETY: at::globalContext() returns a reference to a process-wide static.
    unsafe { at_global_context() }
}

// libtorch's C++ API for the settings tch does not wrap, by their (Itanium ABI) symbol names: a
// non-virtual member function takes `this` first; these are in libtorch_cpu (torch 2.11 and 2.13
// have the same signatures), which torch-sys links, so changed parameters fail the link (return
// types are not in the names: the unit test reads the setting back). "C-unwind": a C++ exception
// would unwind defined, though these never throw for the arguments passed.
#[cfg(not(target_env = "msvc"))]
extern "C-unwind" {
    #[link_name = "_ZN2at13globalContextEv"]
    fn at_global_context() -> *mut std::ffi::c_void;
    #[link_name = "_ZN2at7Context27setAllowBF16ReductionCuBLASEbb"]
    fn at_set_allow_bf16_reduction_cublas(ctx: *mut std::ffi::c_void, allow_reduced: bool, allow_splitk: bool);
    #[link_name = "_ZN2at7Context27setAllowFP16ReductionCuBLASEbb"]
    fn at_set_allow_fp16_reduction_cublas(ctx: *mut std::ffi::c_void, allow_reduced: bool, allow_splitk: bool);
    #[link_name = "_ZNK2at7Context24allowBF16ReductionCuBLASEv"]
    fn at_allow_bf16_reduction_cublas(ctx: *mut std::ffi::c_void) -> u8;
    #[link_name = "_ZNK2at7Context24allowFP16ReductionCuBLASEv"]
    fn at_allow_fp16_reduction_cublas(ctx: *mut std::ffi::c_void) -> u8;
}

/// The default intra-op thread count: one fewer than the cores this process may use, at least
/// one (docs/backends/tch.md has the measurements). libtorch's OpenMP workers spin at every
/// barrier; with as many workers as cores, a single other busy process (a build, the tokenizer
/// thread, a second model) stalls each barrier until the OS reschedules the preempted worker,
/// and decode speed collapses (PEERS.md: 2 threads on 2 cores collapse when another process
/// holds one). Leaving one core free costs little when the machine is idle: decode is
/// memory-bound and one core less still saturates most of the bandwidth on larger machines.
pub fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    cores.saturating_sub(1).max(1)
}

/// Whether this build force-linked libtorch_cuda (see build.rs): without it libtorch has no CUDA
/// kernels at all.
pub fn cuda_linked() -> bool {
    option_env!("INFER_TCH_CUDA_LINKED") == Some("1")
}

/// One line saying why no CUDA device can be used.
pub fn no_cuda_reason() -> String {
    if cuda_linked() {
        "tch: no CUDA device: libtorch sees 0 GPUs (no NVIDIA GPU or driver here); use the CPU (--backend tch or candle)"
            .to_string()
    } else {
        format!(
            "tch: no CUDA device: this build has no libtorch_cuda (the libtorch at {} lacks the CUDA libraries it \
             needs, as the lean install does); on a GPU machine install the full wheel (INFER_LIBTORCH_FULL=1 \
             tools/setup_libtorch.sh) and rebuild; use the CPU (--backend tch or candle) here",
            option_env!("INFER_TCH_LIBTORCH_LIB").unwrap_or("$LIBTORCH/lib")
        )
    }
}

/// CUDA devices libtorch sees (0 without a driver or GPU, or with a CPU-only libtorch).
pub fn cuda_device_count() -> usize {
    std::panic::catch_unwind(|| tch::Cuda::device_count().max(0) as usize).unwrap_or(0)
}

pub fn device_info(device: tch::Device) -> DeviceInfo {
    let threads = tch::get_num_threads();
    match device {
        tch::Device::Cuda(i) => DeviceInfo {
            kind: DeviceKind::Cuda,
            ordinal: i as u32,
            description: format!("cuda:{i} (libtorch, {} visible devices, cuDNN {})", cuda_device_count(), cudnn())
                .into(),
        },
        _ => DeviceInfo {
            kind: DeviceKind::Cpu,
            ordinal: 0,
            description: format!("cpu (libtorch, {threads} intra-op threads)").into(),
        },
    }
}

fn cudnn() -> &'static str {
    if tch::Cuda::cudnn_is_available() {
        "yes"
    } else {
        "no"
    }
}

/// Process memory: active = resident set, peak = its high-water mark, total = the machine's RAM.
/// On CUDA this is host memory too (tch exposes no CUDA allocator statistics).
pub fn memory_stats() -> MemoryStats {
    infer_core::process_memory::process_memory()
}

#[cfg(test)]
mod tests {
    #[cfg(not(target_env = "msvc"))]
    #[test]
    fn half_reductions_are_set_to_f32_with_split_k() {
        super::configure_half_reductions();
        assert_eq!(super::half_reduction_options(), (1, 1));
    }

    #[test]
    fn default_threads_leave_a_core() {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        assert_eq!(super::default_threads(), cores.saturating_sub(1).max(1));
    }
}
