//! Prompt -> frames. The backbone's last hidden state gives a frame (semantic code, then the flow-
//! matched acoustic codes); the sum of the frame's codebook embeddings is the next backbone input.
//! Generation stops when the semantic code is END_AUDIO (that frame is not emitted) or after
//! `max_frames` frames (mlx-audio 0.6.2 `Model.generate`).
//!
//! The semantic code is the argmax at temperature 0 (mlx-audio always takes the argmax); a positive
//! temperature samples it with top-k / top-p. The flow-matching noise is one standard-normal row per
//! frame decode, from a seeded generator or injected ([`SpeechOptions::injected_noise`]): decode `j`
//! takes row `j` (a decode that ends on END_AUDIO takes its row too).

use std::time::{Duration, Instant};

use infer_core::audio::{InjectedNoise, RNone, RSome, SpeechOptions};
use infer_core::text::sampling::{argmax, Sampler};
use infer_core::{CancelToken, Error, GenerateConfig, Result, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::acoustic_head::{AcousticHead, FrameDecode};
use crate::backbone::Backbone;
use crate::config::END_AUDIO;

/// Where the flow-matching noise comes from.
pub enum FlowNoise<'a> {
    Injected(&'a InjectedNoise),
    Random(Box<StdRng>),
}

impl<'a> FlowNoise<'a> {
    pub fn new(options: &'a SpeechOptions) -> Self {
        match &options.injected_noise {
            RSome(n) => FlowNoise::Injected(n),
            RNone => FlowNoise::Random(Box::new(match options.seed {
                RSome(s) => StdRng::seed_from_u64(s),
                RNone => StdRng::from_os_rng(),
            })),
        }
    }

    /// The `j`-th draw of `width` standard-normal values.
    pub fn draw(&mut self, j: usize, width: usize) -> Result<Vec<f32>> {
        match self {
            FlowNoise::Injected(n) => {
                if n.width != width {
                    return Err(Error::invalid(format!(
                        "injected flow noise has {} values per row, the model draws {width}",
                        n.width
                    )));
                }
                n.row(j).map(<[f32]>::to_vec).ok_or_else(|| {
                    Error::invalid(format!(
                        "injected flow noise has {} rows, frame decode {} needs another",
                        n.rows(),
                        j + 1
                    ))
                })
            }
            // Box-Muller on (0, 1] uniforms.
            FlowNoise::Random(rng) => Ok((0..width)
                .map(|_| {
                    let u1 = 1.0 - rng.random::<f64>();
                    let u2 = rng.random::<f64>();
                    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
                })
                .collect()),
        }
    }
}

/// How a generation ended, and where its time went.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    pub frames: Vec<Vec<u32>>,
    /// Whether it stopped on END_AUDIO (else at `max_frames`).
    pub stopped: bool,
    pub prefill: Duration,
    pub backbone: Duration,
    pub flow: Duration,
}

pub struct Generator<'m> {
    pub backbone: &'m Backbone,
    pub head: &'m AcousticHead,
}

impl Generator<'_> {
    /// One frame from the backbone's hidden state `h` (1, 1, dim): the semantic code (argmax, or
    /// sampled by `sampler`), and unless it is END_AUDIO the acoustic codes from `noise`.
    pub fn decode_frame(&self, h: &Tensor, noise: &[f32], sampler: Option<&mut Sampler>) -> Result<FrameDecode> {
        let semantic_logits = self.head.semantic_logits(h)?;
        let semantic = match sampler {
            Some(s) => s.sample(&mut semantic_logits.clone(), &[]),
            None => argmax(&semantic_logits),
        };
        let mut codes = vec![semantic];
        let mut velocities = Vec::new();
        if semantic != END_AUDIO {
            let (acoustic, v) = self.head.flow(h, noise)?;
            codes.extend(acoustic);
            velocities = v;
        }
        Ok(FrameDecode { codes, semantic_logits, velocities })
    }

    /// Runs the prompt embeddings `prompt` (1, t, dim) and generates frames; `on_frame` sees each
    /// frame as it is made, and returning `false` from it (or cancelling) stops with
    /// [`Error::Cancelled`].
    pub fn generate(
        &self,
        prompt: &Tensor,
        options: &SpeechOptions,
        cancel: &CancelToken,
        on_frame: &mut dyn FnMut(&[u32]) -> bool,
    ) -> Result<Generation> {
        let mut noise = FlowNoise::new(options);
        let mut sampler = (options.temperature > 0.0).then(|| {
            Sampler::new(&GenerateConfig {
                temperature: options.temperature,
                top_k: options.top_k,
                top_p: options.top_p,
                repeat_penalty: 1.0,
                seed: options.seed.into(),
                ..GenerateConfig::default()
            })
        });
        let mut out = Generation::default();
        let t0 = Instant::now();
        let mut cache = self.backbone.new_cache();
        let hidden = self.backbone.forward(prompt, &mut cache)?;
        let mut h = hidden.narrow(1, hidden.dim(1) - 1, 1)?;
        out.prefill = t0.elapsed();
        for j in 0..options.max_frames {
            let t1 = Instant::now();
            let row = noise.draw(j, self.head.n_acoustic)?;
            let frame = self.decode_frame(&h, &row, sampler.as_mut())?.codes;
            out.flow += t1.elapsed();
            if frame[0] == END_AUDIO {
                out.stopped = true;
                break;
            }
            if !on_frame(&frame) || cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
            let t2 = Instant::now();
            if j + 1 < options.max_frames {
                h = self.backbone.forward(&self.backbone.embed_frame(&frame)?, &mut cache)?;
            }
            out.frames.push(frame);
            out.backbone += t2.elapsed();
        }
        Ok(out)
    }
}
