//! The speech prompt, as mistral-common 1.13.1 builds it (`encode_speech_request`) and mlx-audio
//! 0.6.2 embeds it:
//!
//! ```text
//! [BOS] [BEGIN_AUDIO] [AUDIO] x N [NEXT_AUDIO_TEXT] text [REPEAT_AUDIO_TEXT] [BEGIN_AUDIO]
//! ```
//! `N` is the voice's `voice_num_audio_tokens` from tekken.json's audio section; the embedding of
//! the k-th `[AUDIO]` is replaced by row `min(k, rows - 1)` of the voice. The text is sanitized
//! first ([`crate::sanitize`]) and tokenized without special-token parsing. The last prompt
//! position's hidden state makes frame 0: no extra `[AUDIO]` step follows the prefill.

use infer_core::text::tekken::Tekken;
use infer_core::{Error, Result, Tensor};

use crate::backbone::Backbone;

/// The prompt's special ids, read from tekken.json by name.
#[derive(Debug, Clone, Copy)]
pub struct PromptTokens {
    pub bos: u32,
    pub begin_audio: u32,
    pub audio: u32,
    pub text_to_audio: u32,
    pub audio_to_text: u32,
}

impl PromptTokens {
    pub fn from_tekken(t: &Tekken) -> Result<Self> {
        let id = |name: &str| {
            t.special_id(name).ok_or_else(|| Error::Tokenizer(format!("tekken.json has no special token {name}")))
        };
        Ok(PromptTokens {
            bos: id("<s>")?,
            begin_audio: id("[BEGIN_AUDIO]")?,
            audio: id("[AUDIO]")?,
            text_to_audio: id("[NEXT_AUDIO_TEXT]")?,
            audio_to_text: id("[REPEAT_AUDIO_TEXT]")?,
        })
    }

    /// The prompt ids for `text_ids` spoken by a voice of `n_audio` positions.
    pub fn ids(&self, text_ids: &[u32], n_audio: usize) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text_ids.len() + n_audio + 5);
        ids.extend([self.bos, self.begin_audio]);
        ids.extend(std::iter::repeat_n(self.audio, n_audio));
        ids.push(self.text_to_audio);
        ids.extend_from_slice(text_ids);
        ids.extend([self.audio_to_text, self.begin_audio]);
        ids
    }
}

/// The backbone input for `ids`: token embeddings, with each `[AUDIO]` position taking the next
/// voice row (the last row repeated when the prompt has more positions than the voice rows).
/// `voice` is `(rows, dim)`: (1, len, dim).
pub fn embed(backbone: &Backbone, ids: &[u32], audio: u32, voice: &Tensor) -> Result<Tensor> {
    let tokens = backbone.embed_tokens(ids)?;
    let positions: Vec<usize> = ids.iter().enumerate().filter(|(_, &i)| i == audio).map(|(p, _)| p).collect();
    let (Some(&first), Some(&last)) = (positions.first(), positions.last()) else { return Ok(tokens) };
    if last - first + 1 != positions.len() {
        return Err(Error::invalid("the prompt's [AUDIO] positions must be one run"));
    }
    let rows = voice.dim(0) as u32;
    let pick: Vec<u32> = (0..positions.len() as u32).map(|k| k.min(rows - 1)).collect();
    let voice_rows = voice
        .index_select(&Tensor::from_u32(voice.backend(), &pick, &[pick.len()])?, 0)?
        .to_dtype(tokens.dtype())?
        .reshape(&[1, pick.len(), voice.dim(1)])?;
    let before = tokens.narrow(1, 0, first)?;
    let after = tokens.narrow(1, last + 1, ids.len() - last - 1)?;
    Tensor::concat(&[&before, &voice_rows, &after], 1)
}
