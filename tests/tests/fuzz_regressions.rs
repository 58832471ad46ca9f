//! Inputs the fuzz targets (fuzz/, tools/fuzz.sh) found crashing a reader, each made small and
//! rebuilt here: every one must now be a clean error (or a clean result), never a panic.
//! docs/reliability.md lists them.

use infer_core::GgufFile;

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

/// gguf_file: dimensions whose product does not fit in 64 bits.
#[test]
fn gguf_tensor_size_overflow_is_an_error() {
    let msg = open_err(&gguf(&[], &[("t", &[1 << 40, 1 << 40], GGML_F32, 0)], &[0; 16]));
    assert!(msg.contains("tensor `t`") && msg.contains("impossible size or offset"), "{msg}");
}
