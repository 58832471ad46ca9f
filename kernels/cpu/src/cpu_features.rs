//! The one place that asks the CPU (and `INFER_GGML_ISA`) what the kernels may run. Detected
//! once per process into [`CpuFeatures`]; every kernel family dispatches on these answers.
//!
//! `INFER_GGML_ISA` caps the kernels, read once: `scalar` (no SIMD), `avx2` (no AVX-512),
//! `avx512` (no AMX; the same as unset for everything below AMX). Any other value, or none,
//! caps nothing. The cap applies to the GGML, bf16 matvec, bf16 product and f32 tile kernels
//! ([`isa`], [`amx_available`]); the conversion and elementwise kernels follow the CPU alone.

use std::sync::OnceLock;

/// The instruction sets the capped kernels are written for, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL/VNNI on top of `Avx2`.
    Avx512,
}

/// What this CPU has, as detected (no cap applied), plus the capped [`Isa`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub bmi2: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512vnni: bool,
    pub avx512bf16: bool,
    /// The `INFER_GGML_ISA` value, when it is one of the caps (`scalar`, `avx2`, `avx512`).
    pub cap: Option<Isa>,
}

/// The features of this CPU, detected on first use.
#[inline]
pub fn features() -> &'static CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    FEATURES.get_or_init(|| CpuFeatures { cap: cap_from(std::env::var("INFER_GGML_ISA").ok().as_deref()), ..detect() })
}

/// `INFER_GGML_ISA`'s meaning: which cap a value sets.
fn cap_from(value: Option<&str>) -> Option<Isa> {
    match value {
        Some("scalar") => Some(Isa::Scalar),
        Some("avx2") => Some(Isa::Avx2),
        Some("avx512") => Some(Isa::Avx512),
        _ => None,
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::is_x86_feature_detected as has;
    CpuFeatures {
        avx2: has!("avx2"),
        fma: has!("fma"),
        f16c: has!("f16c"),
        bmi2: has!("bmi2"),
        avx512f: has!("avx512f"),
        avx512bw: has!("avx512bw"),
        avx512vl: has!("avx512vl"),
        avx512vnni: has!("avx512vnni"),
        avx512bf16: has!("avx512bf16"),
        cap: None,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

impl CpuFeatures {
    /// The best [`Isa`] this CPU has, before the cap.
    #[inline]
    pub fn detected_isa(&self) -> Isa {
        if !(self.avx2 && self.fma && self.f16c) {
            Isa::Scalar
        } else if self.avx512f && self.avx512bw && self.avx512vl && self.avx512vnni {
            Isa::Avx512
        } else {
            Isa::Avx2
        }
    }

    /// The detected [`Isa`] under the cap.
    #[inline]
    pub fn isa(&self) -> Isa {
        self.detected_isa().min(self.cap.unwrap_or(Isa::Avx512))
    }

    /// AVX2 and FMA: the f32 row kernels (matvec, direct convolutions, f32 tiles).
    #[inline]
    pub fn fma(&self) -> bool {
        self.avx2 && self.fma
    }

    /// AVX2, FMA and F16C: the f16 row kernels.
    #[inline]
    pub fn f16c(&self) -> bool {
        self.fma() && self.f16c
    }

    /// AVX-512 F/BW: the 512-bit builds of the slice kernels.
    #[inline]
    pub fn avx512(&self) -> bool {
        self.avx512f && self.avx512bw
    }

    /// AVX-512 F/BW/VL: masked row stores and the AMX accumulators' stores.
    #[inline]
    pub fn avx512vl(&self) -> bool {
        self.avx512() && self.avx512vl
    }

    /// AVX-512 F/BW/BF16 (`vdpbf16ps`), uncapped.
    #[inline]
    pub fn avx512bf16(&self) -> bool {
        self.avx512() && self.avx512bf16
    }
}

/// The best capped instruction set of this process (see the module doc).
#[inline]
pub fn isa() -> Isa {
    features().isa()
}

/// True once this process may run AMX-BF16 tiles: the CPU and OS allow them (see
/// [`crate::x86::amx::detect`]) and `INFER_GGML_ISA` sets no cap.
pub fn amx_available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static OK: OnceLock<bool> = OnceLock::new();
        *OK.get_or_init(|| {
            let why = match features().cap {
                Some(cap) => Err(format!("INFER_GGML_ISA={} caps the kernels below AMX", cap_name(cap))),
                None => crate::x86::amx::detect::check(features()),
            };
            match why {
                Ok(()) => true,
                Err(why) => {
                    tracing::debug!("AMX-BF16 tiles not used: {why}");
                    false
                }
            }
        })
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn cap_name(cap: Isa) -> &'static str {
    match cap {
        Isa::Scalar => "scalar",
        Isa::Avx2 => "avx2",
        Isa::Avx512 => "avx512",
    }
}

/// The SIMD extensions a device description lists, widest first.
pub fn simd_names() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut names = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let f = features();
        for (has, name) in
            [(f.avx512f, "avx512f"), (f.avx512vnni, "avx512vnni"), (f.avx2, "avx2"), (f.fma, "fma"), (f.f16c, "f16c")]
        {
            if has {
                names.push(name);
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    names.push("neon");
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_keep_their_meaning() {
        assert_eq!(cap_from(Some("scalar")), Some(Isa::Scalar));
        assert_eq!(cap_from(Some("avx2")), Some(Isa::Avx2));
        assert_eq!(cap_from(Some("avx512")), Some(Isa::Avx512));
        assert_eq!(cap_from(Some("AVX2")), None);
        assert_eq!(cap_from(None), None);
        let all = CpuFeatures {
            avx2: true,
            fma: true,
            f16c: true,
            avx512f: true,
            avx512bw: true,
            avx512vl: true,
            avx512vnni: true,
            ..CpuFeatures::default()
        };
        assert_eq!(all.isa(), Isa::Avx512);
        assert_eq!(CpuFeatures { cap: Some(Isa::Avx2), ..all }.isa(), Isa::Avx2);
        assert_eq!(CpuFeatures { cap: Some(Isa::Scalar), ..all }.isa(), Isa::Scalar);
        assert_eq!(CpuFeatures { f16c: false, ..all }.isa(), Isa::Scalar);
        assert_eq!(CpuFeatures { avx512vnni: false, ..all }.isa(), Isa::Avx2);
    }
}
