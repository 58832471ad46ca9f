//! 1-D convolutions (PyTorch `conv1d` / `conv_transpose1d` semantics) with groups, dilation,
//! padding, stride, output padding and an optional bias of shape (cout,).
//!
//! candle runs a grouped convolution as one convolution per group plus a concatenation, which is
//! thousands of tiny ops for the depthwise convolutions of audio codecs; depthwise
//! (groups == cin == cout) convolutions therefore use a direct loop here, in f32. Dense f32
//! stride-1 convolutions with more than one tap run the direct AVX2 kernel (infer-cpu-kernels'
//! `conv1d`) where the CPU has it, other dense f32 convolutions a tiled column buffer and gemm
//! (`dense_conv1d_f32`), dense f32 transposed convolutions one gemm per tap (infer-cpu-kernels'
//! `conv_transpose1d`); all start their output from the bias.

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};

use infer_cpu_kernels::conv1d as direct;

use crate::pool::CandlePool;
use infer_cpu_kernels::conv_transpose1d::{dense_conv_transpose1d_f32, Geometry};
use infer_cpu_kernels::out_ptr::OutPtr;

#[derive(Debug, Clone, Copy)]
pub struct ConvParams {
    pub stride: usize,
    pub padding: usize,
    pub dilation: usize,
    pub groups: usize,
    /// conv_transpose1d only.
    pub output_padding: usize,
}

fn check(p: &ConvParams) -> Result<()> {
    if p.stride == 0 || p.dilation == 0 || p.groups == 0 {
        candle_core::bail!("stride, dilation and groups must be >= 1 ({p:?})");
    }
    Ok(())
}

fn add_bias(y: Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    match bias {
        None => Ok(y),
        Some(b) => {
            let cout = y.dim(1)?;
            if b.elem_count() != cout {
                candle_core::bail!("bias {:?} does not match {cout} output channels", b.dims());
            }
            let b = if b.dtype() != y.dtype() { b.to_dtype(y.dtype())? } else { b.clone() };
            y.broadcast_add(&b.reshape((1, cout, 1))?)
        }
    }
}

fn f32_vec(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(C::F32)?.flatten_all()?.to_vec1::<f32>()
}

fn same_dtype(x: &Tensor, w: &Tensor) -> Result<()> {
    if x.dtype() != w.dtype() {
        candle_core::bail!("input is {:?} but the weight is {:?}", x.dtype(), w.dtype());
    }
    if !matches!(x.dtype(), C::F32 | C::F16 | C::BF16) {
        candle_core::bail!("convolutions need float tensors, got {:?}", x.dtype());
    }
    Ok(())
}

/// Runs `f(row, out_row)` for each of `rows` output rows of length `len`, in parallel when big.
fn for_rows(out: &mut [f32], rows: usize, len: usize, work: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if work < (1 << 16) || rows < 2 {
        for (r, o) in out.chunks_exact_mut(len.max(1)).enumerate().take(rows) {
            f(r, o);
        }
        return;
    }
    let p = OutPtr(out.as_mut_ptr());
    candle_core::utils::barrier_pool().execute_chunked(rows, |range| {
        let p = &p;
        for r in range {
            // SAFETY: each row is handed to exactly one worker; rows do not overlap.
            let o = unsafe { std::slice::from_raw_parts_mut(p.0.add(r * len), len) };
            f(r, o);
        }
    });
}

/// How a dense (groups 1) f32 convolution is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenseConv {
    /// The direct kernel (infer-cpu-kernels' `conv1d`) for stride-1 convolutions with more than one tap on
    /// CPUs with AVX2 and FMA, else gemm.
    Auto,
    /// Always the column buffer and gemm (benchmarks compare the two).
    Gemm,
}

/// x (b, cin, l), w (cout, cin/groups, k) -> (b, cout, l_out).
pub fn conv1d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, p: ConvParams) -> Result<Tensor> {
    conv1d_using(x, w, bias, p, DenseConv::Auto)
}

/// [`conv1d`] with the dense f32 path chosen by `how`.
pub fn conv1d_using(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, p: ConvParams, how: DenseConv) -> Result<Tensor> {
    check(&p)?;
    same_dtype(x, w)?;
    let (b, cin, l) = x.dims3()?;
    let (cout, cin_g, k) = w.dims3()?;
    if k == 0 {
        candle_core::bail!("the weight {:?} has an empty kernel", w.dims());
    }
    if cin_g * p.groups != cin || cout % p.groups != 0 {
        candle_core::bail!("input {:?} and weight {:?} do not fit {} groups", x.dims(), w.dims(), p.groups);
    }
    let span = p.dilation * (k - 1) + 1;
    if l + 2 * p.padding < span {
        candle_core::bail!("input length {l} (+2×{} padding) is shorter than the kernel span {span}", p.padding);
    }
    let l_out = (l + 2 * p.padding - span) / p.stride + 1;
    let y = if p.groups == cin && cout == cin && cin_g == 1 {
        let xs = f32_vec(x)?;
        let ws = f32_vec(w)?;
        let mut out = vec![0f32; b * cout * l_out];
        for_rows(&mut out, b * cout, l_out, b * cout * l_out * k, |r, o| {
            let c = r % cout;
            let xr = &xs[r * l..(r + 1) * l];
            let wr = &ws[c * k..(c + 1) * k];
            for (i, ov) in o.iter_mut().enumerate() {
                let base = (i * p.stride) as isize - p.padding as isize;
                let mut acc = 0f32;
                for (j, &wv) in wr.iter().enumerate() {
                    let pos = base + (j * p.dilation) as isize;
                    if pos >= 0 && (pos as usize) < l {
                        acc += xr[pos as usize] * wv;
                    }
                }
                *ov = acc;
            }
        });
        Tensor::from_vec(out, (b, cout, l_out), x.device())?.to_dtype(x.dtype())?
    } else if p.groups == 1 && x.dtype() == C::F32 {
        let bias = match bias {
            Some(b) if b.elem_count() != cout => {
                candle_core::bail!("bias {:?} does not match {cout} output channels", b.dims())
            }
            Some(b) => Some(f32_vec(b)?),
            None => None,
        };
        let bias = bias.as_deref();
        let (x, w) = (x.contiguous()?, w.contiguous()?);
        // CPU tensors are read in place: no copy of the input or the weight per call.
        let in_place = {
            let (xg, xl) = x.storage_and_layout();
            let (wg, wl) = w.storage_and_layout();
            match (&*xg, xl.contiguous_offsets(), &*wg, wl.contiguous_offsets()) {
                (
                    Storage::Cpu(CpuStorage::F32(xv)),
                    Some((xa, xz)),
                    Storage::Cpu(CpuStorage::F32(wv)),
                    Some((wa, wz)),
                ) => Some(dense_conv1d_f32(&xv[xa..xz], &wv[wa..wz], bias, (b, cin, l), (cout, k), &p, l_out, how)),
                _ => None,
            }
        };
        let out = match in_place {
            Some(out) => out,
            None => dense_conv1d_f32(&f32_vec(&x)?, &f32_vec(&w)?, bias, (b, cin, l), (cout, k), &p, l_out, how),
        };
        // The bias is already in: each output row started from it.
        return Tensor::from_vec(out, (b, cout, l_out), x.device());
    } else {
        x.conv1d(w, p.padding, p.stride, p.dilation, p.groups)?
    };
    add_bias(y, bias)
}

/// Column-buffer floats a tile of [`dense_conv1d_f32`] aims at (4 MB).
const TILE_BUFFER: usize = 1 << 20;

/// A dense (groups 1) f32 convolution, `(b, cin, l)` by `(cout, cin, k)`, plus `bias` (cout,)
/// when given (the gemm accumulates onto rows that start as the bias). Output columns go in
/// tiles: the `k` input windows a tile reads are stacked into a column buffer whose rows follow
/// the weight's own `(cin, k)` order, and one gemm writes the tile's columns of every output
/// row in place. Unlike an im2col of the whole input (`cin·k` copies of it, then a transposed
/// output to copy back), the buffer is a few MB, reused, and the tiles run on the pool's threads;
/// when there are fewer tiles than threads (short inputs), the output channels are split too.
/// A pointwise convolution (k = 1, stride 1, no padding) needs no buffer: its columns are the
/// input's own rows, which the gemm reads in place.
#[allow(clippy::too_many_arguments)]
fn dense_conv1d_f32(
    xs: &[f32],
    ws: &[f32],
    bias: Option<&[f32]>,
    (b, cin, l): (usize, usize, usize),
    (cout, k): (usize, usize),
    p: &ConvParams,
    l_out: usize,
    how: DenseConv,
) -> Vec<f32> {
    let mut out = match bias {
        // Written once here rather than added in a second pass over the output.
        Some(bias) => {
            let mut out = Vec::with_capacity(b * cout * l_out);
            for _ in 0..b {
                for &v in bias {
                    out.extend(std::iter::repeat_n(v, l_out));
                }
            }
            out
        }
        None => vec![0f32; b * cout * l_out],
    };
    if out.is_empty() {
        return out;
    }
    // A pointwise convolution stays on gemm, which reads its columns in place anyway (and was
    // ~10% faster than the direct kernel there: benches/conv1d.rs).
    if how == DenseConv::Auto && p.stride == 1 && k > 1 && direct::available() {
        let shape = direct::Shape { b, cin, l, cout, k, dilation: p.dilation, padding: p.padding, l_out };
        direct::conv1d_accumulate(xs, ws, &mut out, shape, &CandlePool);
        return out;
    }
    let pointwise = k == 1 && p.stride == 1 && p.padding == 0;
    let rows = cin * k;
    let tile = (TILE_BUFFER / rows.max(1)).clamp(64, 1024).min(l_out);
    let tiles = b * l_out.div_ceil(tile);
    let pool = candle_core::utils::barrier_pool();
    let threads = pool.n_workers() + 1;
    let block = if tiles >= threads { cout } else { cout.div_ceil(threads.div_ceil(tiles)) };
    let splits = cout.div_ceil(block);
    let dst = OutPtr(out.as_mut_ptr());
    let run = |items: std::ops::Range<usize>| {
        let dst = &dst;
        let mut cols = if pointwise { Vec::new() } else { vec![0f32; rows * tile] };
        let mut filled = usize::MAX;
        for item in items {
            let (t, s) = (item / splits, item % splits);
            let (bi, t0) = (t / l_out.div_ceil(tile), t % l_out.div_ceil(tile) * tile);
            let n = tile.min(l_out - t0);
            let (c0, m) = (s * block, block.min(cout - s * block));
            let x = &xs[bi * cin * l..(bi + 1) * cin * l];
            // The (cin·k, n) right-hand side and its row stride.
            let (rhs, rhs_stride) = if pointwise {
                (x[t0..].as_ptr(), l)
            } else {
                if filled != t {
                    fill_columns(&mut cols[..rows * n], x, (l, k), p, t0, n);
                    filled = t;
                }
                (cols.as_ptr(), n)
            };
            // SAFETY: `ws` is (cout, cin·k) row-major, of which rows c0..c0 + m are read; `rhs`
            // is (cin·k, n) with row stride `rhs_stride`: `cols`, or for a pointwise conv the
            // input's rows from column t0 (t0 + n <= l_out = l); the destination is the (m, n)
            // block at rows c0.. and columns t0.. of batch item bi in `out` (row stride l_out):
            // in bounds, and no other item writes it.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    rows,
                    dst.0.add((bi * cout + c0) * l_out + t0),
                    1,
                    l_out as isize,
                    bias.is_some(),
                    ws.as_ptr().add(c0 * rows),
                    1,
                    rows as isize,
                    rhs,
                    1,
                    rhs_stride as isize,
                    if bias.is_some() { 1.0 } else { 0.0 },
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        }
    };
    if tiles * splits == 1 {
        run(0..1);
    } else {
        pool.execute_chunked(tiles * splits, run);
    }
    out
}

/// `cols[(c·k + j)·n + i]` = input `x[c]` at position `(t0 + i)·stride + j·dilation - padding`,
/// zero outside `0..l`.
fn fill_columns(cols: &mut [f32], x: &[f32], (l, k): (usize, usize), p: &ConvParams, t0: usize, n: usize) {
    for (r, row) in cols.chunks_exact_mut(n).enumerate() {
        let (c, j) = (r / k, r % k);
        let xr = &x[c * l..(c + 1) * l];
        let first = (t0 * p.stride + j * p.dilation) as isize - p.padding as isize;
        if p.stride == 1 {
            // Contiguous: zeros where the window hangs over either end, one copy for the rest.
            let lo = (-first).clamp(0, n as isize) as usize;
            let hi = (l as isize - first).clamp(lo as isize, n as isize) as usize;
            row[..lo].fill(0.0);
            row[hi..].fill(0.0);
            if hi > lo {
                let s = (first + lo as isize) as usize;
                row[lo..hi].copy_from_slice(&xr[s..s + hi - lo]);
            }
        } else {
            for (i, v) in row.iter_mut().enumerate() {
                let pos = first + (i * p.stride) as isize;
                *v = if pos >= 0 && (pos as usize) < l { xr[pos as usize] } else { 0.0 };
            }
        }
    }
}

/// x (b, cin, l), w (cin, cout/groups, k) -> (b, cout, l_out) with
/// l_out = (l - 1)·stride - 2·padding + dilation·(k - 1) + output_padding + 1.
pub fn conv_transpose1d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, p: ConvParams) -> Result<Tensor> {
    check(&p)?;
    same_dtype(x, w)?;
    let (b, cin, l) = x.dims3()?;
    let (cin_w, cout_g, k) = w.dims3()?;
    if k == 0 {
        candle_core::bail!("the weight {:?} has an empty kernel", w.dims());
    }
    if cin_w != cin || cin % p.groups != 0 {
        candle_core::bail!("input {:?} and weight {:?} do not fit {} groups", x.dims(), w.dims(), p.groups);
    }
    if p.output_padding >= p.stride && p.output_padding >= p.dilation {
        candle_core::bail!("output_padding {} must be smaller than stride or dilation ({p:?})", p.output_padding);
    }
    if l == 0 {
        candle_core::bail!("empty input {:?}", x.dims());
    }
    let full = (l - 1) * p.stride + p.dilation * (k - 1) + p.output_padding + 1;
    if full <= 2 * p.padding {
        candle_core::bail!("padding {} leaves no output for input length {l} and kernel {k}", p.padding);
    }
    let l_out = full - 2 * p.padding;
    let cout = cout_g * p.groups;
    let y = if p.groups == cin && cout_g == 1 {
        let xs = f32_vec(x)?;
        let ws = f32_vec(w)?;
        let mut out = vec![0f32; b * cout * l_out];
        for_rows(&mut out, b * cout, l_out, b * cout * l * k, |r, o| {
            let c = r % cout;
            let xr = &xs[r * l..(r + 1) * l];
            let wr = &ws[c * k..(c + 1) * k];
            for (i, &xv) in xr.iter().enumerate() {
                let base = (i * p.stride) as isize - p.padding as isize;
                for (j, &wv) in wr.iter().enumerate() {
                    let pos = base + (j * p.dilation) as isize;
                    if pos >= 0 && (pos as usize) < l_out {
                        o[pos as usize] += xv * wv;
                    }
                }
            }
        });
        Tensor::from_vec(out, (b, cout, l_out), x.device())?.to_dtype(x.dtype())?
    } else if p.groups == 1 && x.dtype() == C::F32 {
        let bias = match bias {
            Some(b) if b.elem_count() != cout => {
                candle_core::bail!("bias {:?} does not match {cout} output channels", b.dims())
            }
            Some(b) => Some(f32_vec(b)?),
            None => None,
        };
        let g = Geometry { b, cin, l, cout, k, stride: p.stride, dilation: p.dilation, padding: p.padding, l_out };
        let (x, w) = (x.contiguous()?, w.contiguous()?);
        let in_place = {
            let (xg, xl) = x.storage_and_layout();
            let (wg, wl) = w.storage_and_layout();
            match (&*xg, xl.contiguous_offsets(), &*wg, wl.contiguous_offsets()) {
                (
                    Storage::Cpu(CpuStorage::F32(xv)),
                    Some((xa, xz)),
                    Storage::Cpu(CpuStorage::F32(wv)),
                    Some((wa, wz)),
                ) => Some(dense_conv_transpose1d_f32(&xv[xa..xz], &wv[wa..wz], bias.as_deref(), g, &CandlePool)),
                _ => None,
            }
        };
        let out = match in_place {
            Some(out) => out,
            None => dense_conv_transpose1d_f32(&f32_vec(&x)?, &f32_vec(&w)?, bias.as_deref(), g, &CandlePool),
        };
        // The bias is already in: each output row started from it.
        return Tensor::from_vec(out, (b, cout, l_out), x.device());
    } else {
        let w = w.contiguous()?;
        let run = |x: &Tensor| x.conv_transpose1d(&w, p.padding, p.output_padding, p.stride, p.dilation, p.groups);
        if b > 1 {
            // candle 0.11.1's col2im path (padding 0, dilation 1) folds the batch into the rows
            // of one gemm although its lhs is a transposed view, which mixes up batch items > 0.
            // One batch item at a time avoids the fold.
            let items = (0..b).map(|i| run(&x.narrow(0, i, 1)?)).collect::<Result<Vec<_>>>()?;
            Tensor::cat(&items, 0)?
        } else {
            run(x)?
        }
    };
    add_bias(y, bias)
}
