//! Direct stride-1 f32 convolution for CPUs with AVX2 and FMA (AVX-512 where present): the
//! dispatch and the walk over the output; the block kernels are `x86/avx2/conv1d.rs` and
//! `x86/avx512/conv1d.rs`.
//!
//! The column-buffer path (a backend's im2col + gemm) copies each input window into a buffer and
//! gemm then packs that buffer again before its microkernel runs: two copies of `cin·k` values
//! per output column, about a sixth of an audio codec's decode. For stride 1 every window is
//! just the input row shifted by `j·dilation`, so the kernel here reads it in place: a block of
//! 16 output columns × 6 output channels keeps its 12 accumulators in registers while it walks
//! the input channels and taps, loading two vectors of each shifted row and broadcasting the six
//! channels' weights from the weight's own `(cout, cin, k)` rows. Nothing is packed. With
//! AVX-512 a block is 64 columns × 6 channels (24 of the 32 vector registers accumulate, four
//! loads and six broadcasts feed 24 FMAs of twice the width); every output's sum runs in the same
//! order either way, so both widths give the same bits.
//!
//! Work items are equal chunks of at most 256 output columns, split by output channels until
//! every thread has several; within an item the input channels go in groups of 128 so the rows
//! a chunk reads stay in L2 while every channel block passes over them. Blocks whose window
//! hangs over either end of the input (padding, or the last partial block) read a zero-padded
//! copy of their window, made once per work item and input-channel group for all its channel
//! blocks, and write through a small buffer. The sum for each output runs in the
//! same order on every thread count: bias, then input channels and taps in order.

use crate::out_ptr::OutPtr;
use crate::pool::Pool;
#[cfg(target_arch = "x86_64")]
use crate::x86::{avx2::conv1d as avx2, avx512::conv1d as avx512};

/// Output columns per AVX2 kernel call: two vectors.
const COLS_AVX2: usize = 16;
/// Output columns per AVX-512 kernel call: four vectors.
const COLS_AVX512: usize = 64;
/// Output channels per kernel call: with AVX2 12 accumulators, two input vectors and a broadcast
/// weight fill 15 of the 16 vector registers; with AVX-512 24 + 4 + 1 of 32.
const ROWS: usize = 6;
/// Output columns per work item.
const CHUNK: usize = 256;
/// Input channels per pass over a chunk (their rows of the chunk's window stay in L2).
const CIN_GROUP: usize = 128;
/// Work items per thread the split aims at, so the pool's shared cursor evens the threads out.
const ITEMS_PER_THREAD: usize = 8;

/// Whether this CPU runs [`conv1d_accumulate`]: AVX2 and FMA.
pub fn available() -> bool {
    crate::cpu_features::features().fma()
}

/// The widest block this CPU runs: output columns per kernel call.
fn widest_block() -> usize {
    if crate::cpu_features::features().avx512() {
        COLS_AVX512
    } else {
        COLS_AVX2
    }
}

/// The geometry of a stride-1, groups-1 convolution `(b, cin, l)` by `(cout, cin, k)`.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub b: usize,
    pub cin: usize,
    pub l: usize,
    pub cout: usize,
    pub k: usize,
    pub dilation: usize,
    pub padding: usize,
    /// `l + 2·padding - dilation·(k - 1)`.
    pub l_out: usize,
}

impl Shape {
    fn span(&self) -> usize {
        self.dilation * (self.k - 1) + 1
    }

    /// A kernel call over `g` input channels of the weight rows at `w` (`(cout, cin, k)`).
    fn operands(
        &self,
        x: *const f32,
        x_stride: usize,
        w: *const f32,
        g: usize,
        out: *mut f32,
        out_stride: usize,
    ) -> Operands {
        let (w_row, w_ci) = (self.cin * self.k, self.k);
        Operands { x, x_stride, w, w_row, w_ci, channels: g, taps: self.k, dilation: self.dilation, out, out_stride }
    }
}

/// Adds the convolution of `xs` `(b, cin, l)` with `ws` `(cout, cin, k)` to `out`
/// `(b, cout, l_out)`, which holds the bias (or zeros). Only call when [`available`].
pub fn conv1d_accumulate(xs: &[f32], ws: &[f32], out: &mut [f32], s: Shape, pool: &impl Pool) {
    accumulate_in_blocks(xs, ws, out, s, widest_block(), pool)
}

/// [`conv1d_accumulate`] with blocks of `cols` output columns (16, or 64 with AVX-512).
fn accumulate_in_blocks(xs: &[f32], ws: &[f32], out: &mut [f32], s: Shape, cols: usize, pool: &impl Pool) {
    assert!(available(), "conv1d_accumulate needs avx2 and fma");
    assert!(cols == COLS_AVX2 || (cols == COLS_AVX512 && crate::cpu_features::features().avx512()));
    assert!(s.k >= 1 && s.dilation >= 1 && s.l_out + s.span() == s.l + 2 * s.padding + 1);
    assert!(xs.len() == s.b * s.cin * s.l && ws.len() == s.cout * s.cin * s.k);
    assert_eq!(out.len(), s.b * s.cout * s.l_out);
    if out.is_empty() || s.cin == 0 {
        return;
    }
    // Equal chunks of whole blocks (at most CHUNK columns), split by output channels
    // in whole 6-row blocks until there are ITEMS_PER_THREAD per thread: with 2 threads, 4
    // chunks of 256, 256, 256 and 32 columns (an 800-column product) kept one thread idle for a
    // third of the call.
    let threads = pool.threads();
    let chunk = s.l_out.div_ceil(cols).div_ceil(s.l_out.div_ceil(CHUNK)) * cols;
    let chunks_per_item = s.l_out.div_ceil(chunk);
    let chunks = s.b * chunks_per_item;
    let want = if threads > 1 { threads * ITEMS_PER_THREAD } else { 1 };
    let row_blocks = s.cout.div_ceil(ROWS);
    let splits = if chunks >= want { 1 } else { want.div_ceil(chunks).min(row_blocks) };
    let rows_per_split = row_blocks.div_ceil(splits) * ROWS;
    let splits = s.cout.div_ceil(rows_per_split);
    let dst = OutPtr(out.as_mut_ptr());
    let run = |items: std::ops::Range<usize>| {
        let mut edge = EdgeBuffers::new(cols);
        for item in items {
            let (c, split) = (item / splits, item % splits);
            let (bi, t0) = (c / chunks_per_item, c % chunks_per_item * chunk);
            let (c0, c1) = (split * rows_per_split, ((split + 1) * rows_per_split).min(s.cout));
            let x = &xs[bi * s.cin * s.l..(bi + 1) * s.cin * s.l];
            let cols = (t0, (t0 + chunk).min(s.l_out));
            // SAFETY: the item writes rows c0..c1, columns `cols` of batch item bi, which no
            // other item writes; `dst` holds b·cout·l_out values.
            unsafe { chunk_accumulate(x, ws, dst.at(bi * s.cout * s.l_out), s, cols, (c0, c1), &mut edge) }
        }
    };
    let items = chunks * splits;
    pool.execute_chunked_if(true, items, run);
}

/// Scratch for the blocks whose window leaves the input: zero-padded copies of those windows'
/// rows for the current input-channel group (made once per group and reused by every channel
/// block: a padded convolution's edge blocks would otherwise copy their window once per 6
/// output channels) and a block of output.
struct EdgeBuffers {
    /// The windows of `starts`, one after another (`CIN_GROUP.min(cin)` rows of `width` each).
    windows: Vec<f32>,
    /// First output column of each cached window.
    starts: Vec<usize>,
    /// Output columns per block.
    cols: usize,
    out: Vec<f32>,
}

impl EdgeBuffers {
    fn new(cols: usize) -> Self {
        EdgeBuffers { windows: Vec::new(), starts: Vec::new(), cols, out: vec![0.0; ROWS * cols] }
    }

    /// Caches the windows of the edge blocks `starts` for rows `g0..g0 + g` of `x` (`l`
    /// columns each): from column `b0 - padding` (may be negative), `width` columns, zero
    /// outside `0..l`.
    fn fill(&mut self, x: &[f32], s: &Shape, (g0, g): (usize, usize), starts: &[usize]) {
        let width = self.cols + s.span() - 1;
        self.windows.resize(starts.len() * g * width, 0.0);
        for (window, &b0) in self.windows.chunks_exact_mut(g * width).zip(starts) {
            let first = b0 as isize - s.padding as isize;
            for (ci, row) in window.chunks_exact_mut(width).enumerate() {
                let xr = &x[(g0 + ci) * s.l..(g0 + ci + 1) * s.l];
                for (u, v) in row.iter_mut().enumerate() {
                    let pos = first + u as isize;
                    *v = if pos >= 0 && (pos as usize) < s.l { xr[pos as usize] } else { 0.0 };
                }
            }
        }
        self.starts.clear();
        self.starts.extend_from_slice(starts);
    }

    /// The cached window of the edge block at output column `b0` (`g` rows of `width`).
    fn window(&self, b0: usize, g: usize, width: usize) -> &[f32] {
        let i = self.starts.iter().position(|&b| b == b0).expect("edge windows are cached per group");
        &self.windows[i * g * width..(i + 1) * g * width]
    }
}

/// Output columns `t0..t1`, channels `c0..c1` of one batch item (`out` points at its row 0).
///
/// # Safety
/// `out` must hold `cout·l_out` values; only the given rows and columns are written.
unsafe fn chunk_accumulate(
    x: &[f32],
    ws: &[f32],
    out: *mut f32,
    s: Shape,
    (t0, t1): (usize, usize),
    (c0, c1): (usize, usize),
    edge: &mut EdgeBuffers,
) {
    let (span, cols) = (s.span(), edge.cols);
    let ck = s.cin * s.k;
    // Input positions b0 - padding .. b0 - padding + cols + span - 1 are read.
    let interior = |b0: usize| b0 >= s.padding && b0 + cols <= s.l_out && b0 - s.padding + cols + span - 1 <= s.l;
    let edges: Vec<usize> = (t0..t1).step_by(cols).filter(|&b0| !interior(b0)).collect();
    for g0 in (0..s.cin).step_by(CIN_GROUP) {
        let g = CIN_GROUP.min(s.cin - g0);
        if !edges.is_empty() {
            // This item's edge windows for this group, shared by all its channel blocks.
            edge.fill(x, &s, (g0, g), &edges);
        }
        for r0 in (c0..c1).step_by(ROWS) {
            let rows = ROWS.min(c1 - r0);
            let w = ws.as_ptr().add(r0 * ck + g0 * s.k);
            for b0 in (t0..t1).step_by(cols) {
                if interior(b0) {
                    let x = x.as_ptr().add(g0 * s.l + b0 - s.padding);
                    let out = out.add(r0 * s.l_out + b0);
                    block(rows, cols, s.operands(x, s.l, w, g, out, s.l_out));
                } else {
                    edge_block(w, out, s, g, (r0, rows), b0, edge);
                }
            }
        }
    }
}

/// A block whose window leaves the input or whose columns pass `l_out` (its window cached in
/// `edge` for the current input-channel group).
///
/// # Safety
/// As [`chunk_accumulate`]; `w` points at the block's weight row r0, input channel g0.
unsafe fn edge_block(
    w: *const f32,
    out: *mut f32,
    s: Shape,
    g: usize,
    (r0, rows): (usize, usize),
    b0: usize,
    edge: &mut EdgeBuffers,
) {
    let block_cols = edge.cols;
    let width = block_cols + s.span() - 1;
    let cols = block_cols.min(s.l_out - b0);
    for r in 0..rows {
        let o = &mut edge.out[r * block_cols..(r + 1) * block_cols];
        o.fill(0.0);
        std::ptr::copy_nonoverlapping(out.add((r0 + r) * s.l_out + b0), o.as_mut_ptr(), cols);
    }
    let window = edge.window(b0, g, width).as_ptr();
    let scratch = edge.out.as_mut_ptr();
    block(rows, block_cols, s.operands(window, width, w, g, scratch, block_cols));
    for r in 0..rows {
        std::ptr::copy_nonoverlapping(edge.out.as_ptr().add(r * block_cols), out.add((r0 + r) * s.l_out + b0), cols);
    }
}

/// What one kernel call reads and writes: `out[r][0..cols] += Σ_ci Σ_j w(r, ci, j) ·
/// x[ci·x_stride + j·dilation ..][0..cols]` for `r < rows`, where `w(r, ci, j)` lies at
/// `w + r·w_row + ci·w_ci + j` (a convolution's weight `(cout, cin, k)`: `w_row = cin·k`,
/// `w_ci = k`).
#[derive(Clone, Copy)]
pub(crate) struct Operands {
    pub x: *const f32,
    pub x_stride: usize,
    pub w: *const f32,
    pub w_row: usize,
    pub w_ci: usize,
    pub channels: usize,
    pub taps: usize,
    pub dilation: usize,
    pub out: *mut f32,
    pub out_stride: usize,
}

/// One block of `rows` (1..=6) output channels × `cols` (16 or 64) columns.
///
/// # Safety
/// Every address [`Operands`] describes for `rows` rows is readable (`x`, `w`) or writable
/// (`out`: `cols` values per row); 64 columns only with AVX-512.
unsafe fn block(rows: usize, cols: usize, o: Operands) {
    #[cfg(target_arch = "x86_64")]
    match (cols, rows) {
        (COLS_AVX512, 6) => avx512::block::<6>(o),
        (COLS_AVX512, 5) => avx512::block::<5>(o),
        (COLS_AVX512, 4) => avx512::block::<4>(o),
        (COLS_AVX512, 3) => avx512::block::<3>(o),
        (COLS_AVX512, 2) => avx512::block::<2>(o),
        (COLS_AVX512, _) => avx512::block::<1>(o),
        (_, 6) => avx2::block::<6>(o),
        (_, 5) => avx2::block::<5>(o),
        (_, 4) => avx2::block::<4>(o),
        (_, 3) => avx2::block::<3>(o),
        (_, 2) => avx2::block::<2>(o),
        _ => avx2::block::<1>(o),
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("conv_direct runs only where `available` ({rows} rows × {cols}, {} channels)", o.channels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::ScopedThreads;

    /// The convolution in f64, from its definition.
    fn reference(xs: &[f32], ws: &[f32], bias: &[f32], s: Shape) -> Vec<f64> {
        let mut out = Vec::with_capacity(s.b * s.cout * s.l_out);
        for bi in 0..s.b {
            for c in 0..s.cout {
                for t in 0..s.l_out {
                    let mut acc = bias[c] as f64;
                    for ci in 0..s.cin {
                        for j in 0..s.k {
                            let pos = (t + j * s.dilation) as isize - s.padding as isize;
                            if pos >= 0 && (pos as usize) < s.l {
                                acc += ws[(c * s.cin + ci) * s.k + j] as f64
                                    * xs[(bi * s.cin + ci) * s.l + pos as usize] as f64;
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
        out
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Every branch: partial channel blocks (cout % 6), more than one input-channel group
    /// (cin > 128), padding on both sides, inputs shorter than a block, several chunks, batches.
    #[test]
    fn matches_the_definition() {
        if !available() {
            eprintln!("skipped: no avx2/fma");
            return;
        }
        let cases = [
            // (b, cin, l, cout, k, dilation, padding)
            (1, 1, 1, 1, 1, 1, 0),
            (1, 3, 20, 7, 3, 1, 0),
            (2, 5, 40, 13, 7, 3, 9),
            (1, 130, 70, 6, 7, 9, 0),
            (1, 16, 600, 12, 7, 1, 3),
            (2, 9, 530, 5, 1, 1, 0),
            (1, 8, 10, 2, 5, 2, 4),
            (1, 24, 300, 25, 7, 9, 27),
            (1, 140, 900, 8, 7, 3, 0),
        ];
        for (seed, &(b, cin, l, cout, k, dilation, padding)) in cases.iter().enumerate() {
            let l_out = l + 2 * padding - dilation * (k - 1);
            let s = Shape { b, cin, l, cout, k, dilation, padding, l_out };
            let xs = values(b * cin * l, 3 * seed as u64 + 1);
            let ws = values(cout * cin * k, 3 * seed as u64 + 2);
            let bias = values(cout, 3 * seed as u64 + 3);
            let biased: Vec<f32> =
                (0..b).flat_map(|_| bias.iter().flat_map(|&v| std::iter::repeat_n(v, l_out))).collect();
            let want = reference(&xs, &ws, &bias, s);
            let mut narrow = biased.clone();
            accumulate_in_blocks(&xs, &ws, &mut narrow, s, COLS_AVX2, &ScopedThreads::per_core());
            // f32 sums of cin·k products of values in [-1, 1]: a few ulps per term.
            let tol = 4e-7 * (cin * k) as f64 + 1e-6;
            for (i, (&got, &want)) in narrow.iter().zip(&want).enumerate() {
                assert!((got as f64 - want).abs() <= tol, "{s:?}: output {i}: {got} vs {want}");
            }
            if crate::cpu_features::features().avx512() {
                // The wide blocks sum in the same order: the same bits.
                let mut wide = biased;
                accumulate_in_blocks(&xs, &ws, &mut wide, s, COLS_AVX512, &ScopedThreads::per_core());
                let same = wide.iter().zip(&narrow).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{s:?}: 64-column blocks differ from 16-column ones");
            }
        }
    }
}
