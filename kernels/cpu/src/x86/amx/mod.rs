//! AMX-BF16 tiles (Linux, where the OS grants tile data to the process).

pub(crate) mod detect;
pub mod gemm;
