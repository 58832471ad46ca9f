//! `infer speak` / `infer voice` on the tiny Voxtral TTS fixture in the real layout (params.json,
//! consolidated.safetensors, tekken.json, voice_embedding/*.pt): the checkpoint's voices listed,
//! `--flow-noise` + `--temperature 0` reproducing mlx-audio's codes exactly (`--dump-codes`), every
//! output format, `--stream`, and one clear error line for bad input.

use std::path::Path;
use std::process::Output;

use infer_core::audio_io::read_audio;
use infer_tests::cli::{stderr, stdout, Infer};
use infer_tests::fixture;
use serde::Deserialize;

fn infer(args: &[&str]) -> Output {
    Infer::new(env!("CARGO_BIN_EXE_infer")).run(args)
}

fn model() -> String {
    fixture("voxtral-tts/small").to_string_lossy().into_owned()
}

#[derive(Deserialize)]
struct Goldens {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    voice: String,
    max_frames: usize,
    codes: Vec<Vec<u32>>,
}

/// `<case>.noise` of goldens.safetensors saved as the `--flow-noise` file (tensor `noise`).
fn noise_file(case: &str, dst: &Path) {
    let bytes = std::fs::read(fixture("voxtral-tts/small/goldens.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(&format!("{case}.noise")).unwrap();
    std::fs::write(dst, safetensors::serialize([("noise", t)], None).unwrap()).unwrap();
}

fn read_codes(path: &Path) -> Vec<Vec<u32>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(|c| c.parse().unwrap()).collect())
        .collect()
}

#[test]
fn voices_are_listed() {
    let o = infer(&["voice", "--model", &model()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().collect::<Vec<_>>(), ["casual_male", "neutral_female"]);
}

#[test]
fn flow_noise_reproduces_mlx_audio_codes_in_every_format() {
    let g: Goldens =
        serde_json::from_str(&std::fs::read_to_string(fixture("voxtral-tts/small/goldens.json")).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = model();
    for case in &g.cases {
        let noise = tmp.path().join(format!("{}.safetensors", case.name));
        noise_file(&case.name, &noise);
        let codes = tmp.path().join(format!("{}.tsv", case.name));
        let wav = tmp.path().join(format!("{}.wav", case.name));
        let max = case.max_frames.to_string();
        let args = [
            "speak",
            "--model",
            &model,
            "--voice",
            &case.voice,
            "--text",
            &case.text,
            "--out",
            wav.to_str().unwrap(),
            "--temperature",
            "0",
            "--max-frames",
            &max,
            "--flow-noise",
            noise.to_str().unwrap(),
            "--dump-codes",
            codes.to_str().unwrap(),
        ];
        let o = infer(&args);
        assert!(o.status.success(), "{}: {}", case.name, stderr(&o));
        assert_eq!(read_codes(&codes), case.codes, "{}: codes", case.name);
        let audio = read_audio(&wav).unwrap().audio;
        assert_eq!((audio.sample_rate, audio.samples.len()), (24000, case.codes.len() * 1920), "{}", case.name);
        if case.name != "hello" {
            continue;
        }
        // The other formats and streaming, on one case.
        for ext in ["pcm", "flac", "mp3", "opus"] {
            let out = tmp.path().join(format!("out.{ext}"));
            let mut a = args.to_vec();
            a[8] = out.to_str().unwrap();
            a.extend(["--stream", "--stream-frames", "5"]);
            let o = infer(&a);
            assert!(o.status.success(), "{ext}: {}", stderr(&o));
            let seconds = if ext == "pcm" {
                std::fs::metadata(&out).unwrap().len() as f64 / 2.0 / 24000.0
            } else {
                read_audio(&out).unwrap().audio.duration_secs()
            };
            assert!((seconds - audio.duration_secs()).abs() < 0.08, "{ext}: {seconds} s");
        }
    }
}

#[test]
fn bad_voxtral_requests_give_one_line_errors() {
    let infer = Infer::new(env!("CARGO_BIN_EXE_infer"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.wav").to_string_lossy().into_owned();
    let model = model();
    let check = |extra: &[&str], needles: &[&str]| {
        let mut args = vec!["speak", "--model", model.as_str(), "--out", out.as_str()];
        args.extend_from_slice(extra);
        infer.assert_clean_error(&args, needles);
    };
    check(&["--text", "Hello", "--voice", "nobody"], &["unknown voice `nobody`", "casual_male"]);
    let wav = fixture("audio/tone440_16k_mono_ulaw.wav").to_string_lossy().into_owned();
    check(&["--text", "Hello", "--ref-audio", &wav], &["cannot clone a voice"]);
    let bad = tmp.path().join("bad.safetensors");
    std::fs::write(&bad, b"nope").unwrap();
    let bad = bad.to_string_lossy().into_owned();
    check(&["--text", "Hello", "--flow-noise", &bad], &["bad.safetensors", "not a safetensors"]);
    check(&["--text", " ", "--voice", "casual_male"], &["empty"]);
}
