//! The talker's prompt, laid out as qwen-tts lays it out. Each position is the sum of a text
//! embedding and a codec embedding:
//!
//! ```text
//! text : <|im_start|> assistant \n | pad  pad  ...  pad       bos   | t0  | (t1 t2 ... eos trail, one per step)
//! codec:      (none)               | think think_bos [lang] think_eos [spk] pad | bos |
//! ```
//! With in-context cloning the reference transcript and the reference codes follow instead of `t0`;
//! in non-streaming mode the whole text goes into the prompt and only `pad` trails.

use infer_core::{Error, Result, Tensor};

use crate::code_predictor::CodePredictor;
use crate::config::Qwen3TtsConfig;
use crate::talker::Talker;

/// Who speaks, as the talker sees it.
pub enum SpeakerPrompt {
    None,
    /// An x-vector from the speaker encoder (talker width).
    XVector(Vec<f32>),
    /// A named speaker's codec id (CustomVoice checkpoints).
    CodecId(u32),
}

/// Reference audio codes and the transcript's token ids, for in-context cloning.
pub struct InContext {
    /// Ids of `<|im_start|>assistant\n{transcript}<|im_end|>\n`.
    pub ref_ids: Vec<u32>,
    /// `[frame][codebook]`.
    pub ref_codes: Vec<Vec<u32>>,
}

pub struct Prompt {
    /// (1, t, hidden): what the talker prefills.
    pub prefill: Tensor,
    /// (1, n, hidden): text embeddings added to the codec input one per step, then `pad`.
    pub trailing: Tensor,
    /// (1, 1, hidden): the text `pad` embedding.
    pub pad: Tensor,
}

pub struct PromptParts<'a> {
    /// Ids of `<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n`.
    pub text_ids: &'a [u32],
    pub language_id: Option<u32>,
    pub speaker: &'a SpeakerPrompt,
    pub in_context: Option<&'a InContext>,
    pub non_streaming: bool,
}

/// Ids around the text: 3 before (`<|im_start|>assistant\n`), 5 after.
const ROLE_LEN: usize = 3;
const TAIL_LEN: usize = 5;
/// The reference transcript ends with `<|im_end|>\n`.
const REF_TAIL_LEN: usize = 2;

pub fn build(cfg: &Qwen3TtsConfig, talker: &Talker, cp: &CodePredictor, p: &PromptParts<'_>) -> Result<Prompt> {
    let t = &cfg.talker_config;
    let ids = p.text_ids;
    if ids.len() <= ROLE_LEN + TAIL_LEN {
        return Err(Error::invalid("the text to speak is empty"));
    }
    let text = &ids[ROLE_LEN..ids.len() - TAIL_LEN];

    let specials = talker.text_embed(&[cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id])?;
    let (tts_bos, tts_eos, tts_pad) = (specials.narrow(1, 0, 1)?, specials.narrow(1, 1, 1)?, specials.narrow(1, 2, 1)?);

    let think: Vec<u32> = match p.language_id {
        None => vec![t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id],
        Some(lang) => vec![t.codec_think_id, t.codec_think_bos_id, lang, t.codec_think_eos_id],
    };
    let mut codec_parts = vec![talker.codec_embed(&think)?];
    match p.speaker {
        SpeakerPrompt::None => {}
        SpeakerPrompt::XVector(v) => {
            if v.len() != talker.hidden {
                return Err(Error::invalid(format!(
                    "speaker embedding has {} values, the talker expects {}",
                    v.len(),
                    talker.hidden
                )));
            }
            codec_parts.push(Tensor::from_f32(tts_pad.backend(), v, &[1, 1, v.len()])?.to_dtype(tts_pad.dtype())?);
        }
        SpeakerPrompt::CodecId(id) => codec_parts.push(talker.codec_embed(&[*id])?),
    }
    codec_parts.push(talker.codec_embed(&[t.codec_pad_id, t.codec_bos_id])?);
    let codec = Tensor::concat(&codec_parts.iter().collect::<Vec<_>>(), 1)?;
    let n_codec = codec.dim(1);

    let role = talker.text_embed(&ids[..ROLE_LEN])?;
    let pads = repeat(&tts_pad, n_codec - 2)?;
    let head = Tensor::concat(&[&pads, &tts_bos], 1)?.add(&codec.narrow(1, 0, n_codec - 1)?)?;
    let codec_bos = codec.narrow(1, n_codec - 1, 1)?;
    let mut parts = vec![role, head];

    let trailing = if let Some(icl) = p.in_context {
        let (body, trailing) = in_context(t, talker, cp, icl, text, &tts_eos, &tts_pad, p.non_streaming)?;
        parts.push(body);
        trailing
    } else if p.non_streaming {
        let text_all = Tensor::concat(&[&talker.text_embed(text)?, &tts_eos], 1)?;
        let pads = talker.codec_embed(&vec![t.codec_pad_id; text_all.dim(1)])?;
        parts.push(text_all.add(&pads)?);
        parts.push(tts_pad.add(&codec_bos)?);
        tts_pad.clone()
    } else {
        parts.push(talker.text_embed(&text[..1])?.add(&codec_bos)?);
        if text.len() > 1 {
            Tensor::concat(&[&talker.text_embed(&text[1..])?, &tts_eos], 1)?
        } else {
            tts_eos.clone()
        }
    };
    let prefill = Tensor::concat(&parts.iter().collect::<Vec<_>>(), 1)?;
    Ok(Prompt { prefill, trailing, pad: tts_pad })
}

/// Reference transcript + text against `bos` + reference codes, the in-context cloning prompt.
#[allow(clippy::too_many_arguments)]
fn in_context(
    t: &crate::config::TalkerConfig,
    talker: &Talker,
    cp: &CodePredictor,
    icl: &InContext,
    text: &[u32],
    tts_eos: &Tensor,
    tts_pad: &Tensor,
    non_streaming: bool,
) -> Result<(Tensor, Tensor)> {
    if icl.ref_ids.len() <= ROLE_LEN + REF_TAIL_LEN {
        return Err(Error::invalid("the reference transcript is empty"));
    }
    if icl.ref_codes.is_empty() {
        return Err(Error::invalid("the reference audio gave no codec frames"));
    }
    let mut ids = icl.ref_ids[ROLE_LEN..icl.ref_ids.len() - REF_TAIL_LEN].to_vec();
    ids.extend_from_slice(text);
    let text_embed = Tensor::concat(&[&talker.text_embed(&ids)?, tts_eos], 1)?;

    let column = |g: usize| icl.ref_codes.iter().map(|f| f[g]).collect::<Vec<u32>>();
    let mut codes = talker.codec_embed(&column(0))?;
    for g in 0..cp.groups() {
        codes = codes.add(&cp.embed(g, &column(g + 1))?)?;
    }
    let codec_embed = Tensor::concat(&[&talker.codec_embed(&[t.codec_bos_id])?, &codes], 1)?;
    let (text_len, codec_len) = (text_embed.dim(1), codec_embed.dim(1));

    if non_streaming {
        let pads = talker.codec_embed(&vec![t.codec_pad_id; text_len])?;
        let body = Tensor::concat(&[&text_embed.add(&pads)?, &codec_embed.add(tts_pad)?], 1)?;
        return Ok((body, tts_pad.clone()));
    }
    if text_len > codec_len {
        let body = text_embed.narrow(1, 0, codec_len)?.add(&codec_embed)?;
        Ok((body, text_embed.narrow(1, codec_len, text_len - codec_len)?))
    } else {
        let padded = if codec_len > text_len {
            Tensor::concat(&[&text_embed, &repeat(tts_pad, codec_len - text_len)?], 1)?
        } else {
            text_embed
        };
        Ok((padded.add(&codec_embed)?, tts_pad.clone()))
    }
}

/// `x` (1, 1, h) repeated `n` times along the sequence: (1, n, h).
fn repeat(x: &Tensor, n: usize) -> Result<Tensor> {
    x.broadcast_to(&[1, n, x.dim(2)])?.contiguous()
}
