//! Qwen3-TTS end to end through the speech-synthesis plugin contract (`Registry::load_speech_model`
//! -> `SpeechSynthesizer`): the tiny fixtures in the real layout (codec as `speech_tokenizer/` and as
//! a sibling `Qwen3-TTS-Tokenizer-12Hz/`), greedy codes equal to qwen-tts's, x-vector cloning from a
//! WAV, in-context cloning, streamed audio equal to whole-utterance audio, voice presets,
//! cancellation and bad input.

use std::path::{Path, PathBuf};

use infer_core::audio::{Audio, CodebookSampling, RNone, RSome, SpeechOptions, SpeechSynthesizer, Voice};
use infer_core::audio_io::read_audio;
use infer_core::{CancelToken, DType, LoadConfig, Registry};
use infer_qwen3_tts::codec::Codec12Hz;
use infer_qwen3_tts::voices::{VoicePreset, VoiceStore};
use infer_tests::{copy_dir, fixture, max_abs_diff, Setup};
use serde::Deserialize;

#[derive(Deserialize)]
struct Goldens {
    random_speaker: Vec<f32>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    language: String,
    codes: Vec<Vec<u32>>,
    subcode_margins: Vec<f32>,
    ref_text: Option<String>,
    ref_codes: Option<Vec<Vec<u32>>>,
}

fn goldens(dir: &Path) -> Goldens {
    serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap()).unwrap()
}

fn case<'a>(g: &'a Goldens, name: &str) -> &'a Case {
    g.cases.iter().find(|c| c.name == name).unwrap()
}

fn load(dir: &Path) -> Box<dyn SpeechSynthesizer> {
    Registry::builtin().unwrap().load_speech_model(dir, &LoadConfig::default()).unwrap()
}

fn greedy(voice: Voice, language: &str) -> SpeechOptions {
    SpeechOptions {
        voice,
        language: RSome(language.into()),
        temperature: 0.0,
        codebook_sampling: RSome(CodebookSampling { temperature: 0.0, top_k: 0, top_p: 1.0 }),
        max_frames: 23,
        ..SpeechOptions::default()
    }
}

/// Runs a synthesis and returns (frames, samples, number of chunks that carried audio).
fn speak(tts: &dyn SpeechSynthesizer, text: &str, options: &SpeechOptions) -> (Vec<Vec<u32>>, Vec<f32>, usize) {
    let (mut frames, mut samples, mut audio_chunks) = (Vec::new(), Vec::new(), 0);
    let m = tts
        .synthesize(text, options, &CancelToken::new(), &mut |c| {
            frames.extend(c.codes.chunks(c.num_codebooks).map(<[u32]>::to_vec));
            if !c.samples.is_empty() {
                audio_chunks += 1;
                samples.extend_from_slice(&c.samples);
            }
            true
        })
        .unwrap();
    assert_eq!(m.frames, frames.len());
    assert!((m.audio_seconds - samples.len() as f64 / 24000.0).abs() < 1e-9);
    (frames, samples, audio_chunks)
}

/// Frames before the first whose reference sub-codes were a near tie (< 1e-3 apart; our logits
/// drift from the reference's by up to ~1e-4, see qwen3_tts_talker.rs): compared exactly.
fn near_tie(c: &Case) -> usize {
    c.subcode_margins.iter().position(|&m| m < 1e-3).unwrap_or(c.codes.len())
}

fn reference_wav(dir: &Path) -> Audio {
    read_audio(dir.join("ref.wav")).unwrap().audio
}

#[test]
fn greedy_codes_and_audio_in_both_layouts_on_every_setup() {
    // Every setup: the plugin built in, and libinfer_plugin_qwen3_tts loaded by plugins.toml with
    // built-ins off (on candle and on tch).
    for (setup, model) in Setup::all().into_iter().flat_map(|s| ["qwen3-tts/small", "qwen3-tts/mtp"].map(|m| (s, m))) {
        let dir = fixture(model);
        let g = goldens(&dir);
        let cfg = LoadConfig { backend: Some(setup.backend().into()), ..LoadConfig::default() };
        let registry = setup.registry().unwrap();
        let tts = registry.load_speech_model(&dir, &cfg).unwrap();
        let model = format!("{model} on {setup:?}");
        assert_eq!(tts.sample_rate(), 24000);
        assert!(tts.languages().contains(&"english".to_string()));
        // The x-vector case: the speaker encoder, talker, code predictor and codec all run, and
        // its reference has >= 16 frames before any near tie in both fixtures.
        let c = case(&g, "german_wav_xvector");
        let voice = Voice::Reference { audio: reference_wav(&dir), transcript: RNone };
        let (frames, samples, _) = speak(tts.as_ref(), &c.text, &greedy(voice, &c.language));
        let tie = near_tie(c);
        assert!(tie >= 16, "{model}: the fixture should give >= 16 frames before a near tie, got {tie}");
        assert_eq!(frames[..tie], c.codes[..tie], "{model}: codes through the plugin contract");
        assert_eq!(samples.len(), frames.len() * 1920, "{model}: 1920 samples per frame");
        assert!(samples.iter().all(|s| s.is_finite() && s.abs() <= 1.0), "{model}: samples within ±1");
        // The golden waveform: goldens.json has the reference's codes, not its audio, so it is
        // what the codec makes of those codes, on this setup; the codec is the reference's
        // within WAV_TOL (checked here on a golden of qwen-tts's own decode, and throughout by
        // qwen3_tts_codec.rs). The decoder is causal: the samples of the frames before the near
        // tie depend on those frames only.
        let codec = Codec12Hz::load_for_model(&dir, &registry.get(setup.backend()).unwrap(), DType::F32).unwrap();
        let (codes, wav) = codec_golden("decode_5");
        let anchor = max_abs_diff(&codec.decode_samples(&codes).unwrap(), &wav);
        assert!(anchor <= WAV_TOL, "{model}: the codec decodes qwen-tts's decode_5 codes {anchor} from its waveform");
        let golden = codec.decode_samples(&c.codes[..tie]).unwrap();
        let d = max_abs_diff(&samples[..golden.len()], &golden);
        eprintln!("{model}: audio {d} from the golden codes' waveform; the codec {anchor} from qwen-tts's");
        assert!(d <= WAV_TOL, "{model}: audio of the first {tie} frames is {d} from the golden codes' waveform");
    }
}

/// Samples (in [-1, 1]) against the golden waveform. The speech path decodes the same codes with
/// the same codec in one chunk: measured 0 on candle and tch, 5.0e-6 on MLX. The codec against
/// qwen-tts's own waveform of decode_5: 4.6e-6 (tch) to 6.4e-6 (MLX); 9.0e-6 at most over every
/// case in qwen3_tts_codec.rs, whose bound this is (over 5x the largest). Scaling the audio by
/// 0.9999 moves it 1e-4.
const WAV_TOL: f32 = 5e-5;

/// Codes and the waveform qwen-tts decoded them to, from the codec fixture's goldens.
fn codec_golden(name: &str) -> (Vec<Vec<u32>>, Vec<f32>) {
    let bytes = std::fs::read(fixture("qwen3-tts/codec").join("golden.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let codes = st.tensor(&format!("{name}.codes")).unwrap();
    assert_eq!(codes.dtype(), safetensors::Dtype::I64);
    let books = codes.shape()[1];
    let codes: Vec<u32> =
        codes.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32).collect();
    let wav = st.tensor(&format!("{name}.wav")).unwrap();
    assert_eq!(wav.dtype(), safetensors::Dtype::F32);
    let wav = wav.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    (codes.chunks(books).map(<[u32]>::to_vec).collect(), wav)
}

#[test]
fn streamed_audio_equals_whole_utterance() {
    let dir = fixture("qwen3-tts/small");
    let tts = load(&dir);
    let text = "Numbers like 42 are read aloud.";
    let (frames, whole, chunks) = speak(tts.as_ref(), text, &greedy(Voice::Default, "english"));
    assert_eq!(chunks, 1);
    // (every, first): chunks of `every` frames, the first after `first` (0: after `every`).
    for (every, first) in [(1, 0), (3, 0), (7, 0), (7, 1)] {
        let options =
            SpeechOptions { stream_frames: every, first_chunk_frames: first, ..greedy(Voice::Default, "english") };
        let (f, streamed, chunks) = speak(tts.as_ref(), text, &options);
        assert_eq!(f, frames);
        assert_eq!(chunks, expected_chunks(frames.len(), every, first), "chunks of {every} frames, first {first}");
        // The codec carries its causal state across chunks: only float summation order differs
        // (measured up to 1.1e-5 on samples in [-1, 1]; the codec's own streaming bound is 5e-5).
        let d = max_abs_diff(&streamed, &whole);
        assert!(d <= 5e-5, "stream every {every} frames: max |diff| {d}");
    }
}

/// Chunks a streamed synthesis of `frames` frames delivers (`SpeechOptions::chunk_due`).
fn expected_chunks(frames: usize, every: usize, first: usize) -> usize {
    match first {
        0 => frames.div_ceil(every),
        first => 1 + frames.saturating_sub(first).div_ceil(every),
    }
}

#[test]
fn x_vector_cloning_from_a_wav_matches_qwen_tts() {
    let dir = fixture("qwen3-tts/small");
    let g = goldens(&dir);
    let tts = load(&dir);
    let c = case(&g, "german_wav_xvector");
    let voice = Voice::Reference { audio: reference_wav(&dir), transcript: RNone };
    let (frames, _, _) = speak(tts.as_ref(), &c.text, &greedy(voice, &c.language));
    let tie = near_tie(c);
    assert!(tie >= 16, "the fixture should give a long exact prefix, got {tie}");
    assert_eq!(frames[..tie], c.codes[..tie], "speaker encoder -> x-vector -> talker");
}

#[test]
fn in_context_cloning_speaks_only_the_new_text() {
    let (_tmp, model) = writable_copy();
    let g = goldens(&model);
    // qwen-tts's own in-context run (the `icl` golden, from reference codes it drew at random):
    // what it returns, and so what we must, is the new text's frames only, all 23 of them exact
    // (no near tie). The reference's frames are in the prompt, never in the output.
    let c = case(&g, "icl");
    let (transcript, golden_ref) = (c.ref_text.clone().unwrap(), c.ref_codes.clone().unwrap());
    assert_eq!(near_tie(c), c.codes.len(), "the icl golden has no near tie");
    assert!(c.codes.iter().all(|f| !golden_ref.contains(f)), "qwen-tts's output holds no reference frame");
    let preset = VoicePreset { xvector: g.random_speaker.clone(), in_context: Some((transcript, golden_ref)) };
    VoiceStore::open(&model).unwrap().save("golden-icl", preset).unwrap();
    let tts = load(&model);
    let (frames, _, _) = speak(tts.as_ref(), &c.text, &greedy(Voice::Preset("golden-icl".into()), &c.language));
    assert_eq!(frames, c.codes, "in-context codes vs qwen-tts's");

    // From a WAV the reference codes are the codec's encoding of it (13 frames), which the
    // talker is prompted with: none of them comes back (measured: none of the 23 output frames
    // equals a reference frame, nor shares its first code with one).
    let codec =
        Codec12Hz::load_for_model(&model, &Registry::builtin().unwrap().get("candle").unwrap(), DType::F32).unwrap();
    let wav = reference_wav(&model);
    let ref_codes = codec.encode_samples(&wav.samples).unwrap();
    let voice = Voice::Reference {
        audio: wav,
        transcript: RSome("This is the reference transcript of the cloned voice.".into()),
    };
    let (frames, samples, _) = speak(tts.as_ref(), "Hello world.", &greedy(voice, "english"));
    assert!(!frames.is_empty());
    let echoed = frames.iter().filter(|f| ref_codes.contains(f)).count();
    assert_eq!(echoed, 0, "{echoed} of the {} output frames are the reference's", frames.len());
    // The audio is the new frames' only, decoded as the continuation of the reference's: the
    // decode of reference + output less the reference's samples (measured 0 apart: the same
    // ops). Not priming the decoder with the reference puts it 1.3 away.
    let primed: Vec<Vec<u32>> = ref_codes.iter().chain(&frames).cloned().collect();
    let continued = codec.decode_samples(&primed).unwrap().split_off(ref_codes.len() * 1920);
    assert_eq!(samples.len(), frames.len() * 1920);
    let d = max_abs_diff(&samples, &continued);
    assert!(d <= WAV_TOL, "audio {d} from the output frames' decode after the reference's");
}

/// A copy of the small fixture (with its codec) where presets can be written.
fn writable_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("Qwen3-TTS-12Hz-tiny");
    copy_dir(&fixture("qwen3-tts/small"), &model, &["speech_tokenizer"]);
    copy_dir(&fixture("qwen3-tts/codec"), &tmp.path().join("Qwen3-TTS-Tokenizer-12Hz"), &[]);
    (tmp, model)
}

#[test]
fn voice_presets_are_saved_and_reused() {
    let (_tmp, model) = writable_copy();
    let g = goldens(&model);
    let tts = load(&model);
    let wav = reference_wav(&model);
    tts.save_voice("anna", &wav, None).unwrap();
    tts.save_voice("anna-icl", &wav, Some("This is the reference transcript of the cloned voice.")).unwrap();
    let err = tts.save_voice("bad name", &wav, None).unwrap_err().to_string();
    assert!(err.contains("voice name"), "{err}");

    // A fresh load sees the presets; the x-vector preset speaks as the reference did.
    let tts = load(&model);
    assert_eq!(tts.voices(), ["anna", "anna-icl"]);
    let c = case(&g, "german_wav_xvector");
    let by_preset = speak(tts.as_ref(), &c.text, &greedy(Voice::Preset("anna".into()), &c.language));
    let by_wav =
        speak(tts.as_ref(), &c.text, &greedy(Voice::Reference { audio: wav.clone(), transcript: RNone }, &c.language));
    assert_eq!(by_preset.0, by_wav.0);
    let by_ref = speak(
        tts.as_ref(),
        "Hello world.",
        &greedy(
            Voice::Reference {
                audio: wav,
                transcript: RSome("This is the reference transcript of the cloned voice.".into()),
            },
            "english",
        ),
    );
    let by_preset = speak(tts.as_ref(), "Hello world.", &greedy(Voice::Preset("anna-icl".into()), "english"));
    assert_eq!(by_preset.0, by_ref.0);
}

#[test]
fn cancelling_mid_stream_stops_with_cancelled() {
    let tts = load(&fixture("qwen3-tts/small"));
    let mut seen = 0;
    let err = tts
        .synthesize(
            "Numbers like 42 are read aloud.",
            &greedy(Voice::Default, "english"),
            &CancelToken::new(),
            &mut |_| {
                seen += 1;
                seen < 3
            },
        )
        .unwrap_err();
    assert!(matches!(err, infer_core::Error::Cancelled), "{err}");
    assert_eq!(seen, 3);
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = fixture("qwen3-tts/small");
    let tts = load(&dir);
    let fail = |text: &str, options: SpeechOptions| -> String {
        tts.synthesize(text, &options, &CancelToken::new(), &mut |_| true).unwrap_err().to_string()
    };
    assert!(fail("  ", greedy(Voice::Default, "english")).contains("empty"));
    let e = fail("Hi.", greedy(Voice::Preset("nobody".into()), "english"));
    assert!(e.contains("unknown voice `nobody`"), "{e}");
    let e = fail("Hi.", greedy(Voice::Default, "klingon"));
    assert!(e.contains("unknown language `klingon`") && e.contains("english"), "{e}");
    let silent = Audio::new(vec![0.0; 48000], 24000);
    let e = fail("Hi.", greedy(Voice::Reference { audio: silent, transcript: RNone }, "english"));
    assert!(e.contains("silent"), "{e}");
    let short = Audio::new(reference_wav(&dir).samples[..2400].to_vec(), 24000);
    let e = fail("Hi.", greedy(Voice::Reference { audio: short, transcript: RNone }, "english"));
    assert!(e.contains("short"), "{e}");

    // A checkpoint without its codec says where it looked.
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    copy_dir(&dir, &model, &["speech_tokenizer"]);
    let e = Registry::builtin().unwrap().load_speech_model(&model, &LoadConfig::default()).err().unwrap().to_string();
    assert!(e.contains("speech_tokenizer") && e.contains("Qwen3-TTS-Tokenizer-12Hz"), "{e}");
}

/// The model plugin built in, the backend from the tch plugin library: same codes, same audio.
#[test]
fn tch_backend_gives_the_same_codes_and_audio() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("plugins.toml");
    let lib = infer_tests::plugin_library("infer_plugin_tch");
    std::fs::write(&config, format!("builtin_plugins = true\n[[plugin]]\npath = {lib:?}\n")).unwrap();
    let registry = Registry::from_config(infer_core::PluginConfig::from_file(&config).unwrap()).unwrap();
    let on_tch = LoadConfig { backend: Some("tch".into()), ..LoadConfig::default() };

    let dir = fixture("qwen3-tts/small");
    let g = goldens(&dir);
    let c = case(&g, "non_streaming");
    let candle = speak(load(&dir).as_ref(), &c.text, &greedy(Voice::Default, "english"));
    let tch = registry.load_speech_model(&dir, &on_tch).unwrap();
    let ours = speak(tch.as_ref(), &c.text, &greedy(Voice::Default, "english"));
    assert_eq!(ours.0, candle.0, "codes on tch vs candle");
    let d = max_abs_diff(&ours.1, &candle.1);
    assert!(d <= 5e-5, "audio on tch vs candle: max |diff| {d}");
}
