//! An audio file as `infer transcribe` / a voice reference reads it: probe and decode (wav, flac,
//! mp3, ogg/vorbis, ogg/opus), downmix, the reference checks, and resampling to the model rates.
//! The first byte picks the extension hint, as a file name would give it.
#![no_main]

use infer_core::audio_io::{check_audio, decode_audio, resample, AudioLimits};
use libfuzzer_sys::fuzz_target;

const HINTS: [Option<&str>; 6] = [None, Some("wav"), Some("flac"), Some("mp3"), Some("ogg"), Some("opus")];

/// `decode_audio` catches a panic inside a third-party decoder (this checked build trips on
/// overflows that release builds wrap) and returns an error.
const DECODERS: &[&str] = &["/symphonia-", "/ogg-", "/opus-pure-"];

fuzz_target!(init: infer_fuzz::tolerate_upstream_panics(DECODERS), |data: &[u8]| {
    let Some((&hint, bytes)) = data.split_first() else { return };
    let Ok(loaded) = decode_audio(bytes.to_vec(), HINTS[hint as usize % HINTS.len()], "fuzz input") else { return };
    let _ = check_audio(&loaded.audio, &AudioLimits::default(), "fuzz input");
    for rate in [16_000, 24_000] {
        let _ = resample(&loaded.audio, rate);
    }
});
