//! Inputs the fuzz targets (fuzz/, tools/fuzz.sh) found crashing a reader, each made small and
//! rebuilt here: every one must now be a clean error (or a clean result), never a panic.
//! docs/reliability.md lists them.

use std::path::Path;

use infer_core::audio::Audio;
use infer_core::audio_io::{decode_audio, resample, StreamResampler};
use infer_core::{DType, Error, GgufFile, ModelLoadOptions};
use infer_tests::{copy_dir, fixture};

/// A GGUF v3 file from raw parts: metadata entries `(key, type, value bytes)` and tensor infos
/// `(name, dims as GGUF stores them, ggml type, offset)`, then `data` at the default alignment.
fn gguf(meta: &[(&str, u32, Vec<u8>)], tensors: &[(&str, &[u64], u32, u64)], data: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((meta.len() as u64).to_le_bytes());
    let string = |b: &mut Vec<u8>, s: &str| {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    };
    for (key, kind, value) in meta {
        string(&mut b, key);
        b.extend(kind.to_le_bytes());
        b.extend(value);
    }
    for (name, dims, kind, offset) in tensors {
        string(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in *dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(kind.to_le_bytes());
        b.extend(offset.to_le_bytes());
    }
    b.resize(b.len().div_ceil(32) * 32, 0);
    b.extend(data);
    b
}

const GGUF_U32: u32 = 4;
const GGML_F32: u32 = 0;

fn open_err(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzz.gguf");
    std::fs::write(&path, bytes).unwrap();
    match GgufFile::open(&path) {
        Ok(_) => panic!("opened"),
        Err(e) => e.to_string(),
    }
}

/// gguf_file: candle's parser divides by `general.alignment`.
#[test]
fn gguf_with_zero_alignment_is_an_error() {
    let meta = [("general.alignment", GGUF_U32, 0u32.to_le_bytes().to_vec())];
    let msg = open_err(&gguf(&meta, &[("t", &[4], GGML_F32, 0)], &[0; 16]));
    assert!(msg.contains("general.alignment is 0"), "{msg}");
}

/// gguf_file: a tensor offset near 2^64 overflowed the start + offset sum.
#[test]
fn gguf_tensor_offset_overflow_is_an_error() {
    let msg = open_err(&gguf(&[], &[("t", &[4], GGML_F32, u64::MAX - 8)], &[0; 16]));
    assert!(msg.contains("tensor `t`") && msg.contains("impossible size or offset"), "{msg}");
}

/// gguf_file: a tensor at an offset that is no multiple of the alignment; candle then asserted
/// on the misaligned block pointer while dequantizing.
#[test]
fn gguf_misaligned_tensor_is_an_error() {
    let msg = open_err(&gguf(&[], &[("t", &[4], GGML_F32, 2)], &[0; 32]));
    assert!(msg.contains("tensor `t` at offset 2 is not aligned"), "{msg}");
    // An alignment of 1 allows any offset by the spec, but not one candle can read in place.
    let meta = [("general.alignment", GGUF_U32, 1u32.to_le_bytes().to_vec())];
    // (The header is 90 bytes, where candle puts the data at this alignment: offset 1 is byte 91.)
    let msg = open_err(&gguf(&meta, &[("t", &[4], GGML_F32, 1)], &[0; 32]));
    assert!(msg.contains("is not aligned"), "{msg}");
}

/// gguf_file (found reading the code of the zero-alignment case): a second `general.alignment`
/// entry overrides the first in candle's map.
#[test]
fn gguf_with_a_second_zero_alignment_is_an_error() {
    let meta = [
        ("general.alignment", GGUF_U32, 32u32.to_le_bytes().to_vec()),
        ("general.alignment", GGUF_U32, 0u32.to_le_bytes().to_vec()),
    ];
    let msg = open_err(&gguf(&meta, &[], &[]));
    assert!(msg.contains("general.alignment is 0"), "{msg}");
}

/// gguf_file: dimensions whose product does not fit in 64 bits.
#[test]
fn gguf_tensor_size_overflow_is_an_error() {
    let msg = open_err(&gguf(&[], &[("t", &[1 << 40, 1 << 40], GGML_F32, 0)], &[0; 16]));
    assert!(msg.contains("tensor `t`") && msg.contains("impossible size or offset"), "{msg}");
}

/// A mono IEEE-float WAV of `samples` at 16 kHz.
fn float_wav(samples: &[f32]) -> Vec<u8> {
    let data: Vec<u8> = samples.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut b = b"RIFF".to_vec();
    b.extend((36 + data.len() as u32).to_le_bytes());
    b.extend(b"WAVEfmt ");
    b.extend(16u32.to_le_bytes());
    b.extend(3u16.to_le_bytes()); // WAVE_FORMAT_IEEE_FLOAT
    b.extend(1u16.to_le_bytes());
    b.extend(16_000u32.to_le_bytes());
    b.extend((16_000u32 * 4).to_le_bytes());
    b.extend(4u16.to_le_bytes());
    b.extend(32u16.to_le_bytes());
    b.extend(b"data");
    b.extend((data.len() as u32).to_le_bytes());
    b.extend(data);
    b
}

/// audio_decode: a float WAV holding NaN or infinity decodes, and rubato's FFT then panicked on
/// it while resampling to the model rate; finite samples near f32's limit overflowed to the same
/// NaN inside the FFT.
#[test]
fn non_finite_or_huge_samples_are_a_resampling_error() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e38, -1e13] {
        let mut samples = vec![0.25f32; 4000];
        samples[1234] = bad;
        let loaded = decode_audio(float_wav(&samples), Some("wav"), "bad.wav").unwrap();
        let err = resample(&loaded.audio, 24_000).unwrap_err().to_string();
        assert!(err.contains("sample 1234") && err.contains("must be finite and within ±1e12"), "{err}");
    }
}

/// audio_decode: a WAVE_FORMAT_EXTENSIBLE header claiming 13 313 channels with a 2-channel mask;
/// symphonia's mask fix-up shifts by more than 31 bits, which panics where overflow checks are on
/// (this debug build; release wraps). `decode_audio` catches a decoder's panic: a bad-file error,
/// of the kind that says a panic was caught (an ordinary refusal reads "not a readable audio file"
/// too).
#[test]
fn a_panic_inside_the_audio_decoder_is_a_bad_file_error() {
    let bytes = std::fs::read(fixture("fuzz/wav-extensible-channel-mask-overflow.wav")).unwrap();
    let err = decode_audio(bytes, Some("wav"), "mask.wav").expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("mask.wav: not a readable audio file"), "{msg}");
    assert_caught_panic(&err, "the decoder panicked");
}

/// `err` came from a caught panic, not from the reader's own error path. Without overflow checks
/// (a release build) these inputs wrap instead of panicking, and only the text is checked.
fn assert_caught_panic(err: &Error, what: &str) {
    if cfg!(debug_assertions) {
        assert!(
            matches!(err, Error::ReaderPanic { panic, .. } if panic.starts_with(what)),
            "not a caught panic of {what:?}: {err:?}"
        );
    }
}

/// resample: rates far apart (here 4 GHz from 10 Hz) made FFTs of gigabytes.
#[test]
fn sample_rates_outside_the_audio_range_are_an_error() {
    for (from, to) in [(0xffff_ff0a, 0x0a0a), (1, 24_000), (24_000, 1), (16_000, 4_000_000)] {
        let err = StreamResampler::new(from, to).err().expect("refused").to_string();
        assert!(err.contains("sample rates must be 1000 to 768000 Hz"), "{err}");
        let audio = Audio::new(vec![0.1; 100], from);
        assert!(resample(&audio, to).is_err());
    }
}

/// voice_file: a torch.save voice whose pickled tensor record has too few arguments; candle's
/// pickle reader indexed past them.
#[test]
fn voice_pickle_with_a_short_tensor_record_is_an_error() {
    let path = fixture("fuzz/voice-pickle-short-rebuild-args.pt");
    let Err(err) = infer_voxtral_tts::voices::read_voice(&path, 64) else { panic!("a short record was accepted") };
    let err = err.to_string();
    assert!(err.contains("voice-pickle-short-rebuild-args.pt"), "{err}");
}

/// voice_file: a pickle whose LONG1 opcode claims more than 8 bytes; candle's pickle reader
/// shifts past 64 bits, which panics where overflow checks are on (this debug build). `read_voice`
/// catches the reader's panic: an unreadable-file error.
#[test]
fn a_panic_inside_the_pickle_reader_is_an_unreadable_voice() {
    let path = fixture("fuzz/voice-pickle-long1-overlong.pt");
    let Err(err) = infer_voxtral_tts::voices::read_voice(&path, 64) else { panic!("an overlong LONG1 was accepted") };
    let msg = err.to_string();
    assert!(msg.contains("voice-pickle-long1-overlong.pt") && msg.contains("unreadable pickle"), "{msg}");
    assert_caught_panic(&err, "the pickle reader panicked");
}

fn load_err(dir: &Path, arch: &str) -> String {
    let backend = infer_backend_candle::CandleBackend::backend().unwrap();
    let opts = ModelLoadOptions { dtype: DType::F32, context_len: 0, ..Default::default() };
    let loaded = match arch {
        "gemma3" => infer_llm::gemma3::load(dir, &backend, &opts),
        _ => infer_llm::llama::load(dir, &backend, &opts),
    };
    match loaded {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

fn load_gemma(dir: &Path) -> String {
    load_err(dir, "gemma3")
}

/// The fixture `rel` with `edit` applied to its config.json.
fn fixture_with(rel: &str, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture(rel), dir.path(), &[]);
    let path = dir.path().join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(v.as_object_mut().unwrap());
    std::fs::write(&path, v.to_string()).unwrap();
    dir
}

fn gemma_with(edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> tempfile::TempDir {
    fixture_with("gemma3/base", edit)
}

/// llm_config: `num_attention_heads` 0 divided the hidden size by zero (Llama, Qwen3 and the
/// GGUF path alike); head counts that do not group are refused in the same place.
#[test]
fn zero_or_ungrouped_attention_heads_are_an_error() {
    let dir = fixture_with("llama3/plain", |c| {
        c.insert("num_attention_heads".into(), 0.into());
        c.remove("head_dim");
    });
    let msg = load_err(dir.path(), "llama");
    assert!(msg.contains("0 heads") && msg.contains("at least 1"), "{msg}");
    let dir = fixture_with("llama3/plain", |c| {
        let heads = c["num_attention_heads"].as_u64().unwrap();
        c.insert("num_key_value_heads".into(), (heads + 1).into());
    });
    let msg = load_err(dir.path(), "llama");
    assert!(msg.contains("split evenly"), "{msg}");
}

/// llm_config: `layer_types` shorter than `num_hidden_layers` indexed past its end.
#[test]
fn gemma_layer_types_of_the_wrong_length_are_an_error() {
    let dir = gemma_with(|c| {
        c["layer_types"].as_array_mut().unwrap().pop();
    });
    let msg = load_gemma(dir.path());
    assert!(msg.contains("layer_types lists 5 layers but num_hidden_layers is 6"), "{msg}");
}

/// llm_config (found reading the code the crash above led to): `sliding_window_pattern` 0 was a
/// division by zero.
#[test]
fn gemma_sliding_window_pattern_zero_is_an_error() {
    let dir = gemma_with(|c| {
        c.remove("layer_types");
        c.insert("sliding_window_pattern".into(), 0.into());
    });
    let msg = load_gemma(dir.path());
    assert!(msg.contains("sliding_window_pattern must be at least 1"), "{msg}");
}

/// llm_config: `hidden_size` 6 411 115 555 made a head size of 1.6 billion, and the rotary
/// frequency table of that size was allocated (gigabytes, out of memory) before any weight could
/// disagree with the config.
#[test]
fn an_absurd_head_size_is_an_error_not_an_allocation() {
    let dir = fixture_with("llama3/plain", |c| {
        c.insert("hidden_size".into(), 6_411_115_555u64.into());
        c.remove("head_dim");
    });
    let msg = load_err(dir.path(), "llama");
    assert!(msg.contains("head size") && msg.contains("larger than 65536"), "{msg}");
}

/// A chat template comes with the checkpoint. Its instruction budget does not bound its output:
/// `'a' * 100000000` is a few instructions, so a loop of 100 asked for 10 GB (the fuzz seed).
/// The render stops at its output cap (64 MiB) with an error instead; here 100 MB, which the
/// old render returned.
#[test]
fn a_chat_template_that_outputs_gigabytes_is_an_error() {
    use infer_core::text::chat_template::JinjaTemplate;
    let src = "{% for i in range(10) %}{{ 'a' * 10000000 }}{% endfor %}";
    let t = JinjaTemplate::new(src.into(), "", "").unwrap();
    let e = t.render(&[infer_core::Message::user("hi")], true).unwrap_err().to_string();
    assert!(e.contains("output passed 64 MiB"), "{e}");
    // Output under the cap still renders.
    let t = JinjaTemplate::new("{{ 'a' * 1000000 }}{{ messages[0].content }}".into(), "", "").unwrap();
    assert_eq!(t.render(&[infer_core::Message::user("hi")], true).unwrap().len(), 1_000_002);
}

/// hf_tokenizer: a `tokenizer.json` with a syntax error inside its `decoder` object (a download
/// cut off there reads the same); tokenizers 0.23.2 `expect`s the decoder's inner parse and
/// panicked. `HfTokenizer::from_dir` catches it: a cannot-parse error naming the file.
#[test]
fn a_panic_inside_the_tokenizer_json_reader_is_an_unreadable_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let json = r#"{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel", "trim_offsets": tr"#;
    std::fs::write(dir.path().join("tokenizer.json"), json).unwrap();
    let Err(err) = infer_core::text::tokenizer::HfTokenizer::from_dir(dir.path()) else { panic!("accepted") };
    let msg = err.to_string();
    assert!(msg.contains("tokenizer.json: cannot parse tokenizer"), "{msg}");
    assert_caught_panic(&err, "the tokenizers crate panicked");
}

/// chat_template: minijinja 2.24 passes the widths of `indent` and `tojson(indent=..)` straight to
/// `str::repeat`; `indent(10**11)` asked for 100 GB in one allocation and aborted the process.
/// Both are bounded (1024) before minijinja's filters run; ordinary widths still work.
#[test]
fn a_chat_template_indenting_by_gigabytes_is_an_error() {
    use infer_core::text::chat_template::JinjaTemplate;
    let hi = [infer_core::Message::user("hi")];
    for src in [
        "{{ 'x\ny' | indent(100000000000) }}",
        "{{ 'x\ny' | indent(width=100000000000) }}",
        "{{ messages | tojson(indent=100000000000) }}",
        "{{ messages | tojson(indent=1e11) }}",
    ] {
        let e = JinjaTemplate::new(src.into(), "", "").unwrap().render(&hi, false).unwrap_err().to_string();
        assert!(e.contains("too wide (at most 1024)"), "{src}: {e}");
    }
    let t = JinjaTemplate::new("{{ 'a\nb' | indent(2) }}|{{ messages | tojson(indent=2) }}".into(), "", "").unwrap();
    let out = t.render(&hi, false).unwrap();
    assert!(out.starts_with("a\n  b|[\n  {\n    \"role\": \"user\""), "{out}");
}

/// hf_tokenizer: a `Replace` normalizer whose regex matches the empty string; tokenizers 0.23.2
/// indexes past its alignments while encoding ("the len is 5 but the index is 5") and panicked.
/// Encoding catches it: a tokenizer error.
#[test]
fn a_panic_inside_the_tokenizers_encoder_is_a_tokenizer_error() {
    use infer_core::Tokenizer;
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture("qwen3/gqa"), dir.path(), &["model.safetensors", "golden.json"]);
    let path = dir.path().join("tokenizer.json");
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    json["normalizer"] = serde_json::json!({"type": "Replace", "pattern": {"Regex": ""}, "content": "b"});
    std::fs::write(&path, json.to_string()).unwrap();
    let tok = infer_core::text::tokenizer::HfTokenizer::from_dir(dir.path()).unwrap();
    for err in [tok.encode("ab", false).unwrap_err(), tok.encode_literal("ab").unwrap_err()] {
        let msg = err.to_string();
        assert!(matches!(err, Error::Tokenizer(_)) && msg.contains("the tokenizers crate panicked"), "{msg}");
    }
}

/// Size amplification: candle 0.11.1 keeps every element of a GGUF metadata array as a 32-byte
/// `Value`, so an array of 2^25 `u8` (a 32 MB file) took 1.1 GB to open (measured: a 16 MB one
/// peaked at 621 MB), and the 2^30 elements candle allows, 32 GB. The header walk ahead of candle
/// refuses arrays over 2^24 elements (real vocabularies have at most 262 144 tokens, merges some
/// 500 000), naming the key.
#[test]
fn a_gguf_metadata_array_of_millions_of_bytes_is_refused() {
    let n: u64 = 1 << 25;
    let mut array = 0u32.to_le_bytes().to_vec();
    array.extend(n.to_le_bytes());
    array.resize(array.len() + n as usize, 0);
    let mut arch = 5u64.to_le_bytes().to_vec();
    arch.extend(b"llama");
    let bytes = gguf(&[("general.architecture", 8, arch), ("tokenizer.ggml.token_type", 9, array)], &[], &[]);
    let msg = open_err(&bytes);
    assert!(msg.contains("tokenizer.ggml.token_type"), "{msg}");
}

/// Size amplification, open: the output cap bounds what a chat template writes, but minijinja 2.24
/// bounds neither `~` / `+` on strings nor `{% set %}` blocks that capture output: a 150-byte
/// template doubling a 10^8-byte string in a loop reached 2 GB (3 doublings; each more doubles it
/// again) within its instruction budget. Needs a size limit in minijinja itself.
#[test]
#[ignore = "open: minijinja 2.24 has no size limit on string concatenation or captured blocks"]
fn a_chat_template_growing_a_string_past_the_cap_is_an_error() {
    use infer_core::text::chat_template::JinjaTemplate;
    let hi = [infer_core::Message::user("hi")];
    for src in [
        "{% set ns = namespace(s='a' * 50000000) %}{% set ns.s = ns.s ~ ns.s %}{{ ns.s | length }}",
        "{% set x %}{% for i in range(2) %}{{ 'a' * 50000000 }}{% endfor %}{% endset %}{{ x | length }}",
    ] {
        let r = JinjaTemplate::new(src.into(), "", "").unwrap().render(&hi, false);
        assert!(r.is_err(), "{src}: built a 100 MB string and rendered {:?}", r.map(|s| s.len()));
    }
}

/// Open: a chat template nesting a list 100 000 deep (`{% set ns.x = [ns.x] %}` in a loop, well
/// within the instruction budget) overflows the stack when minijinja drops, prints or serializes
/// it (recursive), which kills the process. Run alone: it aborts the test binary.
#[test]
#[ignore = "open: aborts the process (stack overflow in minijinja 2.24's recursive drop of nested values)"]
fn a_chat_template_nesting_values_deeply_is_an_error() {
    use infer_core::text::chat_template::JinjaTemplate;
    let src = "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}ok";
    let r = JinjaTemplate::new(src.into(), "", "").unwrap().render(&[infer_core::Message::user("hi")], false);
    assert!(r.is_err(), "rendered {r:?}");
}
