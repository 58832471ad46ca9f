//! Qwen3-TTS speaker encoder parity with qwen-tts 0.1.1 on a tiny random ECAPA-TDNN it wrote
//! (tests/fixtures/qwen3-tts/speaker, tools/fixtures/make_qwen3_tts_speaker.py), on every backend
//! setup.
//!
//! Tolerances (f32), from measurements:
//! - mel (ln scale, values in [-10, 0.3]): 1e-3 absolute. Our STFT runs in f64, the reference in
//!   f32; the measured gap is ~1e-5 except in near-silent bins, where the 1e-5 floor keeps it small.
//! - x-vector from the reference's own 24 kHz waveform: 1e-4 absolute (values up to ~3; the
//!   measured gap is a few 1e-6).
//! - the 44.1 kHz stereo file goes through decode + downmix + our resampler (rubato FFT) where the
//!   reference uses librosa's soxr_hq. Below 10.5 kHz the two agree: measured mel gap 9e-4 (interior
//!   frames, mel bands 0..=122), asserted 2e-3; waveform SNR 54.8 dB, asserted 50 dB. The two
//!   anti-aliasing filters differ in their transition band (10.5–12 kHz, the top 5 mel bands, which
//!   hold only the test signal's -40 dB noise floor): up to 2.5 there in ln-mel, and this tiny random
//!   encoder weighs those bands like any other, so its x-vector moves by 0.14 (cosine 0.99911):
//!   asserted 0.2 and cosine 0.998. A resampler off by one sample, without anti-aliasing, or at the
//!   wrong rate fails the passband mel check by orders of magnitude.

use std::path::PathBuf;

use infer_core::audio::Audio;
use infer_core::audio_io::read_audio;
use infer_core::dsp::MelSpectrogram;
use infer_core::{Backend, DType};
use infer_qwen3_tts::speaker_encoder::{speaker_mel_config, SpeakerEncoder};
use infer_tests::{fixture, max_abs_diff, worst, Setup};

const MEL_TOL: f32 = 1e-3;
const XVEC_TOL: f32 = 1e-4;
const RESAMPLED_MEL_TOL: f32 = 2e-3;
/// Mel bands whose filters end below 10.5 kHz, inside both resamplers' passbands.
const PASSBAND_MELS: usize = 123;
const RESAMPLED_MIN_SNR_DB: f32 = 50.0;
const RESAMPLED_XVEC_TOL: f32 = 0.2;
const RESAMPLED_MIN_COSINE: f32 = 0.998;

fn dir() -> PathBuf {
    fixture("qwen3-tts/speaker")
}

fn golden(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(dir().join("golden.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap_or_else(|e| panic!("golden {name}: {e}"));
    t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn backend(setup: Setup) -> Backend {
    setup.registry().unwrap().backend(Some(setup.backend()), None).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

#[test]
fn mel_matches_qwen_tts() {
    let mel = MelSpectrogram::new(speaker_mel_config()).unwrap();
    for case in ["mono24k", "stereo44k"] {
        let ours = mel.compute(&golden(&format!("{case}.wave"))).unwrap();
        let want = golden(&format!("{case}.mel"));
        assert_eq!(ours.n_mels * ours.frames, want.len(), "{case}: mel shape");
        let diff = max_abs_diff(&ours.data, &want);
        eprintln!("{case}: mel max |diff| {diff:.2e}");
        assert!(diff <= MEL_TOL, "{case}: mel differs by {diff}");
    }
}

#[test]
fn xvector_matches_qwen_tts_on_its_waveforms() {
    for setup in Setup::all() {
        let enc = SpeakerEncoder::from_dir(&dir(), &backend(setup), DType::F32).unwrap();
        for case in ["mono24k", "stereo44k"] {
            let audio = Audio::new(golden(&format!("{case}.wave")), 24_000);
            let x = enc.embed(&audio).unwrap();
            let diff = max_abs_diff(&x, &golden(&format!("{case}.xvector")));
            eprintln!("{setup:?} {case}: x-vector max |diff| {diff:.2e}");
            assert!(diff <= XVEC_TOL, "{setup:?} {case}: x-vector differs by {diff}");
        }
    }
}

#[test]
fn xvector_from_files_matches_qwen_tts() {
    for setup in Setup::all() {
        let enc = SpeakerEncoder::from_dir(&dir(), &backend(setup), DType::F32).unwrap();

        // 24 kHz float WAV: decoded exactly, no resampling, so the tight tolerance holds.
        let mono = read_audio(dir().join("ref_24k_mono.wav")).unwrap();
        assert_eq!((mono.info.sample_rate, mono.info.channels), (24_000, 1));
        let diff = max_abs_diff(&enc.embed(&mono.audio).unwrap(), &golden("mono24k.xvector"));
        assert!(diff <= XVEC_TOL, "{setup:?} mono24k file: x-vector differs by {diff}");

        // 44.1 kHz 16-bit stereo: downmixed and resampled by us, by librosa/soxr in the reference.
        let stereo = read_audio(dir().join("ref_44k_stereo.wav")).unwrap();
        assert_eq!((stereo.info.sample_rate, stereo.info.channels, stereo.info.frames), (44_100, 2, 44_100));
        let x = enc.embed(&stereo.audio).unwrap();
        let want = golden("stereo44k.xvector");
        let (diff, cos) = (max_abs_diff(&x, &want), cosine(&x, &want));
        eprintln!("{setup:?} stereo44k file: x-vector max |diff| {diff:.2e}, cosine {cos:.6}");
        assert!(diff <= RESAMPLED_XVEC_TOL, "{setup:?} stereo44k: x-vector differs by {diff}");
        assert!(cos >= RESAMPLED_MIN_COSINE, "{setup:?} stereo44k: cosine {cos}");
    }
}

#[test]
fn resampled_reference_is_close_to_librosa() {
    let stereo = read_audio(dir().join("ref_44k_stereo.wav")).unwrap();
    let ours = infer_core::audio_io::resample(&stereo.audio, 24_000).unwrap().samples;
    let mel = MelSpectrogram::new(speaker_mel_config()).unwrap().compute(&ours).unwrap();
    let want_mel = golden("stereo44k.mel");
    assert_eq!(mel.data.len(), want_mel.len());
    let f = mel.frames;
    let gap = worst(
        (0..PASSBAND_MELS).flat_map(|m| (1..f - 1).map(move |t| m * f + t)).map(|i| (mel.data[i] - want_mel[i]).abs()),
    );
    eprintln!("resampled vs librosa: passband mel max |diff| {gap:.2e}");
    assert!(gap <= RESAMPLED_MEL_TOL, "passband mel differs by {gap}");

    let want = golden("stereo44k.wave");
    // librosa's float ratio gives ceil(44100 * 0.5442...) = 24001 samples, and so do we.
    assert_eq!(ours.len(), want.len());
    let n = ours.len();
    let signal: f32 = want[..n].iter().map(|v| v * v).sum();
    let noise: f32 = ours.iter().zip(&want[..n]).map(|(a, b)| (a - b) * (a - b)).sum();
    let snr = 10.0 * (signal / noise).log10();
    eprintln!("resampled vs librosa: SNR {snr:.1} dB");
    assert!(snr > RESAMPLED_MIN_SNR_DB, "resampled waveform SNR {snr} dB against librosa");
}

#[test]
fn bad_reference_audio_gives_clear_errors() {
    let enc = SpeakerEncoder::from_dir(&dir(), &backend(Setup::CandleBuiltIn), DType::F32).unwrap();
    let short = Audio::new(vec![0.1; 200], 24_000);
    let err = enc.embed(&short).unwrap_err().to_string();
    assert!(err.contains("too short"), "{err}");
    let nan = Audio::new(vec![f32::NAN; 48_000], 24_000);
    let err = enc.embed(&nan).unwrap_err().to_string();
    assert!(err.contains("not a finite number"), "{err}");

    let cfg = dir().join("config.json");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(&cfg, tmp.path().join("config.json")).unwrap();
    let err = SpeakerEncoder::from_dir(tmp.path(), &backend(Setup::CandleBuiltIn), DType::F32)
        .err()
        .expect("no weights")
        .to_string();
    assert!(err.contains("safetensors"), "{err}");
}
