//! Audio files in and out.
//!
//! Reading ([`read_audio`], [`load_for_model`]): wav (any bit depth, float, ADPCM), flac, mp3,
//! ogg/vorbis (symphonia), and ogg/opus with the `audio-encoders` feature; any rate and channel
//! count, averaged to mono ([`infer_sdk::audio::Audio`]) with the original rate and channels reported
//! in [`AudioInfo`]. [`resample`] converts rates (rubato sinc). [`check_audio`] rejects silent,
//! too short or broken reference recordings with messages a user can act on.
//!
//! Writing ([`create_writer`], [`write_audio`], [`encode_audio`]): see [`AudioFormat`] for the
//! formats, the rates each stores (others are resampled) and which ones stream as audio arrives.

mod check;
mod decode;
mod format;
mod resample;
mod writer;

#[cfg(feature = "audio-encoders")]
mod flac;
#[cfg(feature = "audio-encoders")]
mod mp3;
#[cfg(feature = "audio-encoders")]
mod opus;

use std::path::Path;

pub use check::{check_audio, peak_dbfs, AudioLimits};
pub use decode::{
    decode_audio, decode_audio_within, downmix, read_audio, read_audio_within, AudioInfo, DecodeFailure, DecodeLimits,
    LoadedAudio,
};
pub use format::{to_i16, AudioFormat};
pub use resample::{output_len, resample, StreamResampler};
pub use writer::{create_writer, encode_audio, file_writer, stream_writer, write_audio, AudioSink, SeekWrite};

use infer_sdk::audio::Audio;
use infer_sdk::Result;

/// Reads `path` and returns mono audio at `sample_rate`, ready for a model front end.
pub fn load_for_model(path: impl AsRef<Path>, sample_rate: u32) -> Result<Audio> {
    let loaded = read_audio(path)?;
    resample(&loaded.audio, sample_rate)
}

/// Like [`load_for_model`], then [`check_audio`] with `limits` (the error names the file).
pub fn load_reference(path: impl AsRef<Path>, sample_rate: u32, limits: &AudioLimits) -> Result<Audio> {
    let path = path.as_ref();
    let loaded = read_audio(path)?;
    check_audio(&loaded.audio, limits, &format!("reference audio {}", path.display()))?;
    resample(&loaded.audio, sample_rate)
}
