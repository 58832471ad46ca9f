//! Dense (groups 1) f32 transposed convolution as one gemm per kernel tap, scattered in place.
//!
//! Tap `j` of a transposed convolution adds `W[:, :, j]ᵀ x` (cout × l) to the output columns
//! `i·stride + j·dilation - padding`: a gemm whose destination has column stride `stride`. The
//! weight `(cin, cout, k)` is read in place (tap j's `(cout, cin)` matrix has strides `k` and
//! `cout·k`), the input is read in place, and the output starts as the bias, so there is no
//! zero-stuffed input, no `(l, cout·k)` column matrix to fold back and no second pass for the
//! bias. Taps overlap in the output, so the pool's threads split the output channels, not time.
//!
//! Tap j's matrix is a strided view: its rows are `k` floats apart, so each tap's pass pulls every
//! cache line of the weight again. With a short input (a streamed chunk: a few frames against the
//! codec's 75 MB first upsampler) those `k` passes over a weight too big for the cache are the
//! whole cost, so short inputs take the folded path instead: every tap of a block of channels at
//! once, `Z = xᵀ W_block` (`(l, m·k)`, accumulated from the weight's rows, each read once in
//! order), then `Z` folded (scatter-added) into the output columns.

use crate::gemv;
use crate::out_ptr::OutPtr;
use crate::pool::Pool;

/// Input columns per gemm: the `(cin, n)` input slice a thread reuses for all `k` taps stays in
/// L2 (≤ 1 MB for cin ≤ 2048).
const COLUMNS: usize = 128;
/// Output channels per work item: a multiple of gemm's AVX-512 register tile height.
const ROW_BLOCK: usize = 48;

/// Input columns up to which a short input takes the folded path (its `(l, m·k)` tap buffer
/// stays in L1/L2).
const FOLD_MAX_COLUMNS: usize = 16;

/// Whether the folded path (one pass over the weight, plus an `(l, cout·k)` buffer to fold)
/// costs less traffic than one strided pass per tap: it does for a few input columns against
/// many channels, `2·l < cin` (the buffer's write and read against `k - 1` extra weight passes).
fn folds(g: &Geometry) -> bool {
    g.k > 1 && g.l <= FOLD_MAX_COLUMNS && 2 * g.l < g.cin
}

/// Geometry of a transposed convolution with `l_out` output columns.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    pub b: usize,
    pub cin: usize,
    pub l: usize,
    pub cout: usize,
    pub k: usize,
    pub stride: usize,
    pub dilation: usize,
    pub padding: usize,
    pub l_out: usize,
}

/// `x` (b, cin, l) by `w` (cin, cout, k), plus `bias` (cout,) when given -> (b, cout, l_out),
/// split over `pool`.
pub fn dense_conv_transpose1d_f32(
    xs: &[f32],
    ws: &[f32],
    bias: Option<&[f32]>,
    g: Geometry,
    pool: &impl Pool,
) -> Vec<f32> {
    let Geometry { b, cin, l, cout, k, stride, dilation, padding, l_out } = g;
    let mut out = Vec::with_capacity(b * cout * l_out);
    for _ in 0..b {
        match bias {
            Some(bias) => bias.iter().for_each(|&v| out.extend(std::iter::repeat_n(v, l_out))),
            None => out.resize(out.len() + cout * l_out, 0.0),
        }
    }
    if out.is_empty() || cin == 0 {
        return out;
    }
    let threads = pool.threads();
    // Fewer, taller blocks where there are few channels: one per thread at least.
    let block = ROW_BLOCK.min(cout.div_ceil(threads)).max(1);
    let blocks = cout.div_ceil(block);
    let dst = OutPtr(out.as_mut_ptr());
    let fold = folds(&g);
    let run = |items: std::ops::Range<usize>| {
        let dst = &dst;
        let mut taps = if fold { vec![0f32; block * k * l] } else { Vec::new() };
        for item in items {
            let (bi, c0) = (item / blocks, item % blocks * block);
            let m = block.min(cout - c0);
            let x = &xs[bi * cin * l..(bi + 1) * cin * l];
            if fold {
                // SAFETY: only this item writes rows c0..c0 + m of batch item bi.
                let rows = unsafe { std::slice::from_raw_parts_mut(dst.0.add((bi * cout + c0) * l_out), m * l_out) };
                fold_block(&mut taps[..m * k * l], &ws[c0 * k..], x, rows, g);
                continue;
            }
            for i0 in (0..l).step_by(COLUMNS) {
                let n = COLUMNS.min(l - i0);
                for j in 0..k {
                    // Input columns i0.. whose output column i·stride + j·dilation - padding
                    // falls inside 0..l_out.
                    let shift = (j * dilation) as isize - padding as isize;
                    let lo = if shift >= 0 { 0 } else { (-shift as usize).div_ceil(stride) };
                    let lo = lo.max(i0);
                    let hi_excl = if (l_out as isize) <= shift {
                        0
                    } else {
                        (((l_out as isize - shift) as usize).div_ceil(stride)).min(i0 + n)
                    };
                    if lo >= hi_excl {
                        continue;
                    }
                    let cols = hi_excl - lo;
                    let first = (lo * stride) as isize + shift;
                    // SAFETY: the lhs is tap j of rows c0..c0 + m of the weight, element (r, c) at
                    // (c·cout + c0 + r)·k + j < cin·cout·k; the rhs is the input's rows from column
                    // lo, (c, i) at c·l + lo + i with lo + i < l; the destination (r, i) is output
                    // (bi, c0 + r, first + i·stride), inside 0..l_out by the choice of lo and
                    // hi_excl. Only this item writes rows c0..c0 + m of batch item bi.
                    unsafe {
                        gemm::gemm(
                            m,
                            cols,
                            cin,
                            dst.0.add((bi * cout + c0) * l_out + first as usize),
                            stride as isize,
                            l_out as isize,
                            true,
                            ws.as_ptr().add(c0 * k + j),
                            (cout * k) as isize,
                            k as isize,
                            x.as_ptr().add(lo),
                            1,
                            l as isize,
                            1.0,
                            1.0,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        )
                    }
                }
            }
        }
    };
    pool.execute_chunked_if(true, b * blocks, run);
    out
}

/// The folded path for `m` output channels: `taps` (`(l, m·k)`: row i holds every tap of input
/// column i, tap j of channel r at `r·k + j`) `= xᵀ W_block`, accumulated from the weight's own
/// rows (`ws` starts at `W[0, c0, 0]`, row c's block at `c·cout·k`, `m·k` long), four rows per
/// pass so each is read once, in order; then each tap is added into output column
/// `i·stride + j·dilation - padding` of `rows` (`(m, l_out)`, holding the bias).
fn fold_block(taps: &mut [f32], ws: &[f32], x: &[f32], rows: &mut [f32], g: Geometry) {
    let Geometry { cin, l, cout, k, stride, dilation, padding, l_out, .. } = g;
    let m = rows.len() / l_out;
    let mk = m * k;
    let w_row = |c: usize| &ws[c * cout * k..c * cout * k + mk];
    taps.fill(0.0);
    let mut c = 0;
    while c + 4 <= cin {
        let w = [w_row(c), w_row(c + 1), w_row(c + 2), w_row(c + 3)];
        for (i, t) in taps.chunks_exact_mut(mk).enumerate() {
            let a = [x[c * l + i], x[(c + 1) * l + i], x[(c + 2) * l + i], x[(c + 3) * l + i]];
            gemv::axpy4_f32(a, w, t);
        }
        c += 4;
    }
    for c in c..cin {
        for (i, t) in taps.chunks_exact_mut(mk).enumerate() {
            gemv::axpy_f32(x[c * l + i], w_row(c), t);
        }
    }
    for (r, out_row) in rows.chunks_exact_mut(l_out).enumerate() {
        for i in 0..l {
            let column = &taps[i * mk + r * k..i * mk + (r + 1) * k];
            for (j, &v) in column.iter().enumerate() {
                let t = (i * stride + j * dilation) as isize - padding as isize;
                if t >= 0 && (t as usize) < l_out {
                    out_row[t as usize] += v;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::ScopedThreads;

    /// The transposed convolution in f64, from its definition.
    fn reference(xs: &[f32], ws: &[f32], bias: &[f32], g: Geometry) -> Vec<f64> {
        let mut out: Vec<f64> = (0..g.b * g.cout * g.l_out).map(|i| bias[i / g.l_out % g.cout] as f64).collect();
        for bi in 0..g.b {
            for ci in 0..g.cin {
                for c in 0..g.cout {
                    for i in 0..g.l {
                        for j in 0..g.k {
                            let t = (i * g.stride + j * g.dilation) as isize - g.padding as isize;
                            if t >= 0 && (t as usize) < g.l_out {
                                out[(bi * g.cout + c) * g.l_out + t as usize] +=
                                    xs[(bi * g.cin + ci) * g.l + i] as f64 * ws[(ci * g.cout + c) * g.k + j] as f64;
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Both paths (per-tap gemm and the folded short input), padding, output padding, batches
    /// and more channel blocks than threads.
    #[test]
    fn matches_the_definition() {
        let cases = [
            // (b, cin, l, cout, k, stride, dilation, padding, output_padding)
            (1, 3, 20, 5, 4, 2, 1, 1, 0),
            (2, 40, 6, 100, 7, 3, 1, 2, 1),
            (1, 64, 3, 50, 10, 5, 1, 0, 0),
            (2, 8, 300, 7, 3, 1, 2, 2, 0),
            (1, 5, 9, 3, 1, 2, 1, 0, 1),
        ];
        for (seed, &(b, cin, l, cout, k, stride, dilation, padding, output_padding)) in cases.iter().enumerate() {
            let l_out = (l - 1) * stride + dilation * (k - 1) + output_padding + 1 - 2 * padding;
            let g = Geometry { b, cin, l, cout, k, stride, dilation, padding, l_out };
            let values = |n, s| crate::bench_inputs::values(n, 3 * seed as u64 + s);
            let (xs, ws, bias) = (values(b * cin * l, 1), values(cin * cout * k, 2), values(cout, 3));
            let want = reference(&xs, &ws, &bias, g);
            let tol = 4e-7 * (cin * k) as f64 + 1e-6;
            for threads in [1, 3] {
                let got = dense_conv_transpose1d_f32(&xs, &ws, Some(&bias), g, &ScopedThreads(threads));
                for (i, (&got, &want)) in got.iter().zip(&want).enumerate() {
                    let ok = (got as f64 - want).abs() <= tol;
                    assert!(ok, "{g:?} (folds: {}, {threads} threads): output {i}: {got} vs {want}", folds(&g));
                }
            }
        }
    }
}
