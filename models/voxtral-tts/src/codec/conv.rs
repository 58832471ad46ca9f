//! The codec's weight-normalised convolutions (mlx-audio `WeightNormConv`): causal conv1d with
//! replicate (decoder stages) or reflect (output projection) left padding, and the causal transposed
//! conv1d that upsamples (no padding, output trimmed to `t * stride`).
//!
//! Weight norm: `w = g * v / sqrt(sum(v²) + 1e-12)` per output row, `g` = `original0`
//! `(out, 1, 1)`, `v` = `original1` `(out, in, k)` (PyTorch layouts: `(cout, cin, k)` for a conv,
//! `(cin, cout, k)` for a transposed conv), folded into one weight at load.

use infer_core::{Conv1dParams, Error, Result, Tensor, Weights};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pad {
    /// Repeat the first frame (`mode="edge"`).
    Replicate,
    /// Mirror the frames after the first, without repeating it.
    Reflect,
}

/// The folded weight of `w.parametrizations.weight.original{0,1}` with `v` of shape `(rows, cols, k)`.
pub fn weight_norm(w: &Weights, rows: usize, cols: usize, k: usize) -> Result<Tensor> {
    let p = w.prefixed("parametrizations.weight");
    let g = p.get_shaped("original0", &[rows, 1, 1])?;
    let v = p.get_shaped("original1", &[rows, cols, k])?;
    let norm = v.sqr()?.sum_keepdim(2)?.sum_keepdim(1)?.affine(1.0, 1e-12)?.sqrt()?;
    g.mul(&v)?.div(&norm)
}

/// Causal conv1d of a `(1, cin, t)` signal.
pub struct CausalConv {
    weight: Tensor,
    kernel: usize,
    stride: usize,
    pad: Pad,
}

impl CausalConv {
    /// `w` is the block's `conv` (weights `(cout, cin, kernel)`).
    pub fn load(w: &Weights, cin: usize, cout: usize, kernel: usize, stride: usize, pad: Pad) -> Result<Self> {
        Ok(CausalConv { weight: weight_norm(w, cout, cin, kernel)?, kernel, stride, pad })
    }

    /// `kernel - stride` frames of left padding and enough on the right for whole strides (mlx-audio
    /// `_conv_1d`), then a valid convolution.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (k, s, len) = (self.kernel, self.stride, x.dim(2));
        let left = k - s;
        let frames = (len + left).saturating_sub(k).div_ceil(s) + 1;
        let right = ((frames - 1) * s + k).saturating_sub(len + left);
        let x = pad_time(x, left, right, self.pad)?;
        x.conv1d(&self.weight, None, Conv1dParams { stride: s, ..Default::default() })
    }
}

/// Causal transposed conv1d: `t` frames in, `t * stride` out.
pub struct CausalConvTranspose {
    weight: Tensor,
    stride: usize,
}

impl CausalConvTranspose {
    /// `w` is the block's `conv` (weights `(cin, cout, kernel)`, PyTorch's transposed layout).
    pub fn load(w: &Weights, cin: usize, cout: usize, kernel: usize, stride: usize) -> Result<Self> {
        Ok(CausalConvTranspose { weight: weight_norm(w, cin, cout, kernel)?, stride })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let out =
            x.conv_transpose1d(&self.weight, None, Conv1dParams { stride: self.stride, ..Default::default() }, 0)?;
        out.narrow(2, 0, x.dim(2) * self.stride)
    }
}

/// `x` (1, c, t) with `left` / `right` frames added along time.
fn pad_time(x: &Tensor, left: usize, right: usize, pad: Pad) -> Result<Tensor> {
    if left == 0 && right == 0 {
        return Ok(x.clone());
    }
    let (c, t) = (x.dim(1), x.dim(2));
    if t == 0 {
        return Err(Error::invalid("codec: cannot pad an empty signal"));
    }
    match pad {
        Pad::Replicate => {
            let mut parts = Vec::with_capacity(3);
            if left > 0 {
                parts.push(x.narrow(2, 0, 1)?.broadcast_to(&[1, c, left])?);
            }
            parts.push(x.clone());
            if right > 0 {
                parts.push(x.narrow(2, t - 1, 1)?.broadcast_to(&[1, c, right])?);
            }
            Tensor::concat(&parts.iter().collect::<Vec<_>>(), 2)
        }
        Pad::Reflect => {
            // As mlx-audio: a signal no longer than the padding is first extended with zeros (and
            // the extension cut off again afterwards).
            let extra = (left.max(right) + 1).saturating_sub(t);
            let x = if extra > 0 {
                Tensor::concat(&[x, &Tensor::zeros(x.backend(), x.dtype(), &[1, c, extra])?], 2)?
            } else {
                x.contiguous()?
            };
            let t = x.dim(2);
            let mirror = |ids: Vec<u32>| -> Result<Tensor> {
                let n = ids.len();
                x.index_select(&Tensor::from_u32(x.backend(), &ids, &[n])?, 2)
            };
            let mut parts = Vec::with_capacity(3);
            if left > 0 {
                parts.push(mirror((1..=left as u32).rev().collect())?);
            }
            parts.push(x.clone());
            if right > 0 {
                parts.push(mirror((t - 1 - right..t - 1).rev().map(|i| i as u32).collect())?);
            }
            let padded = Tensor::concat(&parts.iter().collect::<Vec<_>>(), 2)?;
            padded.narrow(2, 0, padded.dim(2) - extra)
        }
    }
}
