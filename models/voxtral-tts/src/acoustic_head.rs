//! The acoustic head: one backbone hidden state -> one frame of codes.
//!
//! ```text
//! h --semantic_codebook_output--> logits (EMPTY_AUDIO and padding masked) --argmax--> semantic code
//! h --llm_projection------------------------------------------------┐
//! t --sinusoid--time_projection-------------------------------------┼-> [x_t, t, h] --3-token
//! x_t --input_projection--------------------------------------------┘   bidirectional transformer
//!                                                                        --> velocity of token 0
//! x_0 ~ N(0, sigma_max²); x_{k+1} = x_k + dt * (alpha v(x_k, t_k, h) + (1 - alpha) v(x_k, t_k, 0))
//! acoustic codes = round_half_even((clip(x_1, -1, 1) + 1) * (levels - 1) / 2) + 2
//! ```
//! As mlx-audio 0.6.2 (`acoustic_head.py`): 8 timesteps `linspace(0, 1, 8)` (7 Euler steps),
//! classifier-free guidance alpha 1.2 with the unconditional branch fed zeros instead of `h`, both
//! branches run as one batch of 2. Steps, alpha and sigma are code constants there, not
//! checkpoint fields.

use infer_core::{Backend, DType, Error, Result, Tensor, Weights};
use infer_layers::{Linear, RmsNorm, SwiGlu};

use crate::config::{VoxtralTtsConfig, N_SPECIAL_CODES};

/// Timesteps of the Euler integration (`n_denoising_steps`).
pub const DENOISING_STEPS: usize = 8;
/// Classifier-free guidance strength (`cfg_alpha`).
pub const CFG_ALPHA: f64 = 1.2;
/// Base of the sinusoidal time embedding (`TimeEmbedding(theta=10000)`).
const TIME_THETA: f64 = 10000.0;

/// Multi-head attention over the 3 tokens without positions or mask.
struct BidirectionalAttention {
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl BidirectionalAttention {
    fn load(w: &Weights, dim: usize, n_heads: usize, n_kv_heads: usize, head_dim: usize) -> Result<Self> {
        Ok(BidirectionalAttention {
            wq: Linear::load(&w.prefixed("wq"), n_heads * head_dim, dim, false)?,
            wk: Linear::load(&w.prefixed("wk"), n_kv_heads * head_dim, dim, false)?,
            wv: Linear::load(&w.prefixed("wv"), n_kv_heads * head_dim, dim, false)?,
            wo: Linear::load(&w.prefixed("wo"), dim, n_heads * head_dim, false)?,
            n_heads,
            n_kv_heads,
            head_dim,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, d) = (x.dim(0), x.dim(1), self.head_dim);
        let heads = |proj: &Linear, n: usize| proj.forward(x)?.reshape(&[b, t, n, d])?.transpose(1, 2);
        let q = heads(&self.wq, self.n_heads)?;
        let k = heads(&self.wk, self.n_kv_heads)?;
        let v = heads(&self.wv, self.n_kv_heads)?;
        let opts = infer_core::AttentionOpts { scale: 1.0 / (d as f32).sqrt(), causal: false, window: 0, softcap: 0.0 };
        let y = Tensor::attention(&q, &k, &v, None, opts)?;
        self.wo.forward(&y.transpose(1, 2)?.reshape(&[b, t, self.n_heads * d])?)
    }
}

struct Block {
    attention_norm: RmsNorm,
    attention: BidirectionalAttention,
    ffn_norm: RmsNorm,
    feed_forward: SwiGlu,
}

/// What one frame decode produced, with the intermediate values the parity tests compare.
#[derive(Debug, Clone)]
pub struct FrameDecode {
    /// The semantic code, then the acoustic codes (all with the +2 special-code offset).
    pub codes: Vec<u32>,
    /// Masked semantic logits (f32).
    pub semantic_logits: Vec<f32>,
    /// Per Euler step: the conditional and unconditional velocities, `[2 * n_acoustic]`.
    pub velocities: Vec<Vec<f32>>,
}

pub struct AcousticHead {
    semantic_codebook_output: Linear,
    acoustic_codebook_output: Linear,
    input_projection: Linear,
    llm_projection: Linear,
    /// `time_projection(time_embedding(t_k))` for each Euler step, (1, 1, dim): constants.
    time_rows: Vec<Tensor>,
    blocks: Vec<Block>,
    norm: RmsNorm,
    semantic_codebook_size: usize,
    acoustic_levels: usize,
    pub n_acoustic: usize,
    sigma_max: f32,
    dim: usize,
}

impl AcousticHead {
    /// `w` is the whole checkpoint.
    pub fn load(w: &Weights, cfg: &VoxtralTtsConfig) -> Result<Self> {
        let a = cfg.audio();
        let t = &a.acoustic_transformer_args;
        let h = w.prefixed("acoustic_transformer");
        let dim = t.dim;
        let blocks = (0..t.n_layers)
            .map(|i| {
                let l = h.prefixed(format!("layers.{i}"));
                Ok(Block {
                    attention_norm: RmsNorm::load(&l.prefixed("attention_norm"), dim, cfg.norm_eps)?,
                    attention: BidirectionalAttention::load(
                        &l.prefixed("attention"),
                        dim,
                        t.n_heads,
                        t.n_kv_heads,
                        t.head_dim,
                    )?,
                    ffn_norm: RmsNorm::load(&l.prefixed("ffn_norm"), dim, cfg.norm_eps)?,
                    feed_forward: SwiGlu::load(&l.prefixed("feed_forward"), dim, t.hidden_dim, false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let time_projection = Linear::load(&h.prefixed("time_projection"), dim, dim, false)?;
        let time_rows = (0..DENOISING_STEPS - 1)
            .map(|k| time_projection.forward(&time_embedding(w.backend(), timestep(k), dim)?.to_dtype(w.dtype())?))
            .collect::<Result<Vec<_>>>()?;
        Ok(AcousticHead {
            // mlx-audio declares it on the acoustic dim and applies it to the backbone's hidden
            // state: the two dims are equal in Voxtral; the backbone's is the one it multiplies.
            semantic_codebook_output: Linear::load(
                &h.prefixed("semantic_codebook_output"),
                cfg.semantic_head_rows(),
                cfg.dim,
                false,
            )?,
            acoustic_codebook_output: Linear::load(
                &h.prefixed("acoustic_codebook_output"),
                a.n_acoustic_codebook,
                dim,
                false,
            )?,
            input_projection: Linear::load(&h.prefixed("input_projection"), dim, a.n_acoustic_codebook, false)?,
            llm_projection: Linear::load(&h.prefixed("llm_projection"), dim, cfg.dim, false)?,
            time_rows,
            blocks,
            norm: RmsNorm::load(&h.prefixed("norm"), dim, cfg.norm_eps)?,
            semantic_codebook_size: a.semantic_codebook_size,
            acoustic_levels: a.acoustic_codebook_size,
            n_acoustic: a.n_acoustic_codebook,
            sigma_max: t.sigma_max as f32,
            dim,
        })
    }

    /// Semantic logits of `h` (1, 1, dim) with EMPTY_AUDIO (code 0) and the padding rows masked to
    /// -inf (mlx-audio adds -1e9: the same argmax), as f32.
    pub fn semantic_logits(&self, h: &Tensor) -> Result<Vec<f32>> {
        let mut logits = self.semantic_codebook_output.forward(h)?.to_dtype(DType::F32)?.to_vec_f32()?;
        logits[0] = f32::NEG_INFINITY;
        for l in logits.iter_mut().skip(self.semantic_codebook_size + N_SPECIAL_CODES) {
            *l = f32::NEG_INFINITY;
        }
        Ok(logits)
    }

    /// The velocities of one Euler step for the batch `[x (cond), x (uncond)]`: (2, 1, n_acoustic).
    /// `llm` is `[llm_projection(h); 0]` (2, 1, dim).
    pub fn velocity(&self, x: &Tensor, step: usize, llm: &Tensor) -> Result<Tensor> {
        let acoustic = self.input_projection.forward(x)?;
        let time = self.time_rows[step].broadcast_to(&[2, 1, self.dim])?;
        let mut y = Tensor::concat(&[&acoustic, &time, llm], 1)?;
        for b in &self.blocks {
            y = y.add(&b.attention.forward(&b.attention_norm.forward(&y)?)?)?;
            y = y.add(&b.feed_forward.forward(&b.ffn_norm.forward(&y)?)?)?;
        }
        self.acoustic_codebook_output.forward(&self.norm.forward(&y)?.narrow(1, 0, 1)?)
    }

    /// The acoustic codes of `h` (1, 1, dim) from the standard-normal draw `noise`
    /// (`n_acoustic` values), with each step's velocities.
    pub fn flow(&self, h: &Tensor, noise: &[f32]) -> Result<(Vec<u32>, Vec<Vec<f32>>)> {
        if noise.len() != self.n_acoustic {
            return Err(Error::invalid(format!(
                "flow-matching noise has {} values per frame, the model needs {}",
                noise.len(),
                self.n_acoustic
            )));
        }
        let backend = h.backend();
        let dtype = h.dtype();
        // The unconditional branch sees zeros instead of h; llm_projection(0) = 0 exactly.
        let cond = self.llm_projection.forward(h)?;
        let llm = Tensor::concat(&[&cond, &cond.scale(0.0)?], 0)?;
        let x0: Vec<f32> = noise.iter().map(|v| v * self.sigma_max).collect();
        let mut x = Tensor::from_f32(backend, &x0, &[1, 1, self.n_acoustic])?.to_dtype(dtype)?;
        let mut velocities = Vec::with_capacity(DENOISING_STEPS - 1);
        for step in 0..DENOISING_STEPS - 1 {
            let v = self.velocity(&Tensor::concat(&[&x, &x], 0)?, step, &llm)?;
            velocities.push(v.to_vec_f32()?);
            let (v_cond, v_uncond) = (v.narrow(0, 0, 1)?, v.narrow(0, 1, 1)?);
            let v = v_cond.scale(CFG_ALPHA)?.add(&v_uncond.scale(1.0 - CFG_ALPHA)?)?;
            let dt = timestep(step + 1) - timestep(step);
            x = x.add(&v.scale(dt)?)?;
        }
        Ok((self.quantize(&x.to_vec_f32()?), velocities))
    }

    /// FSQ: clip to [-1, 1], scale to [0, levels - 1], round half to even (mx.round), offset by the
    /// special codes. Same f32 operation order as mlx-audio.
    pub fn quantize(&self, x: &[f32]) -> Vec<u32> {
        let top = (self.acoustic_levels - 1) as f32;
        x.iter()
            .map(|&v| {
                let scaled = (v.clamp(-1.0, 1.0) + 1.0) * top / 2.0;
                scaled.round_ties_even().clamp(0.0, top) as u32 + N_SPECIAL_CODES as u32
            })
            .collect()
    }
}

/// `t_k = k / (steps - 1)`, in f64 as Python computes it.
fn timestep(k: usize) -> f64 {
    k as f64 / (DENOISING_STEPS - 1) as f64
}

/// `[cos(t f), sin(t f)]` with `f_i = exp(-ln(theta) i / half)`, in f32 (mlx-audio `TimeEmbedding`,
/// vllm-omni's cos-then-sin order): (1, 1, dim).
fn time_embedding(backend: &Backend, t: f64, dim: usize) -> Result<Tensor> {
    let half = dim / 2;
    // Python's float log, rounded to f32 when it meets the f32 arange.
    let log_theta = TIME_THETA.ln() as f32;
    let t = t as f32;
    let angles: Vec<f32> = (0..half).map(|i| t * (-log_theta * i as f32 / half as f32).exp()).collect();
    let emb: Vec<f32> = angles.iter().map(|a| a.cos()).chain(angles.iter().map(|a| a.sin())).collect();
    Tensor::from_f32(backend, &emb, &[1, 1, dim])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timesteps_span_zero_to_one() {
        assert_eq!(timestep(0), 0.0);
        assert_eq!(timestep(DENOISING_STEPS - 1), 1.0);
    }
}
