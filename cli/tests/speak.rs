//! `infer speak` and `infer voice` end to end on the tiny Qwen3-TTS fixture in the real layout:
//! every output format, streaming, code dumps, voice presets, and one clear error line for bad input.

use std::path::{Path, PathBuf};
use std::process::Output;

use infer_core::audio::Audio;
use infer_core::audio_io::{read_audio, write_audio, AudioFormat};
use infer_tests::cli::{stderr, Infer};
use infer_tests::fixture;

fn infer(args: &[&str]) -> Output {
    Infer::new(env!("CARGO_BIN_EXE_infer")).run(args)
}

fn model() -> String {
    fixture("qwen3-tts/small").to_string_lossy().into_owned()
}

const TEXT: &str = "Speech synthesis turns text into sound.";

fn speak(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["speak", "--model", &*Box::leak(model().into_boxed_str()), "--text", TEXT];
    let out = out.to_string_lossy().into_owned();
    args.extend(["--out", Box::leak(out.into_boxed_str()), "--temperature", "0", "--max-frames", "12"]);
    args.extend_from_slice(extra);
    infer(&args)
}

#[test]
fn speak_writes_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let codes = tmp.path().join("codes.tsv");
    let wav = tmp.path().join("out.wav");
    let o = speak(&wav, &["--dump-codes", codes.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("real-time factor"), "{}", stderr(&o));
    let rows: Vec<Vec<u32>> = std::fs::read_to_string(&codes)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(|c| c.parse().unwrap()).collect())
        .collect();
    assert!(!rows.is_empty() && rows.len() <= 12);
    assert!(rows.iter().all(|r| r.len() == 16));
    let reference = read_audio(&wav).unwrap();
    assert_eq!(reference.audio.sample_rate, 24000);
    assert_eq!(reference.audio.samples.len(), rows.len() * 1920);

    for ext in ["pcm", "flac", "mp3", "opus"] {
        let path = tmp.path().join(format!("out.{ext}"));
        let o = speak(&path, &[]);
        assert!(o.status.success(), "{ext}: {}", stderr(&o));
        let seconds = if ext == "pcm" {
            std::fs::metadata(&path).unwrap().len() as f64 / 2.0 / 24000.0
        } else {
            read_audio(&path).unwrap().audio.duration_secs()
        };
        // Lossy codecs pad to their frame sizes.
        let expected = reference.audio.duration_secs();
        assert!((seconds - expected).abs() < 0.08, "{ext}: {seconds} s, expected {expected} s");
    }
}

#[test]
fn streamed_output_matches_whole_output() {
    let tmp = tempfile::tempdir().unwrap();
    let (whole, streamed) = (tmp.path().join("whole.wav"), tmp.path().join("stream.wav"));
    assert!(speak(&whole, &[]).status.success());
    let o = speak(&streamed, &["--stream", "--stream-frames", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (a, b) = (read_audio(&whole).unwrap().audio.samples, read_audio(&streamed).unwrap().audio.samples);
    assert_eq!(a.len(), b.len());
    // 16-bit output: chunked decoding may round a sample to the neighbouring step.
    let d = infer_tests::max_abs_diff(&a, &b);
    assert!(d <= 2.0 / 32768.0, "max |diff| {d}");
}

fn copy_model(to: &Path) -> PathBuf {
    let model = to.join("Qwen3-TTS-12Hz-tiny");
    for (from, dest) in
        [(fixture("qwen3-tts/small"), model.clone()), (fixture("qwen3-tts/codec"), to.join("Qwen3-TTS-Tokenizer-12Hz"))]
    {
        std::fs::create_dir_all(&dest).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let e = e.unwrap();
            if e.file_name() != "speech_tokenizer" {
                std::fs::copy(e.path(), dest.join(e.file_name())).unwrap();
            }
        }
    }
    model
}

#[test]
fn voice_presets_from_an_8khz_recording() {
    let tmp = tempfile::tempdir().unwrap();
    let model = copy_model(tmp.path());
    let m = model.to_str().unwrap();
    // An 8 kHz copy of the reference: converted to 24 kHz on the way in.
    let reference = read_audio(fixture("qwen3-tts/small/ref.wav")).unwrap().audio;
    let narrow = infer_core::audio_io::resample(&reference, 8000).unwrap();
    let ref8k = tmp.path().join("ref8k.wav");
    write_audio(&ref8k, &narrow, Some(AudioFormat::Wav)).unwrap();

    let o = infer(&["voice", "--model", m, "--name", "anna", "--ref-audio", ref8k.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = infer(&["voice", "--model", m]);
    assert!(String::from_utf8_lossy(&o.stdout).lines().any(|l| l == "anna"));
    let out = tmp.path().join("anna.wav");
    let o = infer(&[
        "speak",
        "--model",
        m,
        "--text",
        TEXT,
        "--voice",
        "anna",
        "--out",
        out.to_str().unwrap(),
        "--max-frames",
        "6",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.exists());
}

fn assert_clean_error(args: &[&str], needles: &[&str]) {
    Infer::new(env!("CARGO_BIN_EXE_infer")).assert_clean_error(args, needles)
}

#[test]
fn bad_speech_requests_give_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.wav");
    let (m, o) = (model(), out.to_str().unwrap().to_string());
    let base = |text: &'static str| vec!["speak", "--model", Box::leak(m.clone().into_boxed_str()), "--text", text];
    let with = |mut v: Vec<&'static str>, extra: &[&'static str]| {
        v.extend_from_slice(&["--out", Box::leak(o.clone().into_boxed_str())]);
        v.extend_from_slice(extra);
        v
    };
    assert_clean_error(&with(base(""), &[]), &["empty"]);
    assert_clean_error(&with(base("Hi."), &["--voice", "nobody"]), &["unknown voice `nobody`"]);
    assert_clean_error(&with(base("Hi."), &["--language", "klingon"]), &["unknown language `klingon`"]);

    let silent = tmp.path().join("silent.wav");
    write_audio(&silent, &Audio::new(vec![0.0; 48000], 24000), Some(AudioFormat::Wav)).unwrap();
    let short = tmp.path().join("short.wav");
    write_audio(&short, &Audio::new(vec![0.3; 2400], 24000), Some(AudioFormat::Wav)).unwrap();
    let text_file = tmp.path().join("notes.wav");
    std::fs::write(&text_file, "this is not audio").unwrap();
    for (path, needle) in [(&silent, "silent"), (&short, "short"), (&text_file, "notes.wav")] {
        let p: &'static str = Box::leak(path.to_string_lossy().into_owned().into_boxed_str());
        assert_clean_error(&with(base("Hi."), &["--ref-audio", p]), &[needle]);
    }
    let odd: &'static str = Box::leak(tmp.path().join("x.xyz").to_string_lossy().into_owned().into_boxed_str());
    let mut v = base("Hi.");
    v.extend_from_slice(&["--out", odd]);
    assert_clean_error(&v, &["xyz"]);

    // A checkpoint without its codec.
    let lonely = tmp.path().join("lonely");
    std::fs::create_dir_all(&lonely).unwrap();
    for e in std::fs::read_dir(fixture("qwen3-tts/small")).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "speech_tokenizer" {
            std::fs::copy(e.path(), lonely.join(e.file_name())).unwrap();
        }
    }
    let l: &'static str = Box::leak(lonely.to_string_lossy().into_owned().into_boxed_str());
    assert_clean_error(
        &["speak", "--model", l, "--text", "Hi.", "--out", Box::leak(o.clone().into_boxed_str())],
        &["speech_tokenizer", "Qwen3-TTS-Tokenizer-12Hz"],
    );
    assert!(!out.exists(), "failed runs leave no output file");
}
