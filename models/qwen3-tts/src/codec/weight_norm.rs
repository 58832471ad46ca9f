//! Conv weights, with weight normalisation folded at load where a checkpoint stores it.
//!
//! `torch.nn.utils.parametrizations.weight_norm` saves `parametrizations.weight.original0` (g,
//! shaped `(d0, 1, 1)`) and `.original1` (v); the legacy `weight_norm` saves `weight_g` /
//! `weight_v`. Both mean `w = g · v / ‖v‖`, the norm taken per index of dim 0 over the other dims
//! (PyTorch's default `dim=0`, also for transposed convs). The released codec stores plain
//! weights; this keeps fine-tuned or re-exported checkpoints loadable.

use infer_core::{Error, Result, Tensor, Weights};

const PARAM_G: &str = "parametrizations.weight.original0";
const PARAM_V: &str = "parametrizations.weight.original1";

/// The conv weight under `w` (`weight`, or its weight-norm parts), checked against `shape`.
pub fn conv_weight(w: &Weights, shape: &[usize]) -> Result<Tensor> {
    if w.contains("weight") {
        return w.get_shaped("weight", shape);
    }
    let (g, v) = if w.contains(PARAM_G) {
        (PARAM_G, PARAM_V)
    } else if w.contains("weight_g") {
        ("weight_g", "weight_v")
    } else {
        // Let the loader name the missing tensor.
        return w.get_shaped("weight", shape);
    };
    let v = w.get_shaped(v, shape)?;
    let mut g_shape = vec![1; shape.len()];
    g_shape[0] = shape[0];
    let g = w.get(g)?;
    if g.elem_count() != shape[0] {
        return Err(Error::Shape(format!("weight-norm gain {:?} does not match weight {shape:?}", g.dims())));
    }
    fold(&g.reshape(&g_shape)?, &v)
}

/// `g · v / ‖v‖` with the norm over every dim but the first.
pub fn fold(g: &Tensor, v: &Tensor) -> Result<Tensor> {
    let mut sq = v.sqr()?;
    for dim in (1..v.rank()).rev() {
        sq = sq.sum_keepdim(dim)?;
    }
    v.mul(&g.div(&sq.sqrt()?)?)
}
