//! Reading audio files (symphonia): wav (8/16/24/32-bit PCM, float, ADPCM), flac, mp3, ogg/vorbis,
//! and ogg/opus when the `audio-encoders` feature is on (opus-pure).

use std::io::Cursor;
use std::path::Path;

use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;

use infer_sdk::audio::Audio;
use infer_sdk::{Error, Result};

/// What the file held before it was turned into mono f32.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AudioInfo {
    pub sample_rate: u32,
    pub channels: usize,
    /// Samples per channel.
    pub frames: usize,
    /// Container / codec, e.g. `wav`, `flac`, `mp3`, `ogg/vorbis`, `ogg/opus`.
    pub format: String,
}

/// A decoded file: mono (channels averaged) at the file's own rate, and what the file was.
#[derive(Debug, Clone)]
pub struct LoadedAudio {
    pub audio: Audio,
    pub info: AudioInfo,
}

/// Interleaved samples as decoded.
pub(crate) struct Interleaved {
    pub samples: Vec<f32>,
    pub channels: usize,
    pub sample_rate: u32,
    pub format: String,
}

impl Interleaved {
    pub fn into_loaded(self) -> LoadedAudio {
        let frames = self.samples.len() / self.channels.max(1);
        let mono = downmix(&self.samples, self.channels);
        LoadedAudio {
            audio: Audio::new(mono, self.sample_rate),
            info: AudioInfo { sample_rate: self.sample_rate, channels: self.channels, frames, format: self.format },
        }
    }
}

/// Averages interleaved channels (librosa's `to_mono`).
pub fn downmix(interleaved: &[f32], channels: usize) -> Vec<f32> {
    if channels <= 1 {
        return interleaved.to_vec();
    }
    let inv = 1.0 / channels as f32;
    interleaved.chunks_exact(channels).map(|f| f.iter().sum::<f32>() * inv).collect()
}

/// Reads and decodes an audio file to mono f32 at its own sample rate.
pub fn read_audio(path: impl AsRef<Path>) -> Result<LoadedAudio> {
    read_audio_within(path, &DecodeLimits::default())
}

/// [`read_audio`] within `limits` (an error past them names the limit and where decoding stopped).
pub fn read_audio_within(path: impl AsRef<Path>, limits: &DecodeLimits) -> Result<LoadedAudio> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let ext = path.extension().and_then(|e| e.to_str());
    Ok(decode_audio_within(bytes, ext, &path.display().to_string(), limits)?)
}

/// Decodes an in-memory audio file. `extension` is a hint only (the content is probed); `name`
/// goes into error messages. No bound on the decoded length: untrusted uploads go through
/// [`decode_audio_within`].
pub fn decode_audio(bytes: Vec<u8>, extension: Option<&str>, name: &str) -> Result<LoadedAudio> {
    decode_audio_within(bytes, extension, name, &DecodeLimits::default()).map_err(Error::from)
}

/// Bounds on what decoding may produce. A few kilobytes of FLAC, Opus or MP3 silence decode to an
/// hour of audio (gigabytes of f32): the byte size of an upload bounds nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeLimits {
    /// Longest audio, in seconds, checked as packets decode: past it decoding stops.
    pub max_seconds: Option<f64>,
}

/// Why [`decode_audio_within`] gave no audio.
#[derive(Debug)]
pub enum DecodeFailure {
    /// Not readable audio (the message names the file).
    Unreadable(Error),
    /// The audio runs past [`DecodeLimits::max_seconds`]: decoding stopped at `reached_seconds`.
    TooLong { name: String, limit_seconds: f64, reached_seconds: f64 },
}

impl std::fmt::Display for DecodeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeFailure::Unreadable(e) => e.fmt(f),
            DecodeFailure::TooLong { name, limit_seconds, reached_seconds } => write!(
                f,
                "{name}: the audio is longer than the limit of {limit_seconds} s (decoding stopped at \
                 {reached_seconds:.1} s)"
            ),
        }
    }
}

impl std::error::Error for DecodeFailure {}

impl From<Error> for DecodeFailure {
    fn from(e: Error) -> Self {
        DecodeFailure::Unreadable(e)
    }
}

impl From<DecodeFailure> for Error {
    fn from(e: DecodeFailure) -> Self {
        match e {
            DecodeFailure::Unreadable(e) => e,
            too_long => Error::invalid(too_long.to_string()),
        }
    }
}

/// The frame budget of a decode: counts frames as packets arrive and stops past the limit.
pub(crate) struct FrameBudget<'a> {
    name: &'a str,
    limit_seconds: Option<f64>,
}

impl FrameBudget<'_> {
    /// `Err` once `frames` at `rate` run past the limit.
    pub fn check(&self, frames: usize, rate: u32) -> std::result::Result<(), DecodeFailure> {
        let Some(limit) = self.limit_seconds else { return Ok(()) };
        let seconds = frames as f64 / rate.max(1) as f64;
        if seconds > limit {
            return Err(DecodeFailure::TooLong {
                name: self.name.to_string(),
                limit_seconds: limit,
                reached_seconds: seconds,
            });
        }
        Ok(())
    }
}

/// [`decode_audio`] within `limits`.
pub fn decode_audio_within(
    bytes: Vec<u8>,
    extension: Option<&str>,
    name: &str,
    limits: &DecodeLimits,
) -> std::result::Result<LoadedAudio, DecodeFailure> {
    if bytes.is_empty() {
        return Err(DecodeFailure::Unreadable(Error::invalid(format!("{name}: empty file (0 bytes), expected audio"))));
    }
    let budget = FrameBudget { name, limit_seconds: limits.max_seconds };
    // The decoders are third-party parsers of untrusted bytes: a panic inside one (the fuzzer found
    // symphonia's WAV channel-mask fix-up overflowing a shift in checked builds) is a bad file.
    let decoded = infer_sdk::error::catch_panic("the decoder panicked", || {
        #[cfg(feature = "audio-encoders")]
        if super::opus::is_ogg_opus(&bytes) {
            return Ok(super::opus::decode_ogg_opus(&bytes, name, &budget));
        }
        Ok(decode_symphonia(close_open_ended_wav(bytes), extension, name, &budget))
    })
    .map_err(|e| DecodeFailure::Unreadable(e.into_reader_panic(|| format!("{name}: not a readable audio file"))))??;
    if decoded.samples.is_empty() {
        return Err(DecodeFailure::Unreadable(Error::invalid(format!(
            "{name}: the {} file holds no audio samples",
            decoded.format
        ))));
    }
    Ok(decoded.into_loaded())
}

/// A WAV written to a pipe cannot state its length: its RIFF and data sizes are left at 0xFFFFFFFF
/// (our `stream_writer`, ffmpeg, sox do this). Readers that trust the sizes run off the end, so the
/// sizes are set to what the bytes hold.
fn close_open_ended_wav(mut bytes: Vec<u8>) -> Vec<u8> {
    const OPEN: [u8; 4] = [0xff; 4];
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WAVE" || bytes[4..8] != OPEN {
        return bytes;
    }
    let riff = (bytes.len() - 8).min(u32::MAX as usize) as u32;
    bytes[4..8].copy_from_slice(&riff.to_le_bytes());
    let mut pos = 12;
    while pos + 8 <= bytes.len() {
        let size = u32::from_le_bytes([bytes[pos + 4], bytes[pos + 5], bytes[pos + 6], bytes[pos + 7]]);
        if &bytes[pos..pos + 4] == b"data" {
            if size == u32::MAX {
                let data = (bytes.len() - pos - 8).min(u32::MAX as usize) as u32;
                bytes[pos + 4..pos + 8].copy_from_slice(&data.to_le_bytes());
            }
            break;
        }
        pos += 8 + size as usize + (size as usize & 1);
    }
    bytes
}

fn decode_symphonia(
    bytes: Vec<u8>,
    extension: Option<&str>,
    name: &str,
    budget: &FrameBudget,
) -> std::result::Result<Interleaved, DecodeFailure> {
    let not_audio = |e: SymError| {
        Error::invalid(format!(
            "{name}: not a readable audio file ({e}); supported: wav, flac, mp3, ogg/vorbis{}",
            if cfg!(feature = "audio-encoders") { ", ogg/opus" } else { "" }
        ))
    };
    let mut hint = Hint::new();
    if let Some(ext) = extension {
        hint.with_extension(ext);
    }
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let mut format = symphonia::default::get_probe()
        .probe(&hint, mss, FormatOptions::default(), MetadataOptions::default())
        .map_err(not_audio)?;
    let format_name = format.format_info().short_name.to_string();
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| Error::invalid(format!("{name}: the {format_name} file has no audio track")))?;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| Error::invalid(format!("{name}: the {format_name} file has no audio codec parameters")))?
        .clone();
    let track_id = track.id;
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| Error::invalid(format!("{name}: unsupported audio codec in the {format_name} file ({e})")))?;

    let mut samples = Vec::new();
    let mut chunk: Vec<f32> = Vec::new();
    let (mut channels, mut sample_rate) =
        (params.channels.as_ref().map(|c| c.count()).unwrap_or(0), params.sample_rate);
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // A truncated final packet ends the stream like EOF (as most players treat it).
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(Error::invalid(format!("{name}: corrupt {format_name} stream ({e})")).into()),
        };
        if packet.track_id != track_id {
            continue;
        }
        match decoder.decode(&packet) {
            Ok(buf) => {
                let spec = buf.spec();
                channels = spec.channels().count();
                sample_rate = Some(spec.rate());
                buf.copy_to_vec_interleaved(&mut chunk);
                // Checked before the packet is kept: memory stays within the limit plus a packet.
                let frames = (samples.len() + chunk.len()) / channels.max(1);
                budget.check(frames, spec.rate())?;
                samples.extend_from_slice(&chunk);
            }
            // A damaged packet is skipped, as the symphonia examples do.
            Err(SymError::DecodeError(_)) => continue,
            Err(e) => {
                return Err(Error::invalid(format!("{name}: cannot decode the {format_name} stream ({e})")).into())
            }
        }
    }
    let sample_rate = sample_rate
        .filter(|&r| r > 0)
        .ok_or_else(|| Error::invalid(format!("{name}: the {format_name} file states no sample rate")))?;
    if channels == 0 {
        return Err(Error::invalid(format!("{name}: the {format_name} file states no channel count")).into());
    }
    let format = match format_name.as_str() {
        "ogg" => format!("ogg/{}", codec_name(&params)),
        _ => format_name,
    };
    Ok(Interleaved { samples, channels, sample_rate, format })
}

fn codec_name(params: &symphonia::core::codecs::audio::AudioCodecParameters) -> String {
    symphonia::default::get_codecs()
        .get_audio_decoder(params.codec)
        .map(|d| d.codec.info.short_name.to_string())
        .unwrap_or_else(|| "unknown".into())
}
