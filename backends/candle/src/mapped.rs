//! Dense tensors left where the caller's bytes lie (`from_shared` of a float dtype: a
//! checkpoint's mapped pages). A lookup table is read row by row in place, so a speech model's
//! 151936-row text embedding costs no copy at load and no memory beyond the rows used; a linear
//! weight is read in place by the row kernels (`gemv`, `half_gemm`); any other op gets a copy
//! made on its first use (candle's tensors own their storage).
//!
//! A half-precision mapped tensor converted to f32 (`ToDType(F32)`, as a weight loader computing
//! in f32 asks for a bf16 checkpoint's matrices) stays mapped: it *is* f32 to every op (widening
//! a bf16 or f16 is exact), the row kernels widen its rows as they read them, and other ops get
//! a widened copy on first use. The f32 model then loads as fast as the bf16 one and keeps
//! half the bytes resident.

use std::sync::OnceLock;

use candle_core::{DType as C, Tensor};
use infer_core::{DType, Error, Result, SharedBytes};

use crate::convert;
use crate::weight_rows::WeightRows;

pub struct MappedTensor {
    owner: SharedBytes,
    start: usize,
    end: usize,
    /// How the bytes are stored.
    stored: DType,
    /// What ops see: `stored`, or f32 for a widened half-precision tensor.
    dtype: DType,
    shape: Vec<usize>,
    /// The copy other ops compute on, made on first use.
    dense: OnceLock<Tensor>,
}

impl MappedTensor {
    /// `owner.bytes()[start..end]` as a float tensor of `shape`, checked, not copied.
    pub fn new(owner: SharedBytes, start: usize, end: usize, dtype: DType, shape: &[usize]) -> Result<MappedTensor> {
        if convert::to_candle_dtype(dtype).is_none_or(|_| !dtype.is_float()) {
            return Err(Error::unsupported(format!("a mapped tensor is a float tensor, not {dtype}")));
        }
        let want = dtype.storage_bytes(shape.iter().product());
        let have = owner.bytes().len();
        if start > end || end > have || end - start != want {
            return Err(Error::Shape(format!(
                "from_shared: bytes {start}..{end} (of {have}) for a {dtype} tensor of shape {shape:?} (expected {want})"
            )));
        }
        Ok(MappedTensor { owner, start, end, stored: dtype, dtype, shape: shape.to_vec(), dense: OnceLock::new() })
    }

    /// The same bytes seen as `to`, where that needs no copy: a bf16 or f16 tensor as f32.
    pub fn widened(&self, to: DType) -> Option<MappedTensor> {
        let widens = to == DType::F32 && self.dtype == self.stored && matches!(self.stored, DType::BF16 | DType::F16);
        widens.then(|| MappedTensor {
            owner: self.owner.clone(),
            start: self.start,
            end: self.end,
            stored: self.stored,
            dtype: to,
            shape: self.shape.clone(),
            dense: OnceLock::new(),
        })
    }

    pub fn dims(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype ops see.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The stored bytes (of [`MappedTensor::stored_dtype`]).
    pub fn bytes(&self) -> &[u8] {
        &self.owner.bytes().as_slice()[self.start..self.end]
    }

    /// The dtype the bytes hold.
    pub fn stored_dtype(&self) -> DType {
        self.stored
    }

    /// The stored elements in place, where the bytes are aligned for them.
    pub fn rows(&self) -> Option<WeightRows<'_>> {
        WeightRows::of_bytes(self.bytes(), convert::to_candle_dtype(self.stored)?)
    }

    /// The tensor as a candle tensor: a copy, made once.
    pub fn dense(&self) -> candle_core::Result<&Tensor> {
        if let Some(t) = self.dense.get() {
            return Ok(t);
        }
        tracing::debug!(dtype = %self.dtype, shape = ?self.shape, "copying a mapped tensor for an op other than a row lookup");
        let t = convert::dense_from_bytes_as(self.bytes(), self.stored, self.dtype, &self.shape)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        Ok(self.dense.get_or_init(|| t))
    }

    /// Rows of a (rows, dim) table selected by `ids` (any shape), copied from where they lie, in
    /// the table's dtype (widened if it is): shape `ids.shape + [dim]`.
    pub fn embedding(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let &[rows, dim] = self.shape.as_slice() else {
            candle_core::bail!("embedding: the table must be 2-D, got {:?}", self.shape)
        };
        let mut shape = ids.dims().to_vec();
        shape.push(dim);
        let ids = ids.flatten_all()?.to_dtype(C::I64)?.to_vec1::<i64>()?;
        let row_bytes = self.stored.storage_bytes(dim);
        let table = self.bytes();
        let mut out = Vec::with_capacity(ids.len() * row_bytes);
        for &id in &ids {
            if id < 0 || id as usize >= rows {
                candle_core::bail!("embedding: id {id} is outside the table's {rows} rows");
            }
            let at = id as usize * row_bytes;
            out.extend_from_slice(&table[at..at + row_bytes]);
        }
        convert::dense_from_bytes_as(&out, self.stored, self.dtype, &shape)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }
}
