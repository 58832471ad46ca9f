//! Output formats: what each is, which rates it takes, whether it can be written as audio arrives.

use std::path::Path;

use infer_sdk::{Error, Result};

/// A file format [`super::create_writer`] can produce.
///
/// | format | extension | samples | rates | streamed as produced |
/// | --- | --- | --- | --- | --- |
/// | `Wav` | `.wav` | 16-bit PCM | any | yes (header rewritten on each flush; a pipe gets an open-ended header) |
/// | `WavF32` | (`wav-f32`) | 32-bit float | any | yes |
/// | `Pcm` | `.pcm`, `.raw` | headerless s16le | any | yes |
/// | `Flac` | `.flac` | 16-bit, lossless | 1 Hz – 655 kHz | no: encoded when finished |
/// | `Mp3` | `.mp3` | LAME CBR 128 kb/s | 8–48 kHz MPEG rates, others resampled | yes (per LAME frame) |
/// | `Opus` | `.opus`, `.ogg` | Ogg Opus, 96 kb/s | 8/12/16/24/48 kHz, others resampled to 48 kHz | yes (per Ogg page) |
///
/// Flac, mp3 and opus need infer-core's `audio-encoders` feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AudioFormat {
    Wav,
    WavF32,
    Pcm,
    Flac,
    Mp3,
    Opus,
}

const MP3_RATES: [u32; 9] = [8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000];
const OPUS_RATES: [u32; 5] = [8_000, 12_000, 16_000, 24_000, 48_000];

impl AudioFormat {
    pub const ALL: [AudioFormat; 6] = [
        AudioFormat::Wav,
        AudioFormat::WavF32,
        AudioFormat::Pcm,
        AudioFormat::Flac,
        AudioFormat::Mp3,
        AudioFormat::Opus,
    ];

    /// From a name as a user types it (`wav`, `wav-f32`, `pcm`, `flac`, `mp3`, `opus`, `ogg`), or a
    /// file extension.
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "wav" | "wave" | "wav16" => AudioFormat::Wav,
            "wav-f32" | "wavf32" | "wav32" | "f32" => AudioFormat::WavF32,
            "pcm" | "raw" | "s16le" => AudioFormat::Pcm,
            "flac" => AudioFormat::Flac,
            "mp3" => AudioFormat::Mp3,
            "opus" | "ogg" | "oga" => AudioFormat::Opus,
            other => {
                return Err(Error::invalid(format!(
                    "unknown audio format `{other}` (known: wav, wav-f32, pcm, flac, mp3, opus)"
                )))
            }
        })
    }

    /// From the extension of `path`.
    pub fn from_path(path: &Path) -> Result<Self> {
        let ext = path.extension().and_then(|e| e.to_str()).ok_or_else(|| {
            Error::invalid(format!(
                "{}: no file extension to choose the audio format from (use .wav, .pcm, .flac, .mp3 or .opus)",
                path.display()
            ))
        })?;
        Self::from_name(ext).map_err(|_| {
            Error::invalid(format!(
                "{}: unknown audio format `.{ext}` (known: .wav, .pcm, .raw, .flac, .mp3, .opus, .ogg)",
                path.display()
            ))
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AudioFormat::Wav => "wav",
            AudioFormat::WavF32 => "wav-f32",
            AudioFormat::Pcm => "pcm",
            AudioFormat::Flac => "flac",
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Opus => "opus",
        }
    }

    /// The usual file extension.
    pub fn extension(self) -> &'static str {
        match self {
            AudioFormat::Wav | AudioFormat::WavF32 => "wav",
            AudioFormat::Pcm => "pcm",
            AudioFormat::Flac => "flac",
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Opus => "opus",
        }
    }

    /// Whether samples reach the output as they are written (flac is encoded on `finish`).
    pub fn streams(self) -> bool {
        !matches!(self, AudioFormat::Flac)
    }

    /// Whether this build can write the format (flac/mp3/opus need the `audio-encoders` feature).
    pub fn available(self) -> bool {
        match self {
            AudioFormat::Wav | AudioFormat::WavF32 | AudioFormat::Pcm => true,
            AudioFormat::Flac | AudioFormat::Mp3 | AudioFormat::Opus => cfg!(feature = "audio-encoders"),
        }
    }

    /// The rate audio at `rate` is stored at: unchanged where the format takes it, else the rate it
    /// is resampled to.
    pub fn stored_rate(self, rate: u32) -> u32 {
        match self {
            AudioFormat::Wav | AudioFormat::WavF32 | AudioFormat::Pcm => rate,
            AudioFormat::Flac => rate.clamp(1, 655_350),
            AudioFormat::Mp3 => MP3_RATES.iter().copied().find(|&r| r >= rate).unwrap_or(48_000),
            AudioFormat::Opus if OPUS_RATES.contains(&rate) => rate,
            AudioFormat::Opus => 48_000,
        }
    }
}

impl std::fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AudioFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::from_name(s)
    }
}

/// `x` in [-1, 1] as 16-bit PCM: `round(x * 32768)` clipped to [-32768, 32767], the inverse of
/// the `v / 32768` that decoders (symphonia, libsndfile) apply.
pub fn to_i16(x: f32) -> i16 {
    (x * 32768.0).round().clamp(-32768.0, 32767.0) as i16
}
