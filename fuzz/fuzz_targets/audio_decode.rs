//! An audio file as `infer transcribe` / a voice reference reads it: probe and decode (wav, flac,
//! mp3, ogg/vorbis, ogg/opus), downmix, the reference checks, and resampling to the model rates.
//! The first byte picks the extension hint, as a file name would give it.
#![no_main]

use infer_core::audio_io::{check_audio, decode_audio, resample, AudioLimits};
use libfuzzer_sys::fuzz_target;

const HINTS: [Option<&str>; 6] = [None, Some("wav"), Some("flac"), Some("mp3"), Some("ogg"), Some("opus")];

/// `decode_audio` turns a panic inside a third-party decoder into an error (checked builds, like
/// this one, trip on overflows that release builds wrap), so such a panic is not a crash of ours:
/// it is printed once per site for an upstream report and the run goes on. Any other panic keeps
/// libFuzzer's abort.
fn tolerate_upstream_decoder_panics() {
    let abort = std::panic::take_hook();
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    std::panic::set_hook(Box::new(move |info| {
        let file = info.location().map(|l| l.file()).unwrap_or("");
        if ["/symphonia-", "/ogg-", "/opus-pure-"].iter().any(|c| file.contains(c)) {
            let site = info.location().map(|l| l.to_string()).unwrap_or_default();
            if seen.lock().map(|mut s| s.insert(site.clone())).unwrap_or(false) {
                eprintln!("upstream decoder panic (caught by decode_audio): {site}: {info}");
            }
            return;
        }
        abort(info);
    }));
}

fuzz_target!(init: tolerate_upstream_decoder_panics(), |data: &[u8]| {
    let Some((&hint, bytes)) = data.split_first() else { return };
    let Ok(loaded) = decode_audio(bytes.to_vec(), HINTS[hint as usize % HINTS.len()], "fuzz input") else { return };
    let _ = check_audio(&loaded.audio, &AudioLimits::default(), "fuzz input");
    for rate in [16_000, 24_000] {
        let _ = resample(&loaded.audio, rate);
    }
});
