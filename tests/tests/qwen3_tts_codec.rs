//! The Qwen3-TTS 12 Hz codec against qwen-tts 0.1.1 on a tiny random checkpoint it wrote
//! (tests/fixtures/qwen3-tts/codec, made by tools/fixtures/make_qwen3_tts_codec.py), on every
//! backend setup: decoded waveforms and intermediate activations within tolerance, encoded codes
//! identical, streaming equal to whole-utterance decoding, bad input rejected with clear errors.
//!
//! Tolerances (f32 compute, f32 reference; each test prints its measured max |Δ|). Samples lie
//! in [-1, 1] after the final clamp; the largest sample error is 9.0e-6 on candle and 8.6e-6 on
//! tch over all cases (through ~40 conv layers and SnakeBeta's sin of O(10) arguments);
//! intermediate activations are within 2.9e-6. The bounds are ~7x the measurements, far below what a wrong layer does (a
//! missing normalisation, a shifted causal pad or a wrong window moves samples by > 1e-2).
//! Encoded codes must be identical: the smallest nearest/second-nearest distance margin in the
//! fixture is 2.4e-5 (golden.json), above the ~1e-6 the distances differ by here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use infer_core::audio::{Audio, AudioCodec};
use infer_core::{Backend, DType, Error};
use infer_qwen3_tts::codec::{find_codec_dir, Codec12Hz, SEGMENT_CONTEXT, SEGMENT_FRAMES};
use infer_tests::{copy_dir, fixture, max_abs_diff, Setup};
use safetensors::{Dtype, SafeTensors};

/// Decoded samples: measured max 9.0e-6.
const WAV_TOL: f32 = 5e-5;
/// Decoder front and encoder activations (values O(1-10)): measured max 2.9e-6.
const FRONT_TOL: f32 = 2e-5;
/// Streaming vs whole decode: the same ops on other splits, so only the summation order of the
/// convolutions' matrix products differs: measured max 1.1e-5 (chunks of 2).
const STREAM_TOL: f32 = 5e-5;

fn codec_dir() -> PathBuf {
    fixture("qwen3-tts/codec")
}

fn backend(setup: Setup) -> Backend {
    setup.registry().unwrap().get(setup.backend()).unwrap()
}

fn load(setup: Setup) -> Codec12Hz {
    Codec12Hz::load(&codec_dir(), &backend(setup), DType::F32).unwrap()
}

/// golden.safetensors as f32 / i64 vectors with their shapes.
struct Golden {
    f32s: HashMap<String, (Vec<usize>, Vec<f32>)>,
    i64s: HashMap<String, (Vec<usize>, Vec<i64>)>,
    meta: serde_json::Value,
}

fn golden() -> Golden {
    let bytes = std::fs::read(codec_dir().join("golden.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (mut f32s, mut i64s) = (HashMap::new(), HashMap::new());
    for (name, view) in st.tensors() {
        let shape = view.shape().to_vec();
        match view.dtype() {
            Dtype::F32 => {
                let v = view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                f32s.insert(name, (shape, v));
            }
            Dtype::I64 => {
                let v = view.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
                i64s.insert(name, (shape, v));
            }
            other => panic!("{name}: unexpected dtype {other:?}"),
        }
    }
    let meta = serde_json::from_str(&std::fs::read_to_string(codec_dir().join("golden.json")).unwrap()).unwrap();
    Golden { f32s, i64s, meta }
}

impl Golden {
    fn codes(&self, name: &str) -> Vec<Vec<u32>> {
        let (shape, v) = &self.i64s[name];
        v.chunks(shape[1]).map(|f| f.iter().map(|&c| c as u32).collect()).collect()
    }
    fn f32(&self, name: &str) -> &[f32] {
        &self.f32s[name].1
    }
}

#[test]
fn decode_matches_reference() {
    let g = golden();
    for setup in Setup::all() {
        let codec = load(setup);
        for case in g.meta["decode"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let codes = g.codes(&format!("{name}.codes"));
            let audio = codec.decode(&codes).unwrap();
            assert_eq!(audio.sample_rate, 24000);
            assert_eq!(audio.samples.len(), codes.len() * 1920, "{name}: one 1920-sample block per frame");
            let from = case["wav_from_sample"].as_u64().unwrap() as usize;
            let diff = max_abs_diff(&audio.samples[from..], g.f32(&format!("{name}.wav")));
            println!("{setup:?} {name}: max |Δ| {diff:.2e}");
            assert!(diff <= WAV_TOL, "{setup:?} {name}: samples differ by {diff}");
        }
    }
}

#[test]
fn decoder_activations_match_reference() {
    let g = golden();
    let codes = g.codes("decode_17.codes");
    for setup in Setup::all() {
        let codec = load(setup);
        for (name, ours) in codec.decoder_front(&codes).unwrap() {
            let diff = max_abs_diff(&ours, g.f32(&format!("inter17.{name}")));
            println!("{setup:?} {name}: max |Δ| {diff:.2e}");
            assert!(diff <= FRONT_TOL, "{setup:?} {name}: differs by {diff}");
        }
    }
}

#[test]
fn encode_matches_reference() {
    let g = golden();
    let wav = g.f32("encode.wav").to_vec();
    let want = g.codes("encode.codes");
    for setup in Setup::all() {
        let codec = load(setup);
        let emb = codec.encoder_embeddings(&wav).unwrap();
        let diff = max_abs_diff(&emb, g.f32("encode.downsampled"));
        println!("{setup:?} encoder embeddings: max |Δ| {diff:.2e}");
        assert!(diff <= FRONT_TOL, "{setup:?}: encoder embeddings differ by {diff}");

        let codes = codec.encode(&Audio::new(wav.clone(), 24000)).unwrap();
        assert_eq!(codes.len(), wav.len().div_ceil(1920));
        assert_eq!(codes, want, "{setup:?}: codes differ from the reference");
    }
}

#[test]
fn streaming_equals_whole_decode() {
    let g = golden();
    let codec = load(Setup::CandleBuiltIn);
    let codes = g.codes("decode_17.codes");
    let whole = codec.decode(&codes).unwrap().samples;
    for chunk in [1, 2, 3, 7, 16] {
        let mut stream = codec.decode_stream();
        let mut out = Vec::new();
        for piece in codes.chunks(chunk) {
            let samples = stream.push(piece).unwrap();
            assert_eq!(samples.len(), piece.len() * 1920, "chunk {chunk}: push returns its frames' samples");
            out.extend(samples);
        }
        out.extend(stream.finish().unwrap());
        let diff = max_abs_diff(&out, &whole);
        println!("chunks of {chunk}: max |Δ| to whole {diff:.2e}");
        assert!(diff <= STREAM_TOL, "chunks of {chunk}: differs from whole decode by {diff}");
    }
    // Uneven pieces, including empty pushes.
    let mut stream = codec.decode_stream();
    let mut out = Vec::new();
    for range in [0..0, 0..4, 4..5, 5..5, 5..13, 13..17] {
        out.extend(stream.push(&codes[range]).unwrap());
    }
    assert!(max_abs_diff(&out, &whole) <= STREAM_TOL);
}

#[test]
fn streaming_crosses_the_reference_segment_boundary() {
    // 310 frames: the reference decodes frames 0..300, then 275..310 afresh and drops 25 frames.
    let g = golden();
    let codec = load(Setup::CandleBuiltIn);
    let codes = g.codes("decode_310.codes");
    let case = g.meta["decode"].as_array().unwrap().iter().find(|c| c["name"] == "decode_310").unwrap();
    let from = case["wav_from_sample"].as_u64().unwrap() as usize;
    assert!(from < SEGMENT_FRAMES * 1920 && codes.len() > SEGMENT_FRAMES);
    let mut stream = codec.decode_stream();
    let mut out = Vec::new();
    for piece in codes.chunks(7) {
        out.extend(stream.push(piece).unwrap());
    }
    assert_eq!(stream.frames(), 310);
    let diff = max_abs_diff(&out[from..], g.f32("decode_310.wav"));
    println!("310 frames in chunks of 7: max |Δ| to reference {diff:.2e}");
    assert!(diff <= WAV_TOL, "differs from the reference by {diff}");
}

#[test]
fn streaming_does_not_redo_work_per_chunk() {
    // Frame by frame over 310 frames: each push decodes its own frame, plus 25 context frames once
    // at the segment restart, as one whole-utterance decode does; the carried left context stops
    // growing once the attention window (8 frames in the fixture) is full.
    let g = golden();
    let codec = load(Setup::CandleBuiltIn);
    let codes = g.codes("decode_310.codes");
    let window = codec.config().decoder_config.sliding_window;
    let mut stream = codec.decode_stream();
    let mut carried = Vec::new();
    for (i, frame) in codes.iter().enumerate() {
        stream.push(std::slice::from_ref(frame)).unwrap();
        let restarts = if i >= SEGMENT_FRAMES { SEGMENT_CONTEXT } else { 0 };
        assert_eq!(stream.decoded_frames(), i + 1 + restarts, "after frame {i}");
        carried.push(stream.carried_values());
    }
    let steady = carried[window];
    println!("carried values after {} frames: {steady}", window + 1);
    assert!(carried[window..SEGMENT_FRAMES].iter().all(|&c| c == steady), "left context grows: {carried:?}");
    assert!(carried[SEGMENT_FRAMES..].iter().all(|&c| c <= steady));
    let mut whole = codec.decode_stream();
    whole.push(&codes).unwrap();
    assert_eq!(whole.decoded_frames(), stream.decoded_frames());
}

#[test]
fn codec_reports_its_shape() {
    let codec = load(Setup::CandleBuiltIn);
    assert_eq!(codec.sample_rate(), 24000);
    assert_eq!(codec.frame_rate(), 12.5);
    assert_eq!(codec.num_codebooks(), 16);
    assert_eq!(codec.samples_per_frame(), 1920);
    assert_eq!(codec.codebook_size(), 2048);
}

fn message(e: Error) -> String {
    e.to_string()
}

#[test]
fn bad_input_gives_clear_errors() {
    let codec = load(Setup::CandleBuiltIn);
    let good = vec![7u32; 16];

    let e = message(codec.decode(&[]).unwrap_err());
    assert!(e.contains("no code frames"), "{e}");

    let e = message(codec.decode(&[good.clone(), vec![1; 15]]).unwrap_err());
    assert!(e.contains("frame 1 has 15 codes, expected 16"), "{e}");

    let mut bad = good.clone();
    bad[3] = 2048;
    let e = message(codec.decode(&[good.clone(), bad.clone()]).unwrap_err());
    assert!(e.contains("frame 1, codebook 3: code 2048 is out of range (codebook size 2048)"), "{e}");

    // A rejected push leaves the stream where it was, counting frames across pushes.
    let mut stream = codec.decode_stream();
    stream.push(std::slice::from_ref(&good)).unwrap();
    let e = message(stream.push(&[good.clone(), bad]).unwrap_err());
    assert!(e.contains("frame 2, codebook 3"), "{e}");
    assert_eq!(stream.frames(), 1);
    assert_eq!(stream.push(std::slice::from_ref(&good)).unwrap().len(), 1920);

    let e = message(codec.encode(&Audio::new(vec![], 24000)).unwrap_err());
    assert!(e.contains("no samples"), "{e}");
    let e = message(codec.encode(&Audio::new(vec![0.0; 100], 16000)).unwrap_err());
    assert!(e.contains("16000 Hz") && e.contains("24000 Hz"), "{e}");
    let e = message(codec.encode(&Audio::new(vec![0.0, f32::NAN], 24000)).unwrap_err());
    assert!(e.contains("sample 1 is NaN"), "{e}");

    // Very short audio still gives one frame.
    let codes = codec.encode(&Audio::new(vec![0.1; 10], 24000)).unwrap();
    assert_eq!(codes.len(), 1);
    assert_eq!(codes[0].len(), 16);
}

#[test]
fn finds_the_codec_folder_beside_or_inside_the_talker() {
    let tmp = tempfile::tempdir().unwrap();
    let talker = tmp.path().join("Qwen3-TTS-12Hz-0.6B-Base");
    std::fs::create_dir_all(&talker).unwrap();

    let e = message(find_codec_dir(&talker).unwrap_err());
    assert!(e.contains("speech_tokenizer") && e.contains("Qwen3-TTS-Tokenizer-12Hz"), "{e}");

    let sibling = tmp.path().join("Qwen3-TTS-Tokenizer-12Hz");
    copy_dir(&codec_dir(), &sibling, &[]);
    assert_eq!(find_codec_dir(&talker).unwrap(), sibling);

    let inside = talker.join("speech_tokenizer");
    copy_dir(&codec_dir(), &inside, &[]);
    assert_eq!(find_codec_dir(&talker).unwrap(), inside, "the checkpoint's own subfolder comes first");
    let codec = Codec12Hz::load_for_model(&talker, &backend(Setup::CandleBuiltIn), DType::F32).unwrap();
    assert_eq!(codec.num_codebooks(), 16);
}

#[test]
fn bad_checkpoints_give_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let b = backend(Setup::CandleBuiltIn);
    let load_err = |dir: &Path| message(Codec12Hz::load(dir, &b, DType::F32).err().expect("load should fail"));

    let e = load_err(tmp.path());
    assert!(e.contains("config.json"), "{e}");

    let config = std::fs::read_to_string(codec_dir().join("config.json")).unwrap();
    std::fs::write(tmp.path().join("config.json"), config.replace("\"qwen3_tts_tokenizer_12hz\"", "\"mimi\"")).unwrap();
    let e = load_err(tmp.path());
    assert!(e.contains("model_type"), "{e}");

    std::fs::write(tmp.path().join("config.json"), &config).unwrap();
    let e = load_err(tmp.path());
    assert!(e.contains("safetensors"), "{e}");

    // A checkpoint missing one tensor names it.
    let bytes = std::fs::read(codec_dir().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().filter(|(n, _)| n != "decoder.pre_conv.conv.bias").collect();
    safetensors::serialize_to_file(kept, None, &tmp.path().join("model.safetensors")).unwrap();
    let e = load_err(tmp.path());
    assert!(e.contains("decoder.pre_conv.conv.bias"), "{e}");
}

/// A checkpoint whose convs are stored weight-normed (`parametrizations.weight.original0/1`)
/// decodes like the plain one: the fold at load recovers the weights.
#[test]
fn weight_norm_is_folded_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(codec_dir().join("config.json"), tmp.path().join("config.json")).unwrap();
    let bytes = std::fs::read(codec_dir().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut normed = 0;
    for (name, view) in st.tensors() {
        let shape = view.shape().to_vec();
        let is_conv = name.ends_with("conv.weight") && shape.len() == 3 && !name.contains("quantizer");
        if !is_conv {
            owned.push((name, shape, view.data().to_vec()));
            continue;
        }
        // v = w * s_o (any positive per-row scale), g = |w_o|: g * v / |v| = w.
        let w: Vec<f32> = view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        let row = w.len() / shape[0];
        let (mut g, mut v) = (Vec::new(), Vec::new());
        for (o, r) in w.chunks(row).enumerate() {
            g.push(r.iter().map(|x| x * x).sum::<f32>().sqrt());
            v.extend(r.iter().map(|x| x * (0.5 + o as f32 * 0.25)));
        }
        let base = name.trim_end_matches("weight");
        let f = |x: &[f32]| x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        owned.push((format!("{base}parametrizations.weight.original0"), vec![shape[0], 1, 1], f(&g)));
        owned.push((format!("{base}parametrizations.weight.original1"), shape, f(&v)));
        normed += 1;
    }
    assert!(normed > 20, "the fixture has convs to weight-norm");
    let views: Vec<(String, safetensors::tensor::TensorView)> = owned
        .iter()
        .map(|(n, s, d)| (n.clone(), safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), d).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &tmp.path().join("model.safetensors")).unwrap();

    let g = golden();
    let codec = Codec12Hz::load(tmp.path(), &backend(Setup::CandleBuiltIn), DType::F32).unwrap();
    let codes = g.codes("decode_5.codes");
    let diff = max_abs_diff(&codec.decode(&codes).unwrap().samples, g.f32("decode_5.wav"));
    assert!(diff <= WAV_TOL, "weight-normed checkpoint decodes {diff} away from the reference");
}

/// Decode speed on a codec with the released checkpoint's sizes (random weights), written by
/// `make_qwen3_tts_codec.py --real-shape DIR`; run with
/// `INFER_CODEC_REAL_SHAPE=DIR cargo test -p infer-tests --release --test qwen3_tts_codec -- --ignored --nocapture`.
/// Prints timings only: timed assertions do not belong in tests.
#[test]
#[ignore = "needs a real-shaped codec folder (INFER_CODEC_REAL_SHAPE)"]
fn decode_speed_on_real_shape() {
    let Ok(dir) = std::env::var("INFER_CODEC_REAL_SHAPE") else {
        println!("INFER_CODEC_REAL_SHAPE not set: skipped");
        return;
    };
    for setup in Setup::per_backend() {
        println!("{setup:?}:");
        time_real_shape(&Codec12Hz::load(Path::new(&dir), &backend(setup), DType::F32).unwrap());
    }
}

fn time_real_shape(codec: &Codec12Hz) {
    let mut state = 3u64;
    let codes: Vec<Vec<u32>> = (0..50)
        .map(|_| {
            (0..16)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((state >> 33) % 2048) as u32
                })
                .collect()
        })
        .collect();
    codec.decode(&codes[..5]).unwrap(); // warm-up
    let audio_secs = codes.len() as f64 / 12.5;
    let start = std::time::Instant::now();
    codec.decode(&codes).unwrap();
    let whole = start.elapsed().as_secs_f64();
    println!(
        "whole decode of {} frames ({audio_secs:.1} s audio): {whole:.2} s, RTF {:.3}",
        codes.len(),
        whole / audio_secs
    );
    for chunk in [1, 5, 25] {
        let mut stream = codec.decode_stream();
        let start = std::time::Instant::now();
        let mut first = None;
        for piece in codes.chunks(chunk) {
            stream.push(piece).unwrap();
            first.get_or_insert(start.elapsed().as_secs_f64());
        }
        let t = start.elapsed().as_secs_f64();
        println!(
            "streamed in chunks of {chunk}: {t:.2} s, RTF {:.3}, first audio after {:.3} s",
            t / audio_secs,
            first.unwrap()
        );
    }
    let wav: Vec<f32> = (0..48000).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
    let start = std::time::Instant::now();
    codec.encode_samples(&wav).unwrap();
    let t = start.elapsed().as_secs_f64();
    println!("encode of 2.0 s audio: {t:.2} s, RTF {:.3}", t / 2.0);
}

/// Half-precision weights and activations (candle): the waveform stays close to the f32
/// reference. Measured on decode_17 (signal rms ~0.3): f16 max |Δ| 2.2e-2, rms 2.7e-3; bf16 max
/// 0.165, rms 2.1e-2 (bf16 keeps 8 significant bits through ~40 convs). Bounds ~2x that.
#[test]
fn half_precision_decode_stays_close() {
    let g = golden();
    let codes = g.codes("decode_17.codes");
    let want = g.f32("decode_17.wav");
    for (dtype, max_tol, rms_tol) in [(DType::F16, 0.05f32, 0.006f32), (DType::BF16, 0.35, 0.05)] {
        let codec = Codec12Hz::load(&codec_dir(), &backend(Setup::CandleBuiltIn), dtype).unwrap();
        let got = codec.decode(&codes).unwrap().samples;
        let diff = max_abs_diff(&got, want);
        let rms = (got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / got.len() as f32).sqrt();
        println!("{dtype}: max |Δ| {diff:.2e}, rms Δ {rms:.2e}");
        assert!(diff <= max_tol && rms <= rms_tol, "{dtype}: max |Δ| {diff}, rms Δ {rms}");
    }
}
