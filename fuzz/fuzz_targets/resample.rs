//! Sample-rate conversion: any rates and samples (whole clip and streamed in chunks), as a file's
//! header or a caller hands them over.
#![no_main]

use arbitrary::Arbitrary;
use infer_core::audio::Audio;
use infer_core::audio_io::{resample, StreamResampler};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    from: u32,
    to: u32,
    samples: Vec<f32>,
    chunks: Vec<u16>,
}

fuzz_target!(|x: Input| {
    let audio = Audio::new(x.samples.clone(), x.from);
    let whole = resample(&audio, x.to);
    let Ok(mut s) = StreamResampler::new(x.from, x.to) else {
        assert!(whole.is_err() || x.from == x.to || x.samples.is_empty(), "resample and StreamResampler disagree");
        return;
    };
    let mut rest = &x.samples[..];
    for &c in &x.chunks {
        let (head, tail) = rest.split_at((c as usize).min(rest.len()));
        if s.push(head).is_err() {
            return;
        }
        rest = tail;
    }
    if s.push(rest).is_ok() {
        let _ = s.finish();
    }
});
