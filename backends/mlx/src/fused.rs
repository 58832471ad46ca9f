//! Linear algebra, normalizations, rotary embeddings and convolutions.

use infer_core::RopeLayout;
use mlx_rs::{fast, ops, Array, Stream};

use crate::error::{bail, OpResult};
use crate::ops::{cast, f32_of, float_only, narrow};
use crate::tensor::MlxTensor;

/// `a @ b` with PyTorch `matmul` semantics (batch dims broadcast, 1-D operands promoted).
pub fn matmul(a: &MlxTensor, b: &MlxTensor) -> OpResult<MlxTensor> {
    if a.dtype != b.dtype {
        bail!("dtypes differ: {} @ {} (convert one first)", a.dtype, b.dtype);
    }
    if a.rank() == 0 || b.rank() == 0 {
        bail!("matmul of a scalar");
    }
    float_only(a)?;
    MlxTensor::new(a.a.matmul(&b.a)?)
}

/// `x @ wᵀ + bias` for `x` of any rank >= 1 and `w` of shape (out, in). The transpose is a view:
/// MLX's matmul reads it as a transposed operand, without a copy.
pub fn linear(x: &MlxTensor, w: &MlxTensor, bias: Option<&MlxTensor>) -> OpResult<MlxTensor> {
    if w.rank() != 2 {
        bail!("weight must be (out, in), got {:?}", w.dims());
    }
    if x.dtype != w.dtype {
        bail!(
            "input is {} but the weight is {}: convert one of them (weights are usually converted at load)",
            x.dtype,
            w.dtype
        );
    }
    float_only(x)?;
    let (n, k) = (w.dims()[0], w.dims()[1]);
    if x.dims().last() != Some(&k) {
        bail!("input {:?} does not end with the weight's in-features {k} (weight [{n}, {k}])", x.dims());
    }
    let y = x.a.matmul(w.a.t())?;
    let y = match bias {
        None => y,
        Some(b) => {
            if b.dims().iter().product::<usize>() != n {
                bail!("bias {:?} does not match {n} out-features", b.dims());
            }
            y.add(cast(&b.a, x.a.dtype())?.reshape(&[n as i32])?)?
        }
    };
    MlxTensor::new(y)
}

/// The weight of a last-dim norm: `dim` values, as f32.
fn norm_param(p: &MlxTensor, dim: usize, what: &str) -> OpResult<Array> {
    if p.dims().iter().product::<usize>() != dim {
        bail!("{what} {:?} does not match the normalized dim {dim}", p.dims());
    }
    Ok(f32_of(p)?.reshape(&[dim as i32])?)
}

/// MLX's fused RMSNorm. f16/bf16 inputs are normalized in f32 (as the reference
/// implementations do) and the result is rounded once; the weight is applied in f32 too.
pub fn rms_norm(x: &MlxTensor, w: &MlxTensor, eps: f32) -> OpResult<MlxTensor> {
    float_only(x)?;
    let d = *x.dims().last().unwrap_or(&0);
    let wf = norm_param(w, d, "weight")?;
    let y = fast::rms_norm(f32_of(x)?, Some(&wf), eps)?;
    MlxTensor::new(cast(&y, x.a.dtype())?)
}

/// MLX's fused LayerNorm (biased variance) over the last dim, in f32.
pub fn layer_norm(x: &MlxTensor, w: &MlxTensor, b: Option<&MlxTensor>, eps: f32) -> OpResult<MlxTensor> {
    float_only(x)?;
    let d = *x.dims().last().unwrap_or(&0);
    let wf = norm_param(w, d, "weight")?;
    let bf = b.map(|b| norm_param(b, d, "bias")).transpose()?;
    let y = fast::layer_norm(f32_of(x)?, Some(&wf), bf.as_ref(), eps)?;
    MlxTensor::new(cast(&y, x.a.dtype())?)
}

/// Rotary embedding of x (b, h, t, d) with cos/sin of shape (t', d/2), t' >= t (the first t
/// rows are used). The op contract hands over cos/sin tables (any frequency scaling already
/// applied by the model), which MLX's fused `fast::rope` cannot take (it derives the angles
/// from a base or inverse frequencies and an offset), so the rotation is written out; MLX fuses
/// the element-wise chain at evaluation. Half-precision inputs rotate in f32 and round once.
pub fn rope(
    x: &MlxTensor,
    cos: &MlxTensor,
    sin: &MlxTensor,
    layout: RopeLayout,
    stream: &Stream,
) -> OpResult<MlxTensor> {
    float_only(x)?;
    let [b, h, t, d] = match *x.dims() {
        [b, h, t, d] => [b as i32, h as i32, t as i32, d as i32],
        _ => bail!("rope needs x of shape (b, h, t, d), got {:?}", x.dims()),
    };
    if d % 2 != 0 {
        bail!("rope needs an even head dim, got {d}");
    }
    let half = d / 2;
    let prep = |cs: &MlxTensor, name: &str| -> OpResult<Array> {
        match *cs.dims() {
            [rows, hh] if hh as i32 == half && rows as i32 >= t => {}
            _ => bail!("{name} table {:?} does not fit x {:?} (want ({t}, {half}))", cs.dims(), x.dims()),
        }
        cast(&narrow(&cs.a, 2, 0, 0, t as usize, stream)?, mlx_rs::Dtype::Float32)
    };
    let (c, s) = (prep(cos, "cos")?, prep(sin, "sin")?);
    let xf = f32_of(x)?;
    let y = match layout {
        RopeLayout::SplitHalf => {
            let x1 = narrow(&xf, 4, 3, 0, half as usize, stream)?;
            let x2 = narrow(&xf, 4, 3, half as usize, half as usize, stream)?;
            let lo = x1.multiply(&c)?.subtract(x2.multiply(&s)?)?;
            let hi = x2.multiply(&c)?.add(x1.multiply(&s)?)?;
            ops::concatenate(&[lo, hi], -1)?
        }
        RopeLayout::Interleaved => {
            let xr = xf.reshape(&[b, h, t, half, 2])?;
            let x0 = narrow(&xr, 5, 4, 0, 1, stream)?.squeeze_axes(&[-1])?;
            let x1 = narrow(&xr, 5, 4, 1, 1, stream)?.squeeze_axes(&[-1])?;
            let e = x0.multiply(&c)?.subtract(x1.multiply(&s)?)?;
            let o = x0.multiply(&s)?.add(x1.multiply(&c)?)?;
            ops::stack(&[e, o], -1)?.reshape(&[b, h, t, d])?
        }
    };
    MlxTensor::new(cast(&y, x.a.dtype())?)
}

// ---- convolutions ----------------------------------------------------------------------------
//
// PyTorch layouts (x (b, cin, l), conv weight (cout, cin/groups, k), transposed-conv weight
// (cin, cout/groups, k)) against MLX's channels-last ones (x (b, l, cin), weight
// (cout, k, cin/groups)): operands are transposed in and the result back out.

fn conv_check(x: &MlxTensor, w: &MlxTensor, stride: usize, dilation: usize, groups: usize) -> OpResult<()> {
    if stride == 0 || dilation == 0 || groups == 0 {
        bail!("stride, dilation and groups must be >= 1 (stride {stride}, dilation {dilation}, groups {groups})");
    }
    if x.dtype != w.dtype {
        bail!("input is {} but the weight is {}", x.dtype, w.dtype);
    }
    float_only(x)?;
    if x.rank() != 3 || w.rank() != 3 {
        bail!("conv1d wants x (b, cin, l) and w of rank 3, got {:?} and {:?}", x.dims(), w.dims());
    }
    Ok(())
}

fn add_bias(y_blc: Array, bias: Option<&MlxTensor>, cout: usize) -> OpResult<Array> {
    let y = match bias {
        None => y_blc,
        Some(b) => {
            if b.dims().iter().product::<usize>() != cout {
                bail!("bias {:?} does not match {cout} output channels", b.dims());
            }
            y_blc.add(cast(&b.a, y_blc.dtype())?.reshape(&[cout as i32])?)?
        }
    };
    // (b, l', cout) -> (b, cout, l')
    Ok(y.transpose_axes(&[0, 2, 1])?)
}

pub fn conv1d(
    x: &MlxTensor,
    w: &MlxTensor,
    bias: Option<&MlxTensor>,
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
) -> OpResult<MlxTensor> {
    conv_check(x, w, stride, dilation, groups)?;
    let (cin, cout) = (x.dims()[1], w.dims()[0]);
    if cin % groups != 0 || cout % groups != 0 || w.dims()[1] * groups != cin {
        bail!("weight {:?} does not fit {cin} input channels in {groups} groups", w.dims());
    }
    let xm = x.a.transpose_axes(&[0, 2, 1])?;
    let wm = w.a.transpose_axes(&[0, 2, 1])?;
    let y = ops::conv1d(&xm, &wm, stride as i32, padding as i32, dilation as i32, groups as i32)?;
    MlxTensor::new(add_bias(y, bias, cout)?)
}

#[allow(clippy::too_many_arguments)]
pub fn conv_transpose1d(
    x: &MlxTensor,
    w: &MlxTensor,
    bias: Option<&MlxTensor>,
    stride: usize,
    padding: usize,
    output_padding: usize,
    dilation: usize,
    groups: usize,
) -> OpResult<MlxTensor> {
    conv_check(x, w, stride, dilation, groups)?;
    let [cin, cout_g, k] = [w.dims()[0], w.dims()[1], w.dims()[2]];
    if x.dims()[1] != cin || cin % groups != 0 {
        bail!("weight {:?} does not fit {} input channels in {groups} groups", w.dims(), x.dims()[1]);
    }
    let cout = cout_g * groups;
    // (cin, cout/g, k) -> (g, cin/g, cout/g, k) -> (g, cout/g, k, cin/g) -> (cout, k, cin/g)
    let g = groups as i32;
    let wm =
        w.a.reshape(&[g, (cin / groups) as i32, cout_g as i32, k as i32])?
            .transpose_axes(&[0, 2, 3, 1])?
            .reshape(&[cout as i32, k as i32, (cin / groups) as i32])?;
    let xm = x.a.transpose_axes(&[0, 2, 1])?;
    let y = ops::conv_transpose1d(
        &xm,
        &wm,
        stride as i32,
        padding as i32,
        dilation as i32,
        output_padding as i32,
        groups as i32,
    )?;
    MlxTensor::new(add_bias(y, bias, cout)?)
}
