//! `Tensor`: the value models compute with. A cheap handle on a backend tensor plus the backend
//! that owns it; every method is one op of the op set (see [`crate::Op`]).

use abi_stable::{
    std_types::{RArc, RSlice},
    StableAbi,
};

use crate::backend::{lift, Backend, TensorObj};
use crate::op::{BinaryOp, CmpOp, Op, ReduceOp, RopeLayout, UnaryOp};
use crate::{DType, Error, Result};

#[repr(C)]
#[derive(Clone, StableAbi)]
pub struct Tensor {
    raw: RArc<TensorObj>,
    backend: Backend,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {})", self.dims(), self.dtype())
    }
}

impl Tensor {
    pub fn from_raw(raw: TensorObj, backend: &Backend) -> Self {
        Tensor { raw: RArc::new(raw), backend: backend.clone() }
    }

    pub fn raw(&self) -> &TensorObj {
        &self.raw
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    pub fn dims(&self) -> &[usize] {
        self.raw.shape().into()
    }

    pub fn rank(&self) -> usize {
        self.dims().len()
    }

    /// Size of `dim`; negative counts from the end.
    pub fn dim(&self, dim: isize) -> usize {
        self.dims()[self.axis(dim)]
    }

    pub fn elem_count(&self) -> usize {
        self.dims().iter().product()
    }

    pub fn dtype(&self) -> DType {
        self.raw.dtype()
    }

    fn axis(&self, dim: isize) -> usize {
        if dim < 0 {
            (self.rank() as isize + dim) as usize
        } else {
            dim as usize
        }
    }

    // ---- creation -------------------------------------------------------------------------

    pub fn from_bytes(backend: &Backend, bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Self> {
        let numel: usize = shape.iter().product();
        let want = dtype.storage_bytes(numel);
        if bytes.len() != want {
            return Err(Error::Shape(format!(
                "{} bytes for a {dtype} tensor of shape {shape:?} (expected {want})",
                bytes.len()
            )));
        }
        let raw = lift(backend.obj().from_bytes(bytes.into(), dtype, shape.into()))?;
        Ok(Self::from_raw(raw, backend))
    }

    /// A tensor from `bytes` of float `dtype`, converted to the float dtype `to` (or quantized
    /// to the block format `to`) in one pass (see [`crate::BackendImpl::from_bytes_as`]).
    pub fn from_bytes_as(backend: &Backend, bytes: &[u8], dtype: DType, to: DType, shape: &[usize]) -> Result<Self> {
        let numel: usize = shape.iter().product();
        let want = dtype.storage_bytes(numel);
        if bytes.len() != want {
            return Err(Error::Shape(format!(
                "{} bytes for a {dtype} tensor of shape {shape:?} (expected {want})",
                bytes.len()
            )));
        }
        if !dtype.is_float() || !(to.is_float() || to.is_quantized()) {
            return Err(Error::invalid(format!("from_bytes_as converts floats only, not {dtype} to {to}")));
        }
        let raw = lift(backend.obj().from_bytes_as(bytes.into(), dtype, to, shape.into()))?;
        Ok(Self::from_raw(raw, backend))
    }

    /// A tensor of `owner.bytes()[start..end]`, which the backend may keep in place (see
    /// [`crate::BackendImpl::from_shared`]).
    pub fn from_shared(
        backend: &Backend,
        owner: crate::backend::SharedBytes,
        start: usize,
        end: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Self> {
        let numel: usize = shape.iter().product();
        let want = dtype.storage_bytes(numel);
        let have = owner.bytes().len();
        if start > end || end > have || end - start != want {
            return Err(Error::Shape(format!(
                "bytes {start}..{end} (of {have}) for a {dtype} tensor of shape {shape:?} (expected {want})"
            )));
        }
        let raw = lift(backend.obj().from_shared(owner, start, end, dtype, shape.into()))?;
        Ok(Self::from_raw(raw, backend))
    }

    pub fn from_f32(backend: &Backend, data: &[f32], shape: &[usize]) -> Result<Self> {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::from_bytes(backend, &bytes, DType::F32, shape)
    }

    pub fn from_u32(backend: &Backend, data: &[u32], shape: &[usize]) -> Result<Self> {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::from_bytes(backend, &bytes, DType::U32, shape)
    }

    pub fn full(backend: &Backend, value: f64, dtype: DType, shape: &[usize]) -> Result<Self> {
        let raw = lift(backend.obj().full(value, dtype, shape.into()))?;
        Ok(Self::from_raw(raw, backend))
    }

    pub fn zeros(backend: &Backend, dtype: DType, shape: &[usize]) -> Result<Self> {
        Self::full(backend, 0.0, dtype, shape)
    }

    /// `start, start+1, ..` as f32 values.
    pub fn arange_f32(backend: &Backend, start: f32, len: usize) -> Result<Self> {
        let v: Vec<f32> = (0..len).map(|i| start + i as f32).collect();
        Self::from_f32(backend, &v, &[len])
    }

    // ---- read back ------------------------------------------------------------------------

    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(lift(self.backend.obj().to_bytes(&self.raw))?.into_vec())
    }

    /// All values as f32 (row-major), converting from any float dtype.
    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        let t = if self.dtype() == DType::F32 { self.clone() } else { self.to_dtype(DType::F32)? };
        Ok(words_from_le::<f32>(&t.to_bytes()?))
    }

    pub fn to_vec_u32(&self) -> Result<Vec<u32>> {
        let t = if self.dtype() == DType::U32 { self.clone() } else { self.to_dtype(DType::U32)? };
        Ok(words_from_le::<u32>(&t.to_bytes()?))
    }

    // ---- the op set -------------------------------------------------------------------------

    /// Runs one op with `inputs` (which must all live on `self`'s backend).
    pub fn exec(backend: &Backend, op: Op<'_>, inputs: &[&Tensor]) -> Result<Tensor> {
        if inputs.is_empty() {
            return Err(Error::backend(format!("{}: no inputs", op.name())));
        }
        let raws: Vec<&TensorObj>;
        let small;
        let slice: &[&TensorObj] = if inputs.len() <= 4 {
            let mut a: [&TensorObj; 4] = [inputs[0].raw(); 4];
            for (slot, t) in a.iter_mut().zip(inputs) {
                *slot = t.raw();
            }
            small = a;
            &small[..inputs.len()]
        } else {
            raws = inputs.iter().map(|t| t.raw()).collect();
            &raws
        };
        for t in inputs {
            if !t.backend.same_as(backend) {
                return Err(Error::backend(format!(
                    "{}: inputs live on different backends ({} and {})",
                    op.name(),
                    t.backend.name(),
                    backend.name()
                )));
            }
        }
        let out = lift(backend.obj().exec(op, RSlice::from_slice(slice))).map_err(|e| match e {
            Error::Backend(m) if !m.starts_with(op.name()) => Error::Backend(format!("{}: {m}", op.name())),
            other => other,
        })?;
        Ok(Tensor::from_raw(out, backend))
    }

    fn op1(&self, op: Op<'_>) -> Result<Tensor> {
        Self::exec(&self.backend, op, &[self])
    }

    fn op2(&self, op: Op<'_>, other: &Tensor) -> Result<Tensor> {
        Self::exec(&self.backend, op, &[self, other])
    }

    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        self.op1(Op::Unary(op))
    }
    pub fn neg(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }
    pub fn exp(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Exp)
    }
    pub fn log(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log)
    }
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt)
    }
    pub fn recip(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Recip)
    }
    pub fn sqr(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqr)
    }
    pub fn sin(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sin)
    }
    pub fn cos(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Cos)
    }
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh)
    }
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid)
    }
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Relu)
    }
    pub fn silu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Silu)
    }
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluTanh)
    }
    pub fn gelu_erf(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluErf)
    }

    pub fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        self.op2(Op::Binary(op), rhs)
    }
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Add, rhs)
    }
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Sub, rhs)
    }
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Mul, rhs)
    }
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Div, rhs)
    }
    pub fn maximum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Maximum, rhs)
    }
    pub fn minimum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Minimum, rhs)
    }
    pub fn compare(&self, op: CmpOp, rhs: &Tensor) -> Result<Tensor> {
        self.op2(Op::Compare(op), rhs)
    }
    /// `cond ? on_true : on_false`, with `self` as the u8 condition.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        Self::exec(&self.backend, Op::Where, &[self, on_true, on_false])
    }

    /// `self + inv_beta · sin²(alpha · self)` per channel of a `(b, c, t)` tensor (`alpha` and
    /// `inv_beta` hold c values each): the Snake activation of audio codecs, in one op.
    pub fn snake(&self, alpha: &Tensor, inv_beta: &Tensor) -> Result<Tensor> {
        Self::exec(&self.backend, Op::Snake, &[self, alpha, inv_beta])
    }

    pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        self.op1(Op::Affine { mul, add })
    }
    pub fn scale(&self, mul: f64) -> Result<Tensor> {
        self.affine(mul, 0.0)
    }
    pub fn powf(&self, exponent: f64) -> Result<Tensor> {
        self.op1(Op::Powf { exponent })
    }
    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        self.op1(Op::Clamp { min, max })
    }
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        self.op1(Op::ToDType(dtype))
    }

    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if shape.iter().product::<usize>() != self.elem_count() {
            return Err(Error::Shape(format!("cannot reshape {:?} to {shape:?}", self.dims())));
        }
        if shape == self.dims() {
            return Ok(self.clone());
        }
        self.op1(Op::Reshape(shape.into()))
    }
    pub fn permute(&self, dims: &[usize]) -> Result<Tensor> {
        self.op1(Op::Permute(dims.into()))
    }
    pub fn transpose(&self, a: usize, b: usize) -> Result<Tensor> {
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        self.op1(Op::BroadcastTo(shape.into()))
    }
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        let size = self.dims().get(dim).copied().unwrap_or(0);
        if start + len > size {
            return Err(Error::Shape(format!(
                "narrow {start}..{} out of range for dim {dim} of {:?}",
                start + len,
                self.dims()
            )));
        }
        if start == 0 && len == size {
            return Ok(self.clone());
        }
        self.op1(Op::Narrow { dim, start, len })
    }
    pub fn concat(tensors: &[&Tensor], dim: usize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::Shape("concat of no tensors".into()))?;
        if tensors.len() == 1 {
            return Ok((*first).clone());
        }
        Self::exec(&first.backend, Op::Concat { dim }, tensors)
    }
    pub fn contiguous(&self) -> Result<Tensor> {
        self.op1(Op::Contiguous)
    }
    pub fn index_select(&self, ids: &Tensor, dim: usize) -> Result<Tensor> {
        self.op2(Op::IndexSelect { dim }, ids)
    }
    pub fn gather(&self, ids: &Tensor, dim: usize) -> Result<Tensor> {
        self.op2(Op::Gather { dim }, ids)
    }
    pub fn reduce(&self, op: ReduceOp, dim: usize, keepdim: bool) -> Result<Tensor> {
        self.op1(Op::Reduce { op, dim, keepdim })
    }
    pub fn sum_keepdim(&self, dim: usize) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, dim, true)
    }
    pub fn mean_keepdim(&self, dim: usize) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, dim, true)
    }
    pub fn max_keepdim(&self, dim: usize) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, dim, true)
    }
    pub fn argmax(&self, dim: usize) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMax, dim, false)
    }
    pub fn softmax_last(&self) -> Result<Tensor> {
        self.op1(Op::Softmax)
    }
    pub fn log_softmax_last(&self) -> Result<Tensor> {
        self.op1(Op::LogSoftmax)
    }
    pub fn cumsum(&self, dim: usize) -> Result<Tensor> {
        self.op1(Op::Cumsum { dim })
    }
    pub fn argsort_last(&self, descending: bool) -> Result<Tensor> {
        self.op1(Op::ArgSort { descending })
    }
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.op2(Op::Matmul, rhs)
    }
    /// `self @ weightᵀ (+ bias)`; `weight` is `(out, in)` and may be quantized.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        match bias {
            Some(b) => Self::exec(&self.backend, Op::Linear, &[self, weight, b]),
            None => self.op2(Op::Linear, weight),
        }
    }
    /// Rows of `table` (vocab, dim) selected by `self` (u32 ids).
    pub fn embedding(&self, table: &Tensor) -> Result<Tensor> {
        self.op2(Op::Embedding, table)
    }
    pub fn rms_norm(&self, weight: &Tensor, eps: f32) -> Result<Tensor> {
        self.op2(Op::RmsNorm { eps }, weight)
    }
    pub fn layer_norm(&self, weight: &Tensor, bias: Option<&Tensor>, eps: f32) -> Result<Tensor> {
        match bias {
            Some(b) => Self::exec(&self.backend, Op::LayerNorm { eps }, &[self, weight, b]),
            None => self.op2(Op::LayerNorm { eps }, weight),
        }
    }
    /// Rotary embedding of `self` (b,h,t,d) with `cos`/`sin` tables of shape (t, d/2).
    pub fn rope(&self, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
        Self::exec(&self.backend, Op::Rope(layout), &[self, cos, sin])
    }
    /// Scaled dot-product attention; see [`Op::Attention`].
    pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, opts: AttentionOpts) -> Result<Tensor> {
        let op = Op::Attention { scale: opts.scale, causal: opts.causal, window: opts.window, softcap: opts.softcap };
        match mask {
            Some(m) => Self::exec(&q.backend, op, &[q, k, v, m]),
            None => Self::exec(&q.backend, op, &[q, k, v]),
        }
    }
    pub fn conv1d(&self, weight: &Tensor, bias: Option<&Tensor>, p: Conv1dParams) -> Result<Tensor> {
        let op = Op::Conv1d { stride: p.stride, padding: p.padding, dilation: p.dilation, groups: p.groups };
        match bias {
            Some(b) => Self::exec(&self.backend, op, &[self, weight, b]),
            None => self.op2(op, weight),
        }
    }
    pub fn conv_transpose1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        p: Conv1dParams,
        output_padding: usize,
    ) -> Result<Tensor> {
        let op = Op::ConvTranspose1d {
            stride: p.stride,
            padding: p.padding,
            output_padding,
            dilation: p.dilation,
            groups: p.groups,
        };
        match bias {
            Some(b) => Self::exec(&self.backend, op, &[self, weight, b]),
            None => self.op2(op, weight),
        }
    }
    /// Writes `src` into `self` at `start` along `dim`; `self` is consumed (may be updated in place).
    pub fn slice_assign(self, src: &Tensor, dim: usize, start: usize) -> Result<Tensor> {
        Self::exec(&self.backend.clone(), Op::SliceAssign { dim, start }, &[&self, src])
    }

    /// Forces evaluation on lazy backends; a no-op on eager ones.
    pub fn eval(&self) -> Result<()> {
        lift(self.backend.obj().eval(RSlice::from_slice(&[self.raw()])))
    }
}

/// Options of [`Tensor::attention`]. `window == 0` means no sliding window, `softcap == 0` none.
#[derive(Debug, Clone, Copy)]
pub struct AttentionOpts {
    pub scale: f32,
    pub causal: bool,
    pub window: usize,
    pub softcap: f32,
}

impl AttentionOpts {
    pub fn causal(scale: f32) -> Self {
        AttentionOpts { scale, causal: true, window: 0, softcap: 0.0 }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Conv1dParams {
    pub stride: usize,
    pub padding: usize,
    pub dilation: usize,
    pub groups: usize,
}

impl Default for Conv1dParams {
    fn default() -> Self {
        Conv1dParams { stride: 1, padding: 0, dilation: 1, groups: 1 }
    }
}

/// A 4-byte number type every bit pattern of which is a valid value (f32, u32).
trait Word: Copy {
    // Read on big-endian hosts only (little-endian ones copy the bytes as they are).
    #[cfg_attr(target_endian = "little", allow(dead_code))]
    fn from_le(bytes: [u8; 4]) -> Self;
}

impl Word for f32 {
    fn from_le(bytes: [u8; 4]) -> Self {
        f32::from_le_bytes(bytes)
    }
}

impl Word for u32 {
    fn from_le(bytes: [u8; 4]) -> Self {
        u32::from_le_bytes(bytes)
    }
}

/// Little-endian words decoded from `bytes`: one copy on little-endian hosts (a decode step's
/// logits, a vocabulary of floats, come out this way every token).
fn words_from_le<T: Word>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / 4;
    #[cfg(target_endian = "little")]
    {
        let mut out = Vec::<T>::with_capacity(n);
        // SAFETY: a `Word` is 4 bytes, any bit pattern is valid, and on a little-endian host its
        // memory layout is its little-endian bytes; `out` has room for the n values written.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr() as *mut u8, n * 4);
            out.set_len(n);
        }
        out
    }
    #[cfg(not(target_endian = "little"))]
    {
        bytes.chunks_exact(4).map(|c| T::from_le([c[0], c[1], c[2], c[3]])).collect()
    }
}
