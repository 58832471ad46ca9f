//! Element types a tensor can hold, including GGML block-quantized weight formats.

use abi_stable::StableAbi;

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, StableAbi)]
pub enum DType {
    F32,
    F16,
    BF16,
    U8,
    U32,
    I64,
    /// GGML block quantizations: weights only, consumed by `Linear`/`Embedding` or dequantized.
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
}

impl DType {
    /// (elements per block, bytes per block); plain types are blocks of one element.
    pub fn block(self) -> (usize, usize) {
        match self {
            DType::F32 | DType::U32 => (1, 4),
            DType::F16 | DType::BF16 => (1, 2),
            DType::U8 => (1, 1),
            DType::I64 => (1, 8),
            DType::Q4_0 => (32, 18),
            DType::Q4_1 => (32, 20),
            DType::Q5_0 => (32, 22),
            DType::Q5_1 => (32, 24),
            DType::Q8_0 => (32, 34),
            DType::Q2K => (256, 84),
            DType::Q3K => (256, 110),
            DType::Q4K => (256, 144),
            DType::Q5K => (256, 176),
            DType::Q6K => (256, 210),
            DType::Q8K => (256, 292),
        }
    }

    pub fn is_quantized(self) -> bool {
        self.block().0 > 1
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes needed for `elements` values of this type (whole blocks).
    pub fn storage_bytes(self, elements: usize) -> usize {
        let (per_block, bytes) = self.block();
        elements.div_ceil(per_block) * bytes
    }

    /// [`DType::storage_bytes`] of a tensor of `shape`, `None` where the size overflows (shapes
    /// read from a file).
    pub fn checked_storage_bytes(self, shape: &[usize]) -> Option<usize> {
        let (per_block, bytes) = self.block();
        shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?.div_ceil(per_block).checked_mul(bytes)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q8_0 => "q8_0",
            DType::Q2K => "q2_k",
            DType::Q3K => "q3_k",
            DType::Q4K => "q4_k",
            DType::Q5K => "q5_k",
            DType::Q6K => "q6_k",
            DType::Q8K => "q8_k",
        }
    }

    /// The block formats a user may ask float linear weights to be quantized to at load.
    pub const LINEAR_QUANTS: [DType; 2] = [DType::Q8_0, DType::Q4K];

    /// A name of [`DType::LINEAR_QUANTS`] (`q8_0`, `q4_k`, case-insensitive), else an error
    /// listing them.
    pub fn parse_linear_quant(s: &str) -> crate::Result<DType> {
        let want = s.to_ascii_lowercase();
        Self::LINEAR_QUANTS.into_iter().find(|d| d.name() == want).ok_or_else(|| {
            let known: Vec<&str> = Self::LINEAR_QUANTS.iter().map(|d| d.name()).collect();
            crate::Error::invalid(format!("unknown quantization `{s}` (supported: {})", known.join(", ")))
        })
    }

    /// A GGML block format by its [`DType::name`] (`q4_k`, ...).
    pub fn parse_quantized(s: &str) -> Option<DType> {
        use DType::*;
        [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K, Q8K].into_iter().find(|d| d.name() == s)
    }

    /// The float dtypes a user may ask weights to be computed in.
    pub fn parse_float(s: &str) -> Option<DType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Some(DType::F32),
            "f16" | "float16" | "half" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            _ => None,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
