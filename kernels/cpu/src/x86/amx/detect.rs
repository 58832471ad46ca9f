//! Whether this process may execute AMX-BF16 tile instructions: the CPU has them (CPUID), the
//! OS saves their state (XCR0), Linux lets this process use tile data (`arch_prctl`), and
//! `INFER_GGML_ISA` does not cap the kernels below them. Asked once per process (by
//! [`crate::cpu_features::amx_available`]); any "no" is logged at debug level and the products
//! stay on the `vdpbf16ps` tiles.

use crate::cpu_features::CpuFeatures;

/// CPUID.(EAX=7, ECX=0):EDX bits.
const CPUID7_EDX_AMX_BF16: u32 = 1 << 22;
const CPUID7_EDX_AMX_TILE: u32 = 1 << 24;
/// CPUID.1:ECX: the OS has enabled XSAVE, so `xgetbv` may run.
const CPUID1_ECX_OSXSAVE: u32 = 1 << 27;
/// XCR0 state components: tile configuration (17) and tile data (18).
const XCR0_TILE: u64 = (1 << 17) | (1 << 18);
/// Linux `arch_prctl` request for permission to use a dynamically enabled state component,
/// and that component's number for AMX tile data (asm/prctl.h, asm/fpu/types.h).
const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
const XFEATURE_XTILEDATA: libc::c_ulong = 18;

/// Whether the CPU and OS let this process run `ldtilecfg` / `tdpbf16ps` (the module doc's
/// conditions but the cap, which [`crate::cpu_features::amx_available`] applies and which keeps
/// this from being asked at all); on `Ok` the permission is granted, process-wide, so threads
/// that exist already (the pool's) get it too.
pub(crate) fn check(f: &CpuFeatures) -> Result<(), String> {
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 7 and leaf 1 are answered on every CPU
    // with AMX (an older CPU answers zeros for leaves it lacks, which reads as "no").
    #[allow(unused_unsafe)]
    let (leaf7, leaf1) = unsafe { (std::arch::x86_64::__cpuid_count(7, 0), std::arch::x86_64::__cpuid(1)) };
    if leaf7.edx & (CPUID7_EDX_AMX_TILE | CPUID7_EDX_AMX_BF16) != CPUID7_EDX_AMX_TILE | CPUID7_EDX_AMX_BF16 {
        return Err("the CPU has no AMX-TILE / AMX-BF16".into());
    }
    // The accumulators are stored through AVX-512 (every AMX CPU so far has it).
    if !f.avx512vl() {
        return Err("the CPU has no AVX-512 F/BW/VL".into());
    }
    if leaf1.ecx & CPUID1_ECX_OSXSAVE == 0 {
        return Err("the OS has not enabled XSAVE".into());
    }
    // SAFETY: OSXSAVE is set (checked above), so `xgetbv` with ECX = 0 reads XCR0 and cannot fault.
    let xcr0 = unsafe { xcr0() };
    if xcr0 & XCR0_TILE != XCR0_TILE {
        return Err(format!("the OS does not save tile state (XCR0 {xcr0:#x})"));
    }
    // SAFETY: arch_prctl with an integer argument; it only changes this process's permissions.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) };
    if r != 0 {
        return Err(format!("Linux refused tile data: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// XCR0, the state components the OS saves on a context switch.
///
/// # Safety
/// The CPU must report OSXSAVE (CPUID.1:ECX bit 27).
unsafe fn xcr0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller checked OSXSAVE; `xgetbv` reads a register and touches no memory.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    (hi as u64) << 32 | lo as u64
}
