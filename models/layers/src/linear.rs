//! The linear projection every architecture uses.

use infer_sdk::{Result, Tensor, Weights};

/// `y = x Wᵀ + b`; the weight may be quantized.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// Loads `weight` (quantized when `w` asks for it: [`Weights::get_linear`]) and `bias`.
    pub fn load(w: &Weights, out_dim: usize, in_dim: usize, bias: bool) -> Result<Self> {
        let weight = w.get_linear("weight", out_dim, in_dim)?;
        let bias = if bias { Some(w.get_shaped("bias", &[out_dim])?) } else { None };
        Ok(Linear { weight, bias })
    }

    pub fn from_weight(weight: Tensor) -> Self {
        Linear { weight, bias: None }
    }

    /// The weight's dtype (a block format when quantized).
    pub fn weight_dtype(&self) -> infer_sdk::DType {
        self.weight.dtype()
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// Linear layers over the same input (attention's q/k/v, SwiGLU's gate/up), run as one product
/// when their weights are quantized at load: the rows stacked into one matrix give one pass over
/// the input, one quantization of the activations and one thread-pool dispatch instead of one per
/// layer. Each output row is the same dot product either way, so the results are identical.
/// Weights stored quantized (GGUF) or kept in a float dtype stay separate: stacking those would
/// copy them, and a float product may sum differently for another matrix width.
pub struct StackedLinear {
    parts: Parts,
}

enum Parts {
    Stacked { linear: Linear, outs: Vec<usize> },
    Separate(Vec<Linear>),
}

impl StackedLinear {
    /// `parts`: each layer's weights (rooted at the layer) and output size; all read `in_dim`,
    /// all with a bias or all without.
    pub fn load(parts: &[(Weights, usize)], in_dim: usize, bias: bool) -> Result<Self> {
        let parts: Vec<(Weights, usize, bool)> = parts.iter().map(|(w, out)| (w.clone(), *out, bias)).collect();
        Self::load_biased(&parts, in_dim)
    }

    /// As [`StackedLinear::load`], each part saying whether it has a bias. Parts that differ
    /// there (Whisper's k projection has none) stay separate.
    pub fn load_biased(parts: &[(Weights, usize, bool)], in_dim: usize) -> Result<Self> {
        let first = &parts.first().ok_or_else(|| infer_sdk::Error::invalid("no linear layers to stack"))?.0;
        let bias = parts[0].2;
        let same_bias = parts.iter().all(|p| p.2 == bias);
        // Quantized at load, or stored quantized (`infer quantize`) in one format the backend runs.
        let stored = first.stored_dtype("weight");
        let stored_quant = stored.filter(|d| {
            d.is_quantized()
                && first.backend().supports_dtype(*d)
                && parts.iter().all(|(w, _, _)| w.stored_dtype("weight") == stored)
        });
        let stack_as = stored_quant.or_else(|| {
            first.linear_quant().filter(|q| {
                in_dim.is_multiple_of(q.block().0)
                    && parts.iter().all(|(w, _, _)| w.stored_dtype("weight").is_some_and(|d| d.is_float()))
            })
        });
        let Some(quant) = stack_as.filter(|_| same_bias) else {
            let separate = parts.iter().map(|(w, out, bias)| Linear::load(w, *out, in_dim, *bias));
            return Ok(StackedLinear { parts: Parts::Separate(separate.collect::<Result<_>>()?) });
        };
        // Stacked along the rows (dim 0). Each weight is quantized as `Linear::load` quantizes
        // it, then the blocks are stacked (they never span rows: the same blocks as quantizing
        // the stacked floats, without a float copy of the stack).
        let concat = |ts: Vec<Tensor>| Tensor::concat(&ts.iter().collect::<Vec<_>>(), 0);
        let weights = parts.iter().map(|(w, out, _)| w.get_linear("weight", *out, in_dim));
        let weight = concat(weights.collect::<Result<_>>()?)?;
        let weight = if weight.dtype() == quant { weight } else { weight.to_dtype(quant)? };
        if stored_quant.is_some() {
            // The parts were the file's pages; the stack is a copy.
            parts.iter().for_each(|(w, _, _)| w.release("weight"));
        }
        let bias = if bias {
            let biases = parts.iter().map(|(w, out, _)| w.get_shaped("bias", &[*out]));
            Some(concat(biases.collect::<Result<_>>()?)?)
        } else {
            None
        };
        let outs = parts.iter().map(|(_, out, _)| *out).collect();
        Ok(StackedLinear { parts: Parts::Stacked { linear: Linear { weight, bias }, outs } })
    }

    /// Each layer's output for `x`, in the order they were loaded.
    pub fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        match &self.parts {
            Parts::Separate(ls) => ls.iter().map(|l| l.forward(x)).collect(),
            Parts::Stacked { linear, outs } => {
                let y = linear.forward(x)?;
                let last = y.rank() - 1;
                let mut start = 0;
                outs.iter()
                    .map(|&n| {
                        let part = y.narrow(last, start, n);
                        start += n;
                        part
                    })
                    .collect()
            }
        }
    }
}
