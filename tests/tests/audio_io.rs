//! infer-core audio_io: reading files an independent tool wrote (SoX, tests/fixtures/audio, made by
//! tools/fixtures/make_audio_io.sh), round trips through every writer, streaming, resampling where
//! a format needs it, our resampler against libsoxr's (tests/fixtures/resample, made by
//! tools/fixtures/make_resample_reference.py), and bad input.
//!
//! Bounds: wav16 / pcm / flac round trips are exact to the 16-bit quantisation
//! (`round(x * 32768) / 32768`), wav-f32 bit-exact; lossy formats are judged by SNR after aligning
//! the decoded signal (measured on this test signal: mp3 (LAME 128 kb/s at 24 kHz) 26.0 dB,
//! opus (96 kb/s) 40.6 dB; asserted 20 / 30 dB). Pitch is checked with an FFT peak (bin width < 3 Hz),
//! level by RMS.

use std::io::Write;
use std::path::{Path, PathBuf};

use infer_core::audio::Audio;
use infer_core::audio_io::{
    check_audio, create_writer, encode_audio, load_for_model, output_len, read_audio, resample, stream_writer, to_i16,
    write_audio, AudioFormat, AudioLimits, StreamResampler,
};
use infer_core::dsp::{Padding, Stft};
use infer_tests::fixture;

fn sox_file(name: &str) -> PathBuf {
    fixture("audio").join(name)
}

/// Frequencies (Hz) of the `count` strongest spectral peaks, over the whole clip, ascending.
fn peaks(audio: &Audio, count: usize) -> Vec<f32> {
    let n_fft = audio.samples.len().next_power_of_two() * 2;
    let stft = Stft::new(n_fft, n_fft, n_fft, Padding::Zeros { left: 0, right: n_fft }).unwrap();
    let mut mags = Vec::new();
    stft.for_each_frame(&audio.samples, |t, spec| {
        if t == 0 {
            mags = spec.iter().map(|c| c.norm() as f32).collect();
        }
    })
    .unwrap();
    let mut order: Vec<usize> =
        (1..mags.len() - 1).filter(|&k| mags[k] >= mags[k - 1] && mags[k] >= mags[k + 1]).collect();
    order.sort_by(|&a, &b| mags[b].total_cmp(&mags[a]));
    let mut found: Vec<f32> =
        order.into_iter().take(count).map(|k| k as f32 * audio.sample_rate as f32 / n_fft as f32).collect();
    found.sort_by(f32::total_cmp);
    found
}

/// `audio` holds sines at the given (Hz, amplitude): the strongest peaks sit at those frequencies
/// (within 4 Hz) and the RMS level of the middle half is theirs (within 5%, 10% for mp3).
fn assert_tones(what: &str, audio: &Audio, want: &[(f32, f32)]) {
    let got = peaks(audio, want.len());
    for (&(hz, _), &g) in want.iter().zip(&got) {
        assert!((g - hz).abs() < 4.0, "{what}: peak at {g} Hz, want {hz} Hz (peaks {got:?})");
    }
    // The middle half: mp3 adds encoder delay and padding at the ends.
    let mid = &audio.samples[audio.samples.len() / 4..audio.samples.len() * 3 / 4];
    let rms = (mid.iter().map(|v| v * v).sum::<f32>() / mid.len() as f32).sqrt();
    let want_rms = (want.iter().map(|(_, a)| a * a).sum::<f32>() / 2.0).sqrt();
    // LAME moves a pure tone's level by ~0.5 dB (SoX's own decoder reads the same file 0.7 dB low).
    let tol = if what.contains("mp3") { 0.1 } else { 0.05 };
    assert!((rms - want_rms).abs() < tol * want_rms, "{what}: RMS {rms}, want {want_rms}");
}

/// (file, rate, channels, frames, tones (Hz, amplitude) of the mono mix)
type SoxCase = (&'static str, u32, usize, Option<usize>, &'static [(f32, f32)]);

#[test]
fn reads_files_written_by_sox() {
    let cases: [SoxCase; 7] = [
        ("tone440_8k_mono_s16.wav", 8_000, 1, Some(4_000), &[(440.0, 0.5)]),
        ("tone440-1000_44k_stereo_s24.wav", 44_100, 2, Some(11_025), &[(440.0, 0.25), (1000.0, 0.25)]),
        ("tone1000_48k_mono_f32.wav", 48_000, 1, Some(12_000), &[(1000.0, 0.5)]),
        ("tone440_16k_mono_ulaw.wav", 16_000, 1, Some(4_000), &[(440.0, 0.5)]),
        ("tone440-1000_44k_stereo.flac", 44_100, 2, Some(11_025), &[(440.0, 0.25), (1000.0, 0.25)]),
        // mp3 frames carry the encoder delay and padding: length only roughly known.
        ("tone440_44k_mono.mp3", 44_100, 1, None, &[(440.0, 0.5)]),
        ("tone440-1000_22k_stereo.ogg", 22_050, 2, Some(11_025), &[(440.0, 0.25), (1000.0, 0.25)]),
    ];
    for (name, rate, channels, frames, tones) in cases {
        let loaded = read_audio(sox_file(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let info = &loaded.info;
        assert_eq!((info.sample_rate, info.channels), (rate, channels), "{name}: {info:?}");
        assert_eq!(loaded.audio.samples.len(), info.frames, "{name}: one mono sample per frame");
        match frames {
            Some(f) => assert_eq!(info.frames, f, "{name}: frames"),
            None => assert!((22_050..26_000).contains(&info.frames), "{name}: {} frames", info.frames),
        }
        assert_tones(name, &loaded.audio, tones);

        // Converted for a 24 kHz model: same tones, length scaled by the rate ratio.
        let a24 = load_for_model(sox_file(name), 24_000).unwrap();
        assert_eq!(a24.sample_rate, 24_000);
        assert_eq!(a24.samples.len(), output_len(info.frames, rate, 24_000), "{name}: resampled length");
        assert_tones(&format!("{name} at 24 kHz"), &a24, tones);
    }
}

/// 1 s at 24 kHz: two tones and a slow chirp, peak 0.8.
fn test_signal() -> Audio {
    let rate = 24_000.0f64;
    let samples = (0..24_000)
        .map(|i| {
            let t = i as f64 / rate;
            let chirp = (2.0 * std::f64::consts::PI * (200.0 * t + 900.0 * t * t)).sin();
            (0.3 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                + 0.2 * (2.0 * std::f64::consts::PI * 3000.0 * t).sin()
                + 0.3 * chirp) as f32
        })
        .collect();
    Audio { samples, sample_rate: 24_000 }
}

fn quantised(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| to_i16(v) as f32 / 32768.0).collect()
}

/// SNR (dB) of `got` against `want` at the best lag in `0..max_lag` (encoder delay), over the
/// whole of `want` (missing samples count as errors).
fn aligned_snr(want: &[f32], got: &[f32], max_lag: usize) -> (f32, usize) {
    let signal: f64 = want.iter().map(|&v| (v as f64).powi(2)).sum();
    (0..max_lag.min(got.len()))
        .map(|lag| {
            let g = |i: usize| got.get(lag + i).copied().unwrap_or(0.0) as f64;
            let noise: f64 = want.iter().enumerate().map(|(i, &a)| (a as f64 - g(i)).powi(2)).sum();
            ((10.0 * (signal / noise).log10()) as f32, lag)
        })
        .fold((f32::MIN, 0), |best, x| if x.0 > best.0 { x } else { best })
}

fn tmp(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[test]
fn lossless_round_trips_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let x = test_signal();
    for (name, fmt) in [("a.wav", None), ("b.flac", None), ("c.wav", Some(AudioFormat::WavF32))] {
        let path = tmp(dir.path(), name);
        write_audio(&path, &x, fmt).unwrap();
        let back = read_audio(&path).unwrap();
        assert_eq!((back.info.sample_rate, back.info.channels), (24_000, 1), "{name}");
        let want = if fmt == Some(AudioFormat::WavF32) { x.samples.to_vec() } else { quantised(&x.samples) };
        assert_eq!(back.audio.samples, want, "{name}: not bit-exact");
    }
    // Raw pcm: s16le, no header.
    let path = tmp(dir.path(), "d.pcm");
    write_audio(&path, &x, None).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 2 * x.samples.len());
    let back: Vec<f32> = bytes.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0).collect();
    assert_eq!(back, quantised(&x.samples));
}

#[test]
fn lossy_round_trips_keep_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let x = test_signal();
    // mp3: 24 kHz is an MPEG-2 rate, kept; LAME's start-up delay is found by alignment.
    let mp3 = tmp(dir.path(), "a.mp3");
    write_audio(&mp3, &x, None).unwrap();
    let back = read_audio(&mp3).unwrap();
    assert_eq!(back.info.sample_rate, 24_000);
    let (snr, lag) = aligned_snr(&x.samples, &back.audio.samples, 3_000);
    eprintln!("mp3: SNR {snr:.1} dB at lag {lag}");
    assert!(snr > 20.0, "mp3 SNR {snr} dB");

    // opus: decodes at 48 kHz with pre-skip and end trimming applied: exactly twice the samples,
    // no delay once resampled back.
    let opus = tmp(dir.path(), "b.opus");
    write_audio(&opus, &x, None).unwrap();
    let back = read_audio(&opus).unwrap();
    assert_eq!((back.info.sample_rate, back.info.format.as_str()), (48_000, "ogg/opus"));
    assert_eq!(back.audio.samples.len(), 2 * x.samples.len());
    let back24 = resample(&back.audio, 24_000).unwrap();
    let (snr, lag) = aligned_snr(&x.samples, &back24.samples, 50);
    eprintln!("opus: SNR {snr:.1} dB at lag {lag}");
    assert!(snr > 30.0, "opus SNR {snr} dB");
    assert!(lag <= 1, "opus output delayed by {lag} samples");
}

#[test]
fn formats_resample_where_they_must() {
    let dir = tempfile::tempdir().unwrap();
    let tone = |rate: u32| Audio {
        samples: (0..rate / 2)
            .map(|i| 0.5 * (2.0 * std::f32::consts::PI * 440.0 * i as f32 / rate as f32).sin())
            .collect(),
        sample_rate: rate,
    };
    // (format, input rate, stored rate)
    for (ext, rate, stored) in
        [("opus", 44_100, 48_000), ("opus", 24_000, 24_000), ("mp3", 96_000, 48_000), ("flac", 44_100, 44_100)]
    {
        assert_eq!(AudioFormat::from_name(ext).unwrap().stored_rate(rate), stored);
        let path = tmp(dir.path(), &format!("t{rate}.{ext}"));
        write_audio(&path, &tone(rate), None).unwrap();
        let back = read_audio(&path).unwrap();
        let decoded_rate = if ext == "opus" { 48_000 } else { stored };
        assert_eq!(back.info.sample_rate, decoded_rate, "{ext} from {rate} Hz");
        assert_tones(&format!("{ext} from {rate} Hz"), &back.audio, &[(440.0, 0.5)]);
    }
}

/// The rate pairs in tests/fixtures/resample (tools/fixtures/make_resample_reference.py).
const SOXR_PAIRS: [(u32, u32); 3] = [(44_100, 24_000), (48_000, 16_000), (24_000, 44_100)];

/// Largest |ours - soxr| allowed anywhere in a clip. Measured: 1.3e-5 for 48 -> 16 kHz, 2.5e-6 for
/// the other two pairs, the same in the 10 ms fades as inside (soxr itself is within 2.2e-5 of the
/// ideal tones, 4.6e-6 inside): 1e-4 leaves 7x margin on the worst. A one-sample delay gives 0.66
/// (the 0.7-Nyquist tone alone moves by up to 0.32); a lower anti-aliasing cutoff eats the upper
/// tones.
const SOXR_TOL: f32 = 1e-4;

/// Our resampler, on the whole clip and streamed in uneven pushes, against an independent one:
/// libsoxr (soxr 1.1.0 at VHQ, the python binding librosa resamples with). The input is 0.1 s of
/// tones at 0.05, 0.25, 0.5 and 0.7 of the lower Nyquist frequency (plus, downsampling, one at 1.3x
/// the output Nyquist that both must remove), faded in and out over 10 ms, peak ~0.8.
///
/// The tones stay below 0.7 of the Nyquist frequency on purpose: rubato's filter for 48 -> 16 kHz
/// (its FFT is only 86 output points there) rolls off early, measured -1 dB at 0.8 and -7 dB at
/// 0.85 of 8 kHz, where soxr is still flat (44.1 -> 24 and 24 -> 44.1 kHz stay within 3e-4,
/// relative, up to 0.85).
#[test]
fn resampling_matches_soxr() {
    let bytes = std::fs::read(fixture("resample/reference.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let get = |name: &str| -> Vec<f32> {
        let t = st.tensor(name).unwrap_or_else(|e| panic!("reference {name}: {e}"));
        t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    };
    for (from, to) in SOXR_PAIRS {
        let x = get(&format!("{from}-{to}.input"));
        let want = get(&format!("{from}-{to}.output"));
        let whole = resample(&Audio::new(x.clone(), from), to).unwrap().samples.into_vec();
        let mut s = StreamResampler::new(from, to).unwrap();
        let mut streamed = Vec::new();
        for c in x.chunks(317) {
            streamed.extend(s.push(c).unwrap());
        }
        streamed.extend(s.finish().unwrap());
        // The fades: the first and last 10 ms.
        let (n, edge) = (want.len(), to as usize / 100);
        for (how, ours) in [("whole", &whole), ("streamed", &streamed)] {
            assert_eq!(ours.len(), n, "{from} -> {to} {how}: length");
            let diff = |r: std::ops::Range<usize>| r.map(|i| (ours[i] - want[i]).abs()).fold(0.0f32, f32::max);
            let (inside, fades) = (diff(edge..n - edge), diff(0..edge).max(diff(n - edge..n)));
            eprintln!("{from} -> {to} {how}: max |ours - soxr| {inside:.2e} inside, {fades:.2e} in the fades");
            assert!(inside.max(fades) <= SOXR_TOL, "{from} -> {to} {how}: {inside} inside, {fades} in the fades");
        }
    }
}

#[test]
fn wav_and_pcm_stream_as_they_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let x = test_signal();
    let path = tmp(dir.path(), "s.wav");
    let mut w = create_writer(&path, None, 24_000).unwrap();
    let chunks: Vec<&[f32]> = x.samples.chunks(4_000).collect();
    for (i, c) in chunks.iter().enumerate() {
        w.write(c).unwrap();
        // The file on disk is a valid WAV holding everything written so far.
        let now = read_audio(&path).unwrap();
        assert_eq!(now.audio.samples.len(), 4_000 * (i + 1));
    }
    w.finish().unwrap();
    assert_eq!(read_audio(&path).unwrap().audio.samples, quantised(&x.samples));

    // To a pipe: an open-ended header, samples after it as they come.
    #[derive(Clone, Default)]
    struct Pipe(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Pipe {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    for (format, header) in [(AudioFormat::Wav, 44), (AudioFormat::Pcm, 0)] {
        let pipe = Pipe::default();
        let mut w = stream_writer(Box::new(pipe.clone()), "pipe", format, 24_000).unwrap();
        w.write(chunks[0]).unwrap();
        assert_eq!(pipe.0.lock().unwrap().len(), header + 2 * 4_000, "{format}: bytes after one chunk");
        w.write(chunks[1]).unwrap();
        w.finish().unwrap();
        let bytes = pipe.0.lock().unwrap().clone();
        if format == AudioFormat::Wav {
            let back = infer_core::audio_io::decode_audio(bytes, Some("wav"), "pipe").unwrap();
            assert_eq!(back.audio.samples, quantised(&x.samples[..8_000]));
        }
    }

    // mp3 and opus also emit data before finishing; flac only at the end.
    for format in [AudioFormat::Mp3, AudioFormat::Opus, AudioFormat::Flac] {
        let pipe = Pipe::default();
        let mut w = stream_writer(Box::new(pipe.clone()), "pipe", format, 24_000).unwrap();
        for c in &chunks[..3] {
            w.write(c).unwrap();
        }
        let mid = pipe.0.lock().unwrap().len();
        w.finish().unwrap();
        assert_eq!(format.streams(), mid > 1_000, "{format}: {mid} bytes before finish");
        let bytes = pipe.0.lock().unwrap().clone();
        let back = infer_core::audio_io::decode_audio(bytes, Some(format.extension()), "pipe").unwrap();
        assert!(back.audio.samples.len() >= 12_000, "{format}: decoded {}", back.audio.samples.len());
    }
}

#[test]
fn encode_audio_matches_the_file_writer() {
    let dir = tempfile::tempdir().unwrap();
    let x = test_signal();
    for format in [AudioFormat::Wav, AudioFormat::Flac, AudioFormat::Pcm] {
        let path = tmp(dir.path(), &format!("e.{}", format.extension()));
        write_audio(&path, &x, Some(format)).unwrap();
        assert_eq!(encode_audio(&x, format).unwrap(), std::fs::read(&path).unwrap(), "{format}");
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let err = |p: &Path| read_audio(p).unwrap_err().to_string();

    let text = tmp(dir.path(), "notes.wav");
    std::fs::write(&text, "these are not the samples you are looking for\n".repeat(20)).unwrap();
    let e = err(&text);
    assert!(e.contains("notes.wav") && e.contains("not a readable audio file"), "{e}");

    let empty = tmp(dir.path(), "empty.flac");
    std::fs::write(&empty, b"").unwrap();
    assert!(err(&empty).contains("empty file"), "{}", err(&empty));

    let missing = tmp(dir.path(), "missing.wav");
    assert!(err(&missing).contains("missing.wav"), "{}", err(&missing));

    let no_samples = tmp(dir.path(), "zero.wav");
    write_audio(&no_samples, &Audio::new(vec![], 16_000), None).unwrap();
    assert!(err(&no_samples).contains("holds no audio samples"), "{}", err(&no_samples));

    let truncated = tmp(dir.path(), "cut.wav");
    write_audio(&truncated, &test_signal(), None).unwrap();
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..30]).unwrap();
    assert!(read_audio(&truncated).is_err());

    // Silent and too-short references, read from real files.
    let limits = AudioLimits::default();
    let silent = tmp(dir.path(), "silent.wav");
    write_audio(&silent, &Audio::new(vec![0.0; 48_000], 24_000), None).unwrap();
    let a = read_audio(&silent).unwrap().audio;
    let e = check_audio(&a, &limits, "reference audio silent.wav").unwrap_err().to_string();
    assert!(e.contains("silent.wav: silent"), "{e}");
    let short = read_audio(sox_file("tone440_8k_mono_s16.wav")).unwrap().audio;
    let e = check_audio(&short, &limits, "reference audio tone.wav").unwrap_err().to_string();
    assert!(e.contains("too short (0.50 s)"), "{e}");

    let e = create_writer(&tmp(dir.path(), "out.aiff"), None, 24_000).err().unwrap().to_string();
    assert!(e.contains("unknown audio format `.aiff`"), "{e}");
    let e = create_writer(&tmp(dir.path(), "out"), None, 24_000).err().unwrap().to_string();
    assert!(e.contains("no file extension"), "{e}");
    let e = create_writer(&tmp(dir.path(), "x.wav"), None, 0).err().unwrap().to_string();
    assert!(e.contains("sample rate of 0"), "{e}");
}
