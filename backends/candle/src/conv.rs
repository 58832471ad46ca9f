//! 1-D convolutions (PyTorch `conv1d` / `conv_transpose1d` semantics) with groups, dilation,
//! padding, stride, output padding and an optional bias of shape (cout,).
//!
//! candle runs a grouped convolution as one convolution per group plus a concatenation, which is
//! thousands of tiny ops for the depthwise convolutions of audio codecs; depthwise
//! (groups == cin == cout) convolutions therefore use a direct loop here, in f32.

use candle_core::{DType as C, Result, Tensor};

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

struct SendPtr(*mut f32);
// SAFETY: hands disjoint rows of one output buffer to the pool's threads.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// Runs `f(row, out_row)` for each of `rows` output rows of length `len`, in parallel when big.
fn for_rows(out: &mut [f32], rows: usize, len: usize, work: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if work < (1 << 16) || rows < 2 {
        for (r, o) in out.chunks_exact_mut(len.max(1)).enumerate().take(rows) {
            f(r, o);
        }
        return;
    }
    let p = SendPtr(out.as_mut_ptr());
    candle_core::utils::barrier_pool().execute_chunked(rows, |range| {
        let p = &p;
        for r in range {
            // SAFETY: each row is handed to exactly one worker; rows do not overlap.
            let o = unsafe { std::slice::from_raw_parts_mut(p.0.add(r * len), len) };
            f(r, o);
        }
    });
}

/// x (b, cin, l), w (cout, cin/groups, k) -> (b, cout, l_out).
pub fn conv1d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, p: ConvParams) -> Result<Tensor> {
    check(&p)?;
    same_dtype(x, w)?;
    let (b, cin, l) = x.dims3()?;
    let (cout, cin_g, k) = w.dims3()?;
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
    } else {
        x.conv1d(w, p.padding, p.stride, p.dilation, p.groups)?
    };
    add_bias(y, bias)
}

/// x (b, cin, l), w (cin, cout/groups, k) -> (b, cout, l_out) with
/// l_out = (l - 1)·stride - 2·padding + dilation·(k - 1) + output_padding + 1.
pub fn conv_transpose1d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, p: ConvParams) -> Result<Tensor> {
    check(&p)?;
    same_dtype(x, w)?;
    let (b, cin, l) = x.dims3()?;
    let (cin_w, cout_g, k) = w.dims3()?;
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
