//! Voxtral Realtime loaded: the front-end contract, encoder, projector, decoder and tokenizer,
//! shared (behind an `Arc`) by every session, and the [`SpeechRecognizer`] over them. Offline
//! transcription is a session fed the whole recording at once: one model path.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use infer_core::audio::{Audio, RNone, RSome, RecognitionOptions, RecognitionSession, SpeechRecognizer, Transcript};
use infer_core::audio_io::resample;
use infer_core::text::tekken::Tekken;
use infer_core::{Backend, DType, Error, ModelLoadOptions, Result};

use crate::checkpoint::{Checkpoint, Layout};
use crate::config::Params;
use crate::decoder::TextDecoder;
use crate::encoder::AudioEncoder;
use crate::frontend::StreamParams;
use crate::primed::Primed;
use crate::projector::Projector;
use crate::session::Session;

/// Delays the model was trained for (mistral's model card: 80 ms .. 2.4 s, in 80 ms steps).
const DELAY_RANGE_MS: (u32, u32) = (80, 2400);

pub struct VoxtralModel {
    pub params: Params,
    pub stream: StreamParams,
    pub tekken: Tekken,
    pub layout: Layout,
    pub(crate) encoder: AudioEncoder,
    pub(crate) projector: Projector,
    pub(crate) decoder: TextDecoder,
    pub(crate) backend: Backend,
    pub(crate) dtype: DType,
    pub(crate) bos: u32,
    pub(crate) eos: u32,
    pub(crate) streaming_pad: u32,
    /// Each delay's sessions' common start ([`Primed`]), made on first use; at most
    /// [`PRIMED_DELAYS`] kept.
    primed: Mutex<HashMap<usize, PrimedSlot>>,
}

/// One delay's primed state, once made (locked while it is made: only that delay's sessions wait).
type PrimedSlot = Arc<Mutex<Option<Arc<Primed>>>>;

/// Delays whose primed state is kept (~35 MB each for the 4B model in bf16); the default delay's
/// always is.
const PRIMED_DELAYS: usize = 4;

impl VoxtralModel {
    /// The state every session of `delay_tokens` starts from.
    pub fn primed(&self, delay_tokens: usize) -> Result<Arc<Primed>> {
        let slot = {
            let mut slots = self.primed.lock().unwrap_or_else(|e| e.into_inner());
            if !slots.contains_key(&delay_tokens) && slots.len() >= PRIMED_DELAYS {
                // Sessions hold copies of what they started from: forgetting one costs only time.
                let default = self.stream.delay_tokens(self.stream.default_delay_ms);
                if let Some(k) = slots.keys().copied().find(|&k| k != default) {
                    slots.remove(&k);
                }
            }
            slots.entry(delay_tokens).or_default().clone()
        };
        let mut made = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = made.as_ref() {
            return Ok(p.clone());
        }
        let p = Arc::new(Primed::compute(self, delay_tokens)?);
        *made = Some(p.clone());
        Ok(p)
    }
}

/// The recognizer: cheap to clone, sessions share its weights.
#[derive(Clone)]
pub struct VoxtralRealtime(pub Arc<VoxtralModel>);

impl VoxtralRealtime {
    /// Loads a checkpoint in either layout (Hugging Face or Mistral-native).
    pub fn load(dir: &Path, backend: &Backend, options: &ModelLoadOptions) -> Result<Self> {
        let dtype = options.dtype;
        let ckpt = Checkpoint::open(dir, backend, dtype)?;
        let stream = StreamParams::from_tekken(&ckpt.tekken)
            .map_err(|e| Error::config(dir.join("tekken.json"), e.to_string()))?;
        let p = &ckpt.params;
        let tekken_path = dir.join("tekken.json");
        if stream.num_mel_bins != p.encoder.num_mel_bins {
            return Err(Error::config(
                &tekken_path,
                format!("{} mel bins, but the encoder takes {}", stream.num_mel_bins, p.encoder.num_mel_bins),
            ));
        }
        if stream.mels_per_token() != 2 * p.downsample_factor {
            return Err(Error::config(
                &tekken_path,
                format!(
                    "{} mel frames per token, but the encoder makes one token of {} (conv stride 2 x downsample {})",
                    stream.mels_per_token(),
                    2 * p.downsample_factor,
                    p.downsample_factor
                ),
            ));
        }
        let special = |name: &str| {
            ckpt.tekken.special_id(name).ok_or_else(|| {
                Error::config(&tekken_path, format!("no special token {name}: not a Voxtral Realtime tokenizer"))
            })
        };
        let (bos, eos, streaming_pad) = (special("<s>")?, special("</s>")?, special("[STREAMING_PAD]")?);
        let rope = ckpt.rope_layout();
        let w = &ckpt.weights;
        // Every linear is quantized when asked (encoder, projector, decoder, tied head): a
        // streamed 80 ms chunk runs the encoder on 4 frames and the decoder on one token, so
        // each chunk streams all of them, and real time is their bytes over the bandwidth.
        let w = w.with_linear_quant(options.quant())?;
        let model = VoxtralModel {
            encoder: AudioEncoder::load(&w.prefixed("audio_tower"), &p.encoder, rope)?,
            projector: Projector::load(&w.prefixed("multi_modal_projector"), p)?,
            decoder: TextDecoder::load(&w.prefixed("language_model"), &p.decoder, rope)?,
            params: ckpt.params.clone(),
            stream,
            tekken: ckpt.tekken,
            layout: ckpt.layout,
            backend: backend.clone(),
            dtype,
            bos,
            eos,
            streaming_pad,
            primed: Mutex::new(HashMap::new()),
        };
        // The default delay's common start, now: a stream's first token then waits only for
        // its own audio.
        model.primed(model.stream.delay_tokens(model.stream.default_delay_ms))?;
        Ok(VoxtralRealtime(Arc::new(model)))
    }

    /// A streaming session with these options.
    pub fn session(&self, options: &RecognitionOptions) -> Result<Session> {
        if let RSome(lang) = &options.language {
            tracing::warn!("Voxtral Realtime detects the language itself; ignoring language {lang:?}");
        }
        let delay_ms = match options.delay_ms {
            RSome(d) if d < DELAY_RANGE_MS.0 || d > DELAY_RANGE_MS.1 || d % 80 != 0 => {
                return Err(Error::invalid(format!(
                    "transcription delay {d} ms: Voxtral Realtime takes a multiple of 80 ms from {} to {} ms",
                    DELAY_RANGE_MS.0, DELAY_RANGE_MS.1
                )))
            }
            RSome(d) => d as f64,
            RNone => self.0.stream.default_delay_ms,
        };
        Session::new(self.0.clone(), delay_ms, options.max_tokens)
    }
}

/// Rejects audio no model can transcribe, with a line a user can act on.
fn check_input(audio: &Audio) -> Result<()> {
    if audio.sample_rate == 0 {
        return Err(Error::invalid("audio has a sample rate of 0"));
    }
    if audio.samples.is_empty() {
        return Err(Error::invalid("audio has no samples: nothing to transcribe"));
    }
    if let Some(i) = audio.samples.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(format!("audio sample {i} is not a finite number")));
    }
    Ok(())
}

impl SpeechRecognizer for VoxtralRealtime {
    fn sample_rate(&self) -> u32 {
        self.0.stream.sample_rate
    }

    fn transcribe(&self, audio: &Audio, options: &RecognitionOptions) -> Result<Transcript> {
        check_input(audio)?;
        let audio = resample(audio, self.sample_rate())?;
        let mut session = self.session(options)?;
        let mut first = session.push_audio(&audio.samples)?;
        let rest = session.finish()?;
        first.text.push_str(&rest.text);
        first.tokens.extend(rest.tokens);
        Ok(Transcript { text: first.text, tokens: first.tokens, metrics: session.metrics() })
    }

    fn start_session(&self, options: &RecognitionOptions) -> Result<Box<dyn RecognitionSession>> {
        Ok(Box::new(self.session(options)?))
    }
}
