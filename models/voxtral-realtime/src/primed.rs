//! The part of a session no audio decides. Every padded stream starts with the left padding (32
//! tokens of silence), and the decoder's first positions read the prompt (`<s>` and
//! `[STREAMING_PAD]`s) with those tokens' audio: the encoder's state after them, and the
//! decoder's cache, are the same for every session of one delay (the delay sets the decoder's
//! time condition). They are computed once per delay ([`crate::VoxtralModel::primed`]) and each
//! session starts from a copy, so its first token waits for the delay's audio and a few prompt
//! positions, not for encoding the padding and prefilling the whole prompt (~1.8 s at 4 bits on
//! two cores, before this; under real-time pacing a stream stayed that far behind).

use std::time::Instant;

use infer_core::{DType, KvCache, Result, Tensor};

use crate::encoder::EncoderState;
use crate::frontend::LogMelStream;
use crate::model::VoxtralModel;

pub struct Primed {
    /// Prompt positions done: their tokens' audio encoded, their keys and values cached.
    pub tokens: usize,
    pub encoder: EncoderState,
    pub cache: KvCache,
    /// For traced sessions, those tokens' log-mel frames, encoder frames and audio embeddings
    /// (row-major f32, as [`crate::Trace`] keeps them).
    pub mel: Vec<f32>,
    pub encoder_out: Vec<f32>,
    pub projector: Vec<f32>,
}

/// The decoder's prompt for `delay_tokens`: `<s>`, then a `[STREAMING_PAD]` per left-padding
/// and per delay token.
pub fn prompt(m: &VoxtralModel, delay_tokens: usize) -> Vec<u32> {
    let mut prompt = vec![m.bos];
    prompt.extend(std::iter::repeat_n(m.streaming_pad, m.stream.left_pad_tokens + delay_tokens));
    prompt
}

impl Primed {
    /// Encodes the tokens whose log-mel frames are all padding (not the prompt's last position,
    /// which picks the first token) and runs their prompt positions through the decoder.
    pub fn compute(m: &VoxtralModel, delay_tokens: usize) -> Result<Primed> {
        let started = Instant::now();
        let frames = LogMelStream::new(&m.stream, m.params.log_mel_max)?.ready_frames(None)?;
        let n_mels = m.stream.num_mel_bins;
        let per_token = m.stream.mels_per_token() * n_mels;
        let prompt = prompt(m, delay_tokens);
        let tokens = (frames.len() / per_token).min(prompt.len() - 1);
        let mut encoder = m.encoder.start(&m.backend, m.dtype)?;
        let mut cache = m.decoder.start();
        let mel = frames[..tokens * per_token].to_vec();
        if tokens == 0 {
            return Ok(Primed { tokens, encoder, cache, mel, encoder_out: Vec::new(), projector: Vec::new() });
        }
        let input = Tensor::from_f32(&m.backend, &mel, &[1, mel.len() / n_mels, n_mels])?
            .to_dtype(m.dtype)?
            .transpose(1, 2)?
            .contiguous()?;
        let encoded = m.encoder.forward(&mut encoder, &input)?;
        let audio = m.projector.forward(&encoded)?;
        let x = audio.add(&m.decoder.embed(&prompt[..tokens])?)?;
        let scales = m.decoder.ada_scales(&m.backend, m.dtype, delay_tokens)?;
        m.decoder.forward(&x, &mut cache, &scales)?;
        let f32s = |t: &Tensor| t.to_dtype(DType::F32)?.to_vec_f32();
        let (encoder_out, projector) = (f32s(&encoded)?, f32s(&audio)?);
        tracing::debug!(tokens, delay_tokens, seconds = started.elapsed().as_secs_f64(), "voxtral-realtime primed");
        // Kept compact (the buffers' spare room would be most of it).
        let (encoder, cache) = (encoder.detached()?, cache.detached()?);
        Ok(Primed { tokens, encoder, cache, mel, encoder_out, projector })
    }
}
