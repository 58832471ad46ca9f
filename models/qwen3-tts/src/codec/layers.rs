//! Building blocks of the codec, written against the core op set: linear, causal convolutions
//! (streamable: they carry their left context between calls), SnakeBeta, ELU.

use infer_core::{Conv1dParams, Result, Tensor, Weights};

use super::state::Carry;
use super::weight_norm::conv_weight;

/// `y = x Wᵀ + b` over the last dim.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn load(w: &Weights, out_dim: usize, in_dim: usize, bias: bool) -> Result<Self> {
        let weight = w.get_shaped("weight", &[out_dim, in_dim])?;
        let bias = if bias { Some(w.get_shaped("bias", &[out_dim])?) } else { None };
        Ok(Linear { weight, bias })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// How a padded (non-streaming) convolution fills its borders (Mimi's `pad_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pad {
    Zeros,
    /// Repeats the edge sample (Mimi's downsampling conv).
    Replicate,
}

/// A 1-D convolution over `(1, cin, t)`, applied causally: output frame `i` sees inputs up to `i`.
pub struct CausalConv {
    weight: Tensor,
    bias: Option<Tensor>,
    cin: usize,
    stride: usize,
    dilation: usize,
    groups: usize,
    /// Effective kernel span, `(k - 1) * dilation + 1`.
    span: usize,
}

impl CausalConv {
    /// `w` holds `conv.weight` (or its weight-norm parts) and `conv.bias`.
    pub fn load(w: &Weights, shape: ConvShape, bias: bool) -> Result<Self> {
        let ConvShape { cin, cout, kernel, stride, dilation, groups } = shape;
        let weight = conv_weight(w, &[cout, cin / groups, kernel])?;
        let bias = if bias { Some(w.get_shaped("bias", &[cout])?) } else { None };
        let span = (kernel - 1) * dilation + 1;
        Ok(CausalConv { weight, bias, cin, stride, dilation, groups, span })
    }

    /// Valid (unpadded) convolution of `x` `(1, cin, t)`.
    fn conv(&self, x: &Tensor) -> Result<Tensor> {
        let p = Conv1dParams { stride: self.stride, padding: 0, dilation: self.dilation, groups: self.groups };
        // The bias goes to the op: a backend can start the output from it instead of adding it
        // in a second pass.
        x.conv1d(&self.weight, self.bias.as_ref(), p)
    }

    /// Stride-1 causal conv as a stream: the last `span - 1` inputs of the previous call (zeros at
    /// the start, as the reference's left padding) are prepended, so `t` inputs give `t` outputs
    /// and any split of the input gives the same result as one call.
    pub fn forward_stream(&self, x: &Tensor, carry: &mut Carry) -> Result<Tensor> {
        let ctx_len = self.span - 1;
        let slot = carry.slot();
        if ctx_len == 0 {
            return self.conv(x);
        }
        let t = x.dim(2);
        if slot.is_none() && self.groups == 1 && self.stride == 1 && t >= ctx_len {
            // The start of a stream: its left context is zeros, which the op's own padding
            // supplies without a padded copy of the input (it pads the right too; those
            // `ctx_len` outputs are dropped by a view). Later calls prepend the carried inputs.
            *slot = Some(x.narrow(2, t - ctx_len, ctx_len)?.contiguous()?);
            let p = Conv1dParams { stride: 1, padding: ctx_len, dilation: self.dilation, groups: 1 };
            return x.conv1d(&self.weight, self.bias.as_ref(), p)?.narrow(2, 0, t);
        }
        let ctx = match slot.take() {
            Some(c) => c,
            None => Tensor::zeros(x.backend(), x.dtype(), &[1, self.cin, ctx_len])?,
        };
        let full = Tensor::concat(&[&ctx, x], 2)?;
        let len = full.dim(2);
        *slot = Some(full.narrow(2, len - ctx_len, ctx_len)?.contiguous()?);
        self.conv(&full)
    }

    /// Mimi's causal conv on a whole signal: `span - stride` samples of left padding and enough
    /// on the right for a whole number of strides, so `t` inputs give `ceil(t / stride)` outputs.
    pub fn forward_padded(&self, x: &Tensor, pad: Pad) -> Result<Tensor> {
        let len = x.dim(2);
        let left = self.span - self.stride;
        let right = len.div_ceil(self.stride) * self.stride - len;
        let x = pad_time(x, left, right, pad)?;
        self.conv(&x)
    }
}

/// `x` (1, c, t) with `left` / `right` frames added along time.
fn pad_time(x: &Tensor, left: usize, right: usize, pad: Pad) -> Result<Tensor> {
    if left == 0 && right == 0 {
        return Ok(x.clone());
    }
    let (c, t) = (x.dim(1), x.dim(2));
    let edge = |n: usize, at: usize| -> Result<Tensor> {
        match pad {
            Pad::Zeros => Tensor::zeros(x.backend(), x.dtype(), &[1, c, n]),
            Pad::Replicate => x.narrow(2, at, 1)?.broadcast_to(&[1, c, n]),
        }
    };
    let mut parts = Vec::with_capacity(3);
    if left > 0 {
        parts.push(edge(left, 0)?);
    }
    parts.push(x.clone());
    if right > 0 {
        parts.push(edge(right, t - 1)?);
    }
    Tensor::concat(&parts.iter().collect::<Vec<_>>(), 2)
}

/// Shape of a conv layer's weight and how it slides.
#[derive(Debug, Clone, Copy)]
pub struct ConvShape {
    pub cin: usize,
    pub cout: usize,
    pub kernel: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
}

impl ConvShape {
    pub fn new(cin: usize, cout: usize, kernel: usize) -> Self {
        ConvShape { cin, cout, kernel, stride: 1, dilation: 1, groups: 1 }
    }
    pub fn stride(self, stride: usize) -> Self {
        ConvShape { stride, ..self }
    }
    pub fn dilation(self, dilation: usize) -> Self {
        ConvShape { dilation, ..self }
    }
    pub fn depthwise(self) -> Self {
        ConvShape { groups: self.cin, ..self }
    }
}

/// Transposed conv with `kernel - stride` samples trimmed on the right (the reference's causal
/// transposed conv): `t` inputs give `t * stride` outputs, output block `i` depending on inputs
/// up to `i`.
pub struct CausalConvTranspose {
    /// The transposed convolution's weight `(cin, cout, k)` and bias, or when the kernel is a
    /// whole number `m` of strides the same convolution's sub-pixel form (see [`sub_pixel`]):
    /// an ordinary one with `stride · cout` output channels and `m` taps, arranged once here
    /// (the original weight is then not kept).
    form: Form,
    cin: usize,
    cout: usize,
    stride: usize,
    /// Earlier input frames that still overlap the current output: `ceil((kernel - stride) / stride)`.
    ctx_len: usize,
}

impl CausalConvTranspose {
    pub fn load(w: &Weights, cin: usize, cout: usize, kernel: usize, stride: usize) -> Result<Self> {
        let weight = conv_weight(w, &[cin, cout, kernel])?;
        let bias = w.get_shaped("bias", &[cout])?;
        let ctx_len = (kernel - stride).div_ceil(stride);
        let form = match kernel.is_multiple_of(stride) {
            true => {
                let (weight, bias) = sub_pixel(&weight, &bias, stride)?;
                Form::SubPixel(weight, bias)
            }
            false => Form::Transposed(weight, bias),
        };
        Ok(CausalConvTranspose { form, cin, cout, stride, ctx_len })
    }

    /// Streams like [`CausalConv::forward_stream`]: the overlapping tail of earlier frames is
    /// recomputed from the carried input frames (zeros at the start contribute nothing), which
    /// keeps the bias counted once.
    pub fn forward_stream(&self, x: &Tensor, carry: &mut Carry) -> Result<Tensor> {
        let t = x.dim(2);
        let slot = carry.slot();
        let full = if self.ctx_len == 0 {
            x.clone()
        } else {
            let ctx = match slot.take() {
                Some(c) => c,
                None => Tensor::zeros(x.backend(), x.dtype(), &[1, self.cin, self.ctx_len])?,
            };
            let full = Tensor::concat(&[&ctx, x], 2)?;
            *slot = Some(full.narrow(2, full.dim(2) - self.ctx_len, self.ctx_len)?.contiguous()?);
            full
        };
        match &self.form {
            Form::SubPixel(weight, bias) => {
                // Phase φ of output frame q (sample q·stride + φ) is channel φ·cout + c of an
                // ordinary convolution of the t + m - 1 input frames: t frames of `stride · cout`
                // channels, interleaved into t·stride samples.
                let phases = full.conv1d(weight, Some(bias), Conv1dParams::default())?;
                let interleaved = phases.reshape(&[1, self.stride, self.cout, t])?.permute(&[0, 2, 3, 1])?;
                interleaved.contiguous()?.reshape(&[1, self.cout, t * self.stride])
            }
            Form::Transposed(weight, bias) => {
                // A kernel that is not a whole number of strides: the full transposed output,
                // from which the carried frames' samples on the left and the tail on the right
                // are cut.
                let p = Conv1dParams { stride: self.stride, ..Default::default() };
                let y = full.conv_transpose1d(weight, Some(bias), p, 0)?;
                y.narrow(2, self.ctx_len * self.stride, t * self.stride)
            }
        }
    }
}

/// A transposed convolution's weight and bias, as stored or in the sub-pixel form.
enum Form {
    Transposed(Tensor, Tensor),
    SubPixel(Tensor, Tensor),
}

/// A transposed convolution whose kernel is `m` strides, on `m - 1` carried frames plus `t` new
/// ones and trimmed to the `t·stride` new samples, as an ordinary convolution (the sub-pixel
/// form): sample `q·stride + φ` sums weight taps `φ + a·stride` applied to input frame
/// `q + m - 1 - a` (a = 0..m), so it is output channel `φ·cout + c` of a convolution whose tap
/// j (= m - 1 - a) is the weight's tap `φ + (m - 1 - j)·stride`. Returns that `(stride·cout,
/// cin, m)` weight and the bias repeated per phase. Each output is then one sum over `cin·m`
/// products, where the transposed form adds `m` taps' products into it through a strided
/// destination (on the codec's first upsampler, a 75 MB weight read once per tap).
fn sub_pixel(weight: &Tensor, bias: &Tensor, stride: usize) -> Result<(Tensor, Tensor)> {
    let (cin, cout, kernel) = (weight.dim(0), weight.dim(1), weight.dim(2));
    let m = kernel / stride;
    // (cin, cout·k) transposed first, so that both rearrangements below copy along a
    // contiguous source dim: (cout, m, stride, cin), taps reversed, then (stride, cout, cin, m).
    let taps =
        weight.reshape(&[cin, cout * kernel])?.transpose(0, 1)?.contiguous()?.reshape(&[cout, m, stride, cin])?;
    let reversed: Vec<Tensor> = (0..m).rev().map(|a| taps.narrow(1, a, 1)).collect::<Result<_>>()?;
    let phases = Tensor::concat(&reversed.iter().collect::<Vec<_>>(), 1)?
        .permute(&[2, 0, 3, 1])?
        .contiguous()?
        .reshape(&[stride * cout, cin, m])?;
    let biases = Tensor::concat(&vec![bias; stride], 0)?;
    Ok((phases, biases))
}

/// SnakeBeta, `x + 1/(e^β + 1e-9) · sin²(e^α x)` per channel; both factors are computed at load.
pub struct SnakeBeta {
    alpha: Tensor,
    inv_beta: Tensor,
}

impl SnakeBeta {
    pub fn load(w: &Weights, channels: usize) -> Result<Self> {
        let alpha = w.get_shaped("alpha", &[channels])?.exp()?.reshape(&[1, channels, 1])?;
        let inv_beta =
            w.get_shaped("beta", &[channels])?.exp()?.affine(1.0, 1e-9)?.recip()?.reshape(&[1, channels, 1])?;
        Ok(SnakeBeta { alpha, inv_beta })
    }

    /// `x` is `(1, channels, t)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.snake(&self.alpha, &self.inv_beta)
    }
}

/// ELU (alpha 1), which the op set lacks: `(exp(min(x, 0)) - 1) + max(x, 0)`; for x > 0 the first
/// term is exactly 0, so positive inputs pass through unchanged.
pub fn elu(x: &Tensor) -> Result<Tensor> {
    let neg_part = x.neg()?.relu()?.neg()?.exp()?.affine(1.0, -1.0)?;
    neg_part.add(&x.relu()?)
}
