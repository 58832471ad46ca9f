//! GGML block-quantized weights multiplied as they are stored in the file (Q8_0, Q5_0, Q4_K,
//! Q6_K): one copy of the blocks (or the checkpoint's mapped pages), multiplied by
//! infer-cpu-kernels' GGML kernels on candle's thread pool; other GGML types go through candle's
//! `QTensor`.

use infer_core::{DType, Error, Result, SharedBytes};
use infer_cpu_kernels::ggml;

use crate::pool::CandlePool;

pub use infer_cpu_kernels::ggml::{formats, Format};

/// A 2-D (rows, cols) matrix of GGML blocks, each row `cols / block_values` blocks.
pub struct GgmlMatrix {
    format: Format,
    shape: [usize; 2],
    rows: usize,
    cols: usize,
    blocks: Blocks,
}

/// The bytes of blocks this process made (a quantizer's output), kept as they were written.
pub type OwnedBlocks = Box<dyn AsRef<[u8]> + Send + Sync>;

/// Where the blocks live: a copy, or the checkpoint's mapped pages themselves.
enum Blocks {
    Owned(OwnedBlocks),
    Shared { owner: SharedBytes, start: usize, end: usize },
}

impl GgmlMatrix {
    /// `None` when `dtype` is not a natively multiplied format or `shape` is not (rows, cols)
    /// with whole blocks per row.
    pub fn new(bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Option<GgmlMatrix>> {
        let Some((format, rows, cols)) = Self::layout(bytes.len(), dtype, shape)? else { return Ok(None) };
        Ok(Some(GgmlMatrix {
            format,
            shape: [rows, cols],
            rows,
            cols,
            blocks: Blocks::Owned(Box::new(bytes.to_vec())),
        }))
    }

    /// Like [`GgmlMatrix::new`], taking `blocks` over instead of copying them; `Err(blocks)`
    /// back where `new` would give `None`.
    pub fn from_owned(
        blocks: OwnedBlocks,
        dtype: DType,
        shape: &[usize],
    ) -> Result<std::result::Result<GgmlMatrix, OwnedBlocks>> {
        let Some((format, rows, cols)) = Self::layout((*blocks).as_ref().len(), dtype, shape)? else {
            return Ok(Err(blocks));
        };
        Ok(Ok(GgmlMatrix { format, shape: [rows, cols], rows, cols, blocks: Blocks::Owned(blocks) }))
    }

    /// Like [`GgmlMatrix::new`] over `owner.bytes()[start..end]`, kept in place (no copy).
    pub fn shared(
        owner: SharedBytes,
        start: usize,
        end: usize,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Option<GgmlMatrix>> {
        if start > end || end > owner.bytes().len() {
            return Err(Error::Shape(format!(
                "from_shared: range {start}..{end} outside {} bytes",
                owner.bytes().len()
            )));
        }
        let Some((format, rows, cols)) = Self::layout(end - start, dtype, shape)? else { return Ok(None) };
        Ok(Some(GgmlMatrix { format, shape: [rows, cols], rows, cols, blocks: Blocks::Shared { owner, start, end } }))
    }

    /// (format, rows, cols) when `dtype` has native kernels and `shape` is (rows, cols) of whole
    /// blocks; an error when `len` bytes do not fit the shape.
    fn layout(len: usize, dtype: DType, shape: &[usize]) -> Result<Option<(Format, usize, usize)>> {
        let Some(format) = format_of(dtype) else { return Ok(None) };
        let &[rows, cols] = shape else { return Ok(None) };
        if cols == 0 || !cols.is_multiple_of(format.block_values()) {
            return Ok(None);
        }
        let want = rows * cols / format.block_values() * format.block_bytes();
        if len != want {
            return Err(Error::Shape(format!(
                "from_bytes: {len} bytes for a {dtype} tensor of shape {shape:?} (expected {want})"
            )));
        }
        Ok(Some((format, rows, cols)))
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.blocks {
            Blocks::Owned(v) => (**v).as_ref(),
            Blocks::Shared { owner, start, end } => &owner.bytes().as_slice()[*start..*end],
        }
    }

    /// Whether the blocks are the checkpoint's own pages rather than a copy.
    pub fn is_shared(&self) -> bool {
        matches!(self.blocks, Blocks::Shared { .. })
    }

    fn row_bytes(&self) -> usize {
        ggml::row_bytes(self.format, self.cols)
    }

    fn row(&self, j: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes()[j * rb..(j + 1) * rb]
    }

    /// Row `j` as f32 into `out` (`cols` values).
    pub fn dequantize_row(&self, j: usize, out: &mut [f32]) {
        self.format.dequantize(self.row(j), out);
    }

    /// The whole matrix as f32, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (j, y) in out.chunks_exact_mut(self.cols.max(1)).enumerate() {
            self.dequantize_row(j, y);
        }
        out
    }

    /// `x @ selfᵀ` for `x` of `m` rows of `cols` values: `m × rows` values, row-major.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        ggml::matmul(self.format, self.bytes(), self.rows, self.cols, x, m, &CandlePool)
    }
}

/// The kernels' format for a natively multiplied `dtype`.
fn format_of(dtype: DType) -> Option<Format> {
    match dtype {
        DType::Q8_0 => Some(Format::Q8_0),
        DType::Q5_0 => Some(Format::Q5_0),
        DType::Q4K => Some(Format::Q4K),
        DType::Q6K => Some(Format::Q6K),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
