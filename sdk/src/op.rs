//! The tensor op set models are written against. One enum, so a backend implements one
//! `exec` entry point and a plugin library crossing costs one call per op.
//!
//! Shapes follow PyTorch conventions. Binary ops broadcast. Activations are `[batch, seq, hidden]`,
//! attention tensors `[batch, heads, seq, head_dim]`.

use abi_stable::{std_types::RSlice, StableAbi};

use crate::DType;

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Recip,
    Abs,
    Sqr,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Silu,
    /// GELU with the tanh approximation (Gemma, GPT-2).
    GeluTanh,
    /// Exact GELU (erf).
    GeluErf,
}

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
}

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    /// Index of the maximum, as u32.
    ArgMax,
    ArgMin,
}

/// Rotary embedding layouts: `Interleaved` rotates pairs (x0,x1),(x2,x3)...; `SplitHalf` rotates
/// (x_i, x_{i+d/2}) as in the HF "rotate_half" convention (Llama, Qwen, Gemma checkpoints).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum RopeLayout {
    Interleaved,
    SplitHalf,
}

/// One operation. Inputs are passed beside it, in the order each variant documents.
#[repr(C, u8)]
#[derive(Debug, Clone, Copy, StableAbi)]
pub enum Op<'a> {
    /// `[x]` -> f(x)
    Unary(UnaryOp),
    /// `[a, b]` -> a ∘ b, broadcasting.
    Binary(BinaryOp),
    /// `[a, b]` -> u8 mask, broadcasting.
    Compare(CmpOp),
    /// `[x]` -> x * mul + add
    Affine { mul: f64, add: f64 },
    /// `[x]` -> x ^ exponent
    Powf { exponent: f64 },
    /// `[x]` -> clamp(x, min, max)
    Clamp { min: f64, max: f64 },
    /// `[cond(u8), on_true, on_false]` -> select, broadcasting.
    Where,
    /// `[x]` -> x as dtype (float <-> float, ints <-> floats). A float matrix (out, in) to a GGML
    /// block dtype quantizes it for `Linear` (`in` a multiple of the block); a backend without
    /// kernels for that format (`supports_dtype` false) answers unsupported.
    ToDType(DType),
    /// `[x]` -> same data, new shape (row-major).
    Reshape(RSlice<'a, usize>),
    /// `[x]` -> axes permuted.
    Permute(RSlice<'a, usize>),
    /// `[x]` -> x broadcast to shape.
    BroadcastTo(RSlice<'a, usize>),
    /// `[x]` -> x[.., start..start+len, ..] along dim.
    Narrow { dim: usize, start: usize, len: usize },
    /// `[x0, x1, ...]` -> concatenation along dim.
    Concat { dim: usize },
    /// `[x]` -> row-major copy (no-op when already contiguous).
    Contiguous,
    /// `[x, ids(u32)]` -> x gathered along dim by the 1-D ids.
    IndexSelect { dim: usize },
    /// `[x, ids(u32)]` -> `out[i][j] = x[i][ids[i][j]]` along dim (ids same rank as x).
    Gather { dim: usize },
    /// `[x]` -> reduction along dim. Sum of integers is i64 (PyTorch); Mean of integers is an
    /// error; ArgMax/ArgMin give the first extreme index as u32.
    Reduce { op: ReduceOp, dim: usize, keepdim: bool },
    /// `[x]` -> softmax along the last dim, computed in f32, returned in x's dtype.
    Softmax,
    /// `[x]` -> log-softmax along the last dim.
    LogSoftmax,
    /// `[x]` -> inclusive cumulative sum along dim (floats keep their dtype, integers give i64).
    Cumsum { dim: usize },
    /// `[x]` -> u32 indices that sort x along the last dim.
    ArgSort { descending: bool },
    /// `[a, b]` -> a @ b with batch dims broadcast.
    Matmul,
    /// `[x, w(out,in) (may be quantized), bias?]` -> x @ wᵀ + bias
    Linear,
    /// `[ids(u32), table(vocab,dim) (may be quantized)]` -> rows, shape `ids.shape + [dim]`
    Embedding,
    /// `[x, weight]` -> x / rms(x) * weight, over the last dim.
    RmsNorm { eps: f32 },
    /// `[x, weight, bias?]` -> layer norm over the last dim.
    LayerNorm { eps: f32 },
    /// `[x(b,h,t,d), cos(t,d/2), sin(t,d/2)]` -> rotated x.
    Rope(RopeLayout),
    /// `[q(b,hq,tq,d), k(b,hkv,tk,d), v(b,hkv,tk,dv), mask?]` -> (b,hq,tq,dv).
    /// `hq` must be a multiple of `hkv` (grouped-query attention). With `causal`, query i sits at
    /// absolute position `tk - tq + i`; `window` limits each query to the last `window` keys; an
    /// explicit additive mask (broadcastable to (b,hq,tq,tk)) is added to the scores; a positive
    /// `softcap` applies `softcap * tanh(s / softcap)` to the scores. The output has q's dtype.
    /// k and v share a float dtype, which may differ from q's (a KV cache stored in f16): the
    /// products then take their inputs at the cache's precision, q rounded to it (backends may
    /// also round the probabilities to it, as half-precision matmuls do), accumulating in f32.
    Attention { scale: f32, causal: bool, window: usize, softcap: f32 },
    /// `[x(b,cin,l), w(cout,cin/groups,k), bias?]` -> (b,cout,l')
    Conv1d { stride: usize, padding: usize, dilation: usize, groups: usize },
    /// `[x(b,cin,l), w(cin,cout/groups,k), bias?]` -> (b,cout,l')
    ConvTranspose1d { stride: usize, padding: usize, output_padding: usize, dilation: usize, groups: usize },
    /// `[dst, src]` -> dst with src written at `start` along dim. Backends may write in place: the
    /// caller must treat `dst` as consumed (KV caches use this).
    SliceAssign { dim: usize, start: usize },
    /// `[x(b,c,t), alpha, inv_beta]` -> `x + inv_beta · sin²(alpha · x)` per channel (dim 1): the
    /// Snake / SnakeBeta activation of audio codecs (BigVGAN, DAC), its factors given as values
    /// (`alpha`, `inv_beta`: c values each, any shape). The result is the composition's, each
    /// step rounded to x's dtype in that order (`mul`, `sin`, `sqr`, `mul`, `add`); one pass
    /// over x instead of five.
    Snake,
}

impl Op<'_> {
    /// (min, max) number of inputs the op takes.
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Binary(_) | Op::Compare(_) | Op::IndexSelect { .. } | Op::Gather { .. } | Op::Matmul => (2, 2),
            Op::Embedding | Op::RmsNorm { .. } | Op::SliceAssign { .. } => (2, 2),
            Op::Where | Op::Rope(_) | Op::Snake => (3, 3),
            Op::Linear | Op::LayerNorm { .. } | Op::Conv1d { .. } | Op::ConvTranspose1d { .. } => (2, 3),
            Op::Attention { .. } => (3, 4),
            Op::Concat { .. } => (1, usize::MAX),
            _ => (1, 1),
        }
    }

    /// An error unless `n` inputs fit the op's arity; `operands` describes them for the message
    /// (called only on failure, so the check costs nothing per op).
    pub fn check_arity(&self, n: usize, operands: impl FnOnce() -> String) -> crate::Result<()> {
        let (min, max) = self.arity();
        if (min..=max).contains(&n) {
            return Ok(());
        }
        let want = if min == max { format!("{min}") } else { format!("{min} to {max}") };
        Err(crate::Error::invalid(format!("{}: takes {want} inputs, got {n} ({})", self.name(), operands())))
    }

    /// Short name for errors and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(_) => "unary",
            Op::Binary(_) => "binary",
            Op::Compare(_) => "compare",
            Op::Affine { .. } => "affine",
            Op::Powf { .. } => "powf",
            Op::Clamp { .. } => "clamp",
            Op::Where => "where",
            Op::ToDType(_) => "to_dtype",
            Op::Reshape(_) => "reshape",
            Op::Permute(_) => "permute",
            Op::BroadcastTo(_) => "broadcast_to",
            Op::Narrow { .. } => "narrow",
            Op::Concat { .. } => "concat",
            Op::Contiguous => "contiguous",
            Op::IndexSelect { .. } => "index_select",
            Op::Gather { .. } => "gather",
            Op::Reduce { .. } => "reduce",
            Op::Softmax => "softmax",
            Op::LogSoftmax => "log_softmax",
            Op::Cumsum { .. } => "cumsum",
            Op::ArgSort { .. } => "argsort",
            Op::Matmul => "matmul",
            Op::Linear => "linear",
            Op::Embedding => "embedding",
            Op::RmsNorm { .. } => "rms_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::Rope(_) => "rope",
            Op::Attention { .. } => "attention",
            Op::Conv1d { .. } => "conv1d",
            Op::ConvTranspose1d { .. } => "conv_transpose1d",
            Op::SliceAssign { .. } => "slice_assign",
            Op::Snake => "snake",
        }
    }
}

/// Operand descriptions (`f32[1, 4]`, ...) as one bracketed list for error messages.
pub fn describe_operands(described: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", described.into_iter().collect::<Vec<_>>().join(", "))
}
