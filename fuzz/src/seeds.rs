//! Seed corpora, made from the repository's fixtures and the real models tools/models/fetch.sh
//! downloaded (`tools/fuzz.sh` writes them with the `make_seeds` target before fuzzing): each
//! target starts from real, valid inputs of its format.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use gguf_file::Value;
use infer_core::audio::Audio;
use infer_core::audio_io::{encode_audio, AudioFormat};
use serde_json::Value as Json;

use crate::fixture;

/// Writes every target's seeds under `root/<target>/`.
pub fn write_all(root: &Path) {
    let mut all: BTreeMap<&str, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    all.insert("gguf_file", gguf_seeds());
    all.insert("safetensors", safetensors_seeds());
    all.insert("llm_config", llm_config_seeds());
    all.insert("qwen3_tts_config", picked(&[(0, "qwen3-tts/small/config.json"), (1, "qwen3-tts/codec/config.json")]));
    all.insert("voxtral_tts_params", files(&["voxtral-tts/small/params.json", "voxtral-tts/bf16/params.json"]));
    all.insert(
        "voxtral_realtime_config",
        picked(&[(0, "voxtral-realtime/mistral/params.json"), (1, "voxtral-realtime/hf/config.json")]),
    );
    all.insert("plugins_toml", plugins_toml_seeds());
    all.insert("audio_decode", audio_seeds());
    all.insert("tekken", tekken_seeds());
    all.insert("voice_file", voice_seeds());
    all.insert("openai_request", crate::server_seeds::openai_request_seeds());
    all.insert("server_toml", crate::server_seeds::server_toml_seeds());
    all.insert("http_server", crate::server_seeds::http_server_seeds());
    all.insert("hf_tokenizer", crate::text_seeds::hf_tokenizer_seeds());
    all.insert("chat_template", crate::text_seeds::chat_template_seeds());
    for (target, seeds) in all {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("seed directory");
        for (name, bytes) in seeds {
            std::fs::write(dir.join(name), bytes).expect("seed file");
        }
    }
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap_or_else(|e| panic!("fixture {rel}: {e}"))
}

fn seed_name(rel: &str) -> String {
    rel.replace('/', "_")
}

fn files(rels: &[&str]) -> Vec<(String, Vec<u8>)> {
    rels.iter().map(|r| (seed_name(r), read(r))).collect()
}

/// Files behind the one-byte selector their target reads first.
fn picked(rels: &[(u8, &str)]) -> Vec<(String, Vec<u8>)> {
    rels.iter()
        .map(|(pick, r)| {
            let mut bytes = vec![*pick];
            bytes.extend(read(r));
            (seed_name(r), bytes)
        })
        .collect()
}

fn llm_config_seeds() -> Vec<(String, Vec<u8>)> {
    // The same order as llm_config's fixture table.
    let fixtures = ["qwen3/gqa", "qwen3/head-dim", "qwen2/base", "llama3/scaled", "gemma3/base", "gemma3/window-long"];
    let configs: Vec<String> = fixtures.iter().map(|f| format!("{f}/config.json")).collect();
    picked(&configs.iter().enumerate().map(|(i, c)| (i as u8, c.as_str())).collect::<Vec<_>>())
}

fn plugins_toml_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = vec![(
        "repo_plugins.toml".to_string(),
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins.toml")).expect("plugins.toml"),
    )];
    let full = "builtin_plugins = false\ndefault_backends = [\"tch\", \"candle\"]\n\n[aliases]\ncpu = \"candle\"\n\
                gpu = { backend = \"tch\", device = \"cuda\" }\n\n[[plugin]]\npath = \"lib/libx.so\"\noptional = true\n\
                backends = [\"tch\"]\n";
    seeds.push(("full.toml".to_string(), full.as_bytes().to_vec()));
    seeds
}

fn audio_seeds() -> Vec<(String, Vec<u8>)> {
    // Hint bytes: 0 none, 1 wav, 2 flac, 3 mp3, 4 ogg, 5 opus (audio_decode's table).
    let mut seeds: Vec<(String, Vec<u8>)> = [
        (1, "audio/tone440_8k_mono_s16.wav"),
        (1, "audio/tone440_16k_mono_ulaw.wav"),
        (4, "audio/tone440-1000_22k_stereo.ogg"),
        (3, "audio/tone440_44k_mono.mp3"),
        (2, "audio/tone440-1000_44k_stereo.flac"),
    ]
    .iter()
    .map(|(hint, rel)| {
        let mut bytes = vec![*hint as u8];
        bytes.extend(read(rel));
        (seed_name(rel), bytes)
    })
    .collect();
    // A short clip in every format `infer speak` writes (what a user feeds back in).
    let rate = 16_000;
    let samples: Vec<f32> = (0..800).map(|i| (i as f32 * 0.17).sin() * 0.4).collect();
    let clip = Audio::new(samples, rate);
    for (hint, format) in AudioFormat::ALL.iter().enumerate() {
        if !format.available() || *format == AudioFormat::Pcm {
            continue;
        }
        let bytes = encode_audio(&clip, *format).expect("encode a seed clip");
        let mut seed = vec![hint as u8];
        seed.extend(bytes);
        seeds.push((format!("speak_{}", format.name()), seed));
    }
    seeds
}

fn tekken_seeds() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = ["voxtral-realtime/tekken.json", "voxtral-tts/small/tekken.json"]
        .iter()
        .map(|r| (seed_name(r), read(r)))
        .collect();
    // The real vocabulary (tools/models/fetch.sh), cut to a size a fuzz input can have.
    if let Ok(text) = std::fs::read(crate::models_dir().join("tekken_240911.json")) {
        files.push(("real_tekken_240911.json".into(), trimmed_tekken(&text)));
    }
    for (_, bytes) in &mut files {
        bytes.push(0);
        bytes.extend(b"Hello, world! [AUDIO] caf\xc3\xa9 12345");
    }
    files
}

/// A real tekken.json with its regular vocabulary cut to the first [`REAL_VOCAB`] ranks (the
/// config's vocabulary size with it); config, special tokens and audio section as they are.
fn trimmed_tekken(text: &[u8]) -> Vec<u8> {
    let mut v: Json = serde_json::from_slice(text).expect("real tekken.json");
    if let Some(vocab) = v["vocab"].as_array_mut() {
        vocab.truncate(REAL_VOCAB);
    }
    let specials = v["config"]["default_num_special_tokens"].as_u64().unwrap_or(0);
    v["config"]["default_vocab_size"] = Json::from(REAL_VOCAB as u64 + specials);
    serde_json::to_vec(&v).expect("tekken.json")
}

fn voice_seeds() -> Vec<(String, Vec<u8>)> {
    // kind (0 .pt, 1 .safetensors), dim (u16 LE), file.
    let voices = [
        (0u8, 64u16, "voxtral-tts/small/voice_embedding/casual_male.pt"),
        (0, 64, "voxtral-tts/small/voice_embedding/neutral_female.pt"),
        (0, 48, "voxtral-tts/bf16/voice_embedding/casual_male.pt"),
        (1, 48, "voxtral-tts/bf16/voice_embedding/casual_male.safetensors"),
        (1, 48, "voxtral-tts/bf16/voice_embedding/fr_female.safetensors"),
    ];
    voices
        .iter()
        .map(|(kind, dim, rel)| {
            let mut bytes = vec![*kind];
            bytes.extend(dim.to_le_bytes());
            bytes.extend(read(rel));
            (seed_name(rel), bytes)
        })
        .collect()
}

fn safetensors_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = files(&[
        "voxtral-tts/bf16/voice_embedding/casual_male.safetensors",
        "qwen3/sharded/model-00001-of-00003.safetensors",
    ]);
    // One small tensor of each dtype the reader accepts.
    let f32s: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let halves: Vec<u8> = (0..6).flat_map(|i| [i as u8, 0x3c]).collect();
    let ints: Vec<u8> = (0..6u32).flat_map(|i| i.to_le_bytes()).collect();
    let longs: Vec<u8> = (0..6i64).flat_map(|i| i.to_le_bytes()).collect();
    let bytes: Vec<u8> = (0..6u8).collect();
    use safetensors::tensor::TensorView;
    use safetensors::Dtype as D;
    let views = [
        ("a.f32", TensorView::new(D::F32, vec![2, 3], &f32s).unwrap()),
        ("b.f16", TensorView::new(D::F16, vec![3, 2], &halves).unwrap()),
        ("c.bf16", TensorView::new(D::BF16, vec![6], &halves).unwrap()),
        ("d.u32", TensorView::new(D::U32, vec![6], &ints).unwrap()),
        ("e.i64", TensorView::new(D::I64, vec![1, 6], &longs).unwrap()),
        ("f.u8", TensorView::new(D::U8, vec![6], &bytes).unwrap()),
    ];
    seeds.push(("dtypes.safetensors".into(), safetensors::serialize(views, None).expect("serialize")));
    seeds
}

fn gguf_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = vec![
        ("qwen3_gqa.gguf".into(), llm_as_gguf("qwen3/gqa", "qwen3", false)),
        ("gemma3_base.gguf".into(), llm_as_gguf("gemma3/base", "gemma3", true)),
        ("dtypes.gguf".into(), dtypes_gguf()),
    ];
    seeds.extend(real_gguf_seeds());
    seeds
}

/// The real models tools/models/fetch.sh downloaded (none when it has not run), cut to a size a
/// fuzz input can have: see [`trimmed_gguf`].
fn real_gguf_seeds() -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(crate::models_dir()) else { return Vec::new() };
    let mut paths: Vec<_> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "gguf"));
    paths.sort();
    paths.iter().map(|p| (format!("real_{}", p.file_name().unwrap().to_string_lossy()), trimmed_gguf(p))).collect()
}

/// Tokens of a real vocabulary kept in its trimmed seed.
const REAL_VOCAB: usize = 1024;

/// A real GGUF's metadata (every key, as the converter wrote it) and its small tensors (norms,
/// biases), with the vocabulary cut to its first [`REAL_VOCAB`] tokens: the per-token arrays
/// together, merges whose pieces survive, and special-token ids moved into the kept range.
fn trimmed_gguf(path: &Path) -> Vec<u8> {
    let mut file = std::fs::File::open(path).expect("real GGUF");
    let content = gguf_file::Content::read(&mut file).expect("real GGUF header");
    let tokens: Vec<String> = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.to_string().ok().cloned()).collect(),
        _ => Vec::new(),
    };
    let kept: std::collections::HashSet<&str> = tokens.iter().take(REAL_VOCAB).map(String::as_str).collect();
    let mut meta: Vec<(String, Value)> = Vec::new();
    for (key, value) in &content.metadata {
        let value = match value {
            Value::Array(a) if a.len() == tokens.len() && key.starts_with("tokenizer.ggml.") => {
                Value::Array(a[..REAL_VOCAB.min(a.len())].to_vec())
            }
            Value::Array(a) if key == "tokenizer.ggml.merges" => Value::Array(
                a.iter()
                    .filter(|m| {
                        let Ok(m) = m.to_string() else { return false };
                        let Some((l, r)) = m.split_once(' ') else { return false };
                        kept.contains(l) && kept.contains(r) && kept.contains(format!("{l}{r}").as_str())
                    })
                    .cloned()
                    .collect(),
            ),
            Value::U32(id) if key.ends_with("_token_id") && *id as usize >= REAL_VOCAB => {
                Value::U32(REAL_VOCAB as u32 - 1 - (*id % 16))
            }
            other => other.clone(),
        };
        meta.push((key.clone(), value));
    }
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (name, info) in &content.tensor_infos {
        if info.shape.elem_count() <= 4096 {
            let t = content.tensor(&mut file, name, &Device::Cpu).expect("real GGUF tensor");
            tensors.push((name.clone(), t));
        }
    }
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    write_gguf(&meta, &tensors)
}

/// A fixture LLM converted to GGUF as llama.cpp's converter lays it out (names, hyperparameter
/// keys, the tokenizer as `gpt2` BPE or, with `spm`, as SentencePiece pieces with scores);
/// matrices whose rows split into Q8_0 blocks are quantized.
fn llm_as_gguf(rel: &str, arch: &str, spm: bool) -> Vec<u8> {
    let cfg: Json = serde_json::from_slice(&read(&format!("{rel}/config.json"))).expect("fixture config");
    let tok: Json = serde_json::from_slice(&read(&format!("{rel}/tokenizer.json"))).expect("fixture tokenizer");
    let n = |k: &str| Value::U32(cfg[k].as_u64().unwrap_or(0) as u32);
    let key = |k: &str| format!("{arch}.{k}");
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (key("embedding_length"), n("hidden_size")),
        (key("feed_forward_length"), n("intermediate_size")),
        (key("block_count"), n("num_hidden_layers")),
        (key("attention.head_count"), n("num_attention_heads")),
        (key("attention.head_count_kv"), n("num_key_value_heads")),
        (key("attention.key_length"), n("head_dim")),
        (key("context_length"), n("max_position_embeddings")),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(cfg["rms_norm_eps"].as_f64().unwrap_or(1e-6) as f32)),
        (key("rope.freq_base"), Value::F32(10_000.0)),
        (key("attention.sliding_window"), n("sliding_window")),
        ("general.sampling.temp".into(), Value::F32(0.7)),
    ];
    // Vocabulary in id order, added tokens after the model's.
    let mut vocab: Vec<(u64, String, i32)> = tok["model"]["vocab"]
        .as_object()
        .expect("BPE vocab")
        .iter()
        .map(|(t, id)| (id.as_u64().unwrap(), t.clone(), 1))
        .collect();
    for a in tok["added_tokens"].as_array().into_iter().flatten() {
        vocab.push((a["id"].as_u64().unwrap(), a["content"].as_str().unwrap().to_string(), 3));
    }
    vocab.sort();
    let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    meta.push(("tokenizer.ggml.tokens".into(), strings(vocab.iter().map(|v| v.1.clone()).collect())));
    meta.push(("tokenizer.ggml.token_type".into(), Value::Array(vocab.iter().map(|v| Value::I32(v.2)).collect())));
    meta.push(("tokenizer.ggml.bos_token_id".into(), Value::U32(vocab.len() as u32 - 3)));
    meta.push(("tokenizer.ggml.eos_token_id".into(), Value::U32(vocab.len() as u32 - 2)));
    meta.push((
        "tokenizer.chat_template".into(),
        Value::String(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}".into(),
        ),
    ));
    if spm {
        meta.push(("tokenizer.ggml.model".into(), Value::String("llama".into())));
        meta.push((
            "tokenizer.ggml.scores".into(),
            Value::Array((0..vocab.len()).map(|i| Value::F32(-(i as f32))).collect()),
        ));
        meta.push(("tokenizer.ggml.add_space_prefix".into(), Value::Bool(true)));
    } else {
        meta.push(("tokenizer.ggml.model".into(), Value::String("gpt2".into())));
        meta.push(("tokenizer.ggml.pre".into(), Value::String("qwen2".into())));
        let merges = tok["model"]["merges"].as_array().expect("merges").iter().map(|m| match m {
            Json::Array(pair) => format!("{} {}", pair[0].as_str().unwrap(), pair[1].as_str().unwrap()),
            other => other.as_str().unwrap().to_string(),
        });
        meta.push(("tokenizer.ggml.merges".into(), strings(merges.collect())));
    }

    let weights = candle_core::safetensors::load(fixture(&format!("{rel}/model.safetensors")), &Device::Cpu)
        .expect("fixture weights");
    let mut tensors: Vec<(String, QTensor)> = weights
        .into_iter()
        .map(|(name, t)| {
            let t = t.to_dtype(candle_core::DType::F32).expect("f32");
            let quantize = t.rank() == 2 && t.dim(1).unwrap() % 32 == 0;
            let q = QTensor::quantize(&t, if quantize { GgmlDType::Q8_0 } else { GgmlDType::F32 }).expect("quantize");
            (infer_llm::checkpoint::gguf_name(&name), q)
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    write_gguf(&meta, &tensors)
}

/// A GGUF holding one small tensor of each block format the reader dequantizes.
fn dtypes_gguf() -> Vec<u8> {
    let t = Tensor::arange(0f32, 512.0, &Device::Cpu).unwrap().reshape((2, 256)).unwrap();
    let tensors: Vec<(String, QTensor)> =
        [GgmlDType::F32, GgmlDType::F16, GgmlDType::Q4_0, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K]
            .iter()
            .map(|d| (format!("t.{d:?}"), QTensor::quantize(&t, *d).expect("quantize")))
            .collect();
    let meta = vec![("general.architecture".to_string(), Value::String("llama".into()))];
    write_gguf(&meta, &tensors)
}

fn write_gguf(meta: &[(String, Value)], tensors: &[(String, QTensor)]) -> Vec<u8> {
    let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = Vec::new();
    gguf_file::write(&mut std::io::Cursor::new(&mut out), &meta, &tensors).expect("write GGUF");
    out
}
