//! GGUF checkpoints (llama.cpp's format): metadata, tensor index and raw tensor bytes, read with
//! candle's GGUF parser and memory-mapped. Quantized tensors are handed to backends as their GGML
//! blocks; a backend that cannot run a block format gets f32 (dequantized here, on the host).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;
use memmap2::Mmap;

use infer_sdk::weights::{BlockDequantizer, MappedTensor, NameMap};
use infer_sdk::{Backend, DType, Error, Result, SamplingDefaults, Weights};

pub struct GgufFile {
    path: PathBuf,
    /// Shared with the weights loaded from it, which outlive the metadata (see
    /// [`GgufFile::shared_map`]).
    mmap: Arc<Mmap>,
    content: Content,
}

/// One tensor's place in the file.
pub struct GgufTensor<'a> {
    pub dtype: DType,
    /// Row-major shape (GGUF stores it reversed; this is already flipped).
    pub shape: Vec<usize>,
    pub bytes: &'a [u8],
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let mmap = infer_sdk::weights::open_weights_file(path)?;
        if mmap.len() < 4 || &mmap[..4] != b"GGUF" {
            return Err(Error::checkpoint(path, "not a GGUF file (bad magic)"));
        }
        let header = scan_header(&mmap).map_err(|e| Error::checkpoint(path, format!("invalid GGUF header ({e})")))?;
        // candle's parser divides by this without checking it (candle-core 0.11.1).
        if header.alignment == Some(0) {
            return Err(Error::checkpoint(path, "invalid GGUF header (general.alignment is 0)"));
        }
        let mut cursor = std::io::Cursor::new(&mmap[..]);
        let content = Content::read(&mut cursor).map_err(|e| {
            // candle appends a backtrace when RUST_BACKTRACE is set: keep the message line.
            let full = e.to_string();
            let msg = full.lines().next().unwrap_or_default().trim();
            if msg.contains("unknown dtype") {
                Error::checkpoint(path, format!("unsupported tensor quantization type ({msg})"))
            } else {
                Error::checkpoint(path, format!("invalid GGUF header ({msg})"))
            }
        })?;
        let f = GgufFile { path: path.to_path_buf(), mmap: Arc::new(mmap), content };
        f.check_tensor_ranges()?;
        Ok(f)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole mapped file.
    pub fn data(&self) -> &[u8] {
        &self.mmap
    }

    /// The mapping alone, for weights that stay in the file's pages: they keep the mapping
    /// alive, not the parsed metadata (a 262k-entry vocabulary is ~27 MB of strings and values).
    pub(crate) fn shared_map(&self) -> Arc<Mmap> {
        self.mmap.clone()
    }

    /// Every tensor must lie inside the file: a truncated download fails here, not mid-run.
    fn check_tensor_ranges(&self) -> Result<()> {
        for (name, info) in &self.content.tensor_infos {
            let dtype = convert(info.ggml_dtype)
                .ok_or_else(|| self.err(format!("tensor `{name}` has unsupported type {:?}", info.ggml_dtype)))?;
            // Shape and offset are the file's word: their products and sums may not fit in 64 bits.
            let range = byte_range(self.content.tensor_data_offset, info.offset, dtype, info.shape.dims())
                .ok_or_else(|| self.err(format!("tensor `{name}` has an impossible size or offset")))?;
            // The spec's rule, and candle reads block structs (f32/f16 fields) in place.
            if info.offset % self.alignment() != 0 || range.start % 4 != 0 {
                return Err(self.err(format!(
                    "tensor `{name}` at offset {} is not aligned (general.alignment {})",
                    info.offset,
                    self.alignment()
                )));
            }
            if range.end > self.mmap.len() {
                return Err(self.err(format!(
                    "tensor `{name}` ends at byte {} but the file has {} bytes (truncated?)",
                    range.end,
                    self.mmap.len()
                )));
            }
        }
        Ok(())
    }

    /// `general.alignment` as candle's parser reads it (32 when absent).
    fn alignment(&self) -> u64 {
        match self.content.metadata.get("general.alignment") {
            Some(Value::U8(v)) => u64::from(*v),
            Some(Value::U16(v)) => u64::from(*v),
            Some(Value::U32(v)) => u64::from(*v),
            Some(Value::I8(v)) if *v > 0 => *v as u64,
            Some(Value::I16(v)) if *v > 0 => *v as u64,
            Some(Value::I32(v)) if *v > 0 => *v as u64,
            _ => 32,
        }
        .max(1)
    }

    fn err(&self, message: String) -> Error {
        Error::checkpoint(&self.path, message)
    }

    /// `general.architecture`, e.g. `gemma3`, `qwen2`, `llama`.
    pub fn architecture(&self) -> Result<String> {
        self.string("general.architecture")
    }

    pub fn has(&self, key: &str) -> bool {
        self.content.metadata.contains_key(key)
    }

    pub fn value(&self, key: &str) -> Result<&Value> {
        self.content.metadata.get(key).ok_or_else(|| self.err(format!("missing metadata `{key}`")))
    }

    pub fn string(&self, key: &str) -> Result<String> {
        self.value(key)?.to_string().cloned().map_err(|e| self.err(format!("metadata `{key}`: {e}")))
    }

    /// An integer of any width.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.value(key)?;
        let n = match v {
            Value::U8(x) => *x as i128,
            Value::I8(x) => *x as i128,
            Value::U16(x) => *x as i128,
            Value::I16(x) => *x as i128,
            Value::U32(x) => *x as i128,
            Value::I32(x) => *x as i128,
            Value::U64(x) => *x as i128,
            Value::I64(x) => *x as i128,
            other => return Err(self.err(format!("metadata `{key}`: expected an integer, found {other:?}"))),
        };
        usize::try_from(n).map_err(|_| self.err(format!("metadata `{key}`: {n} is out of range")))
    }

    pub fn f64(&self, key: &str) -> Result<f64> {
        match self.value(key)? {
            Value::F32(x) => Ok(*x as f64),
            Value::F64(x) => Ok(*x),
            _ => self.usize(key).map(|v| v as f64),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool> {
        self.value(key)?.to_bool().map_err(|e| self.err(format!("metadata `{key}`: {e}")))
    }

    pub fn array(&self, key: &str) -> Result<&Vec<Value>> {
        self.value(key)?.to_vec().map_err(|e| self.err(format!("metadata `{key}`: {e}")))
    }

    pub fn strings(&self, key: &str) -> Result<Vec<String>> {
        self.array(key)?
            .iter()
            .map(|v| v.to_string().cloned().map_err(|e| self.err(format!("metadata `{key}`: {e}"))))
            .collect()
    }

    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.content.tensor_infos.keys().map(String::as_str)
    }

    pub fn tensor(&self, name: &str) -> Option<GgufTensor<'_>> {
        let info = self.content.tensor_infos.get(name)?;
        let dtype = convert(info.ggml_dtype)?;
        // Checked by `open`: the range fits and lies inside the file.
        let range = byte_range(self.content.tensor_data_offset, info.offset, dtype, info.shape.dims())?;
        Some(GgufTensor { dtype, shape: info.shape.dims().to_vec(), bytes: self.mmap.get(range)? })
    }
}

/// The tensors of `file` as [`Weights`]. Quantized tensors stay in their block format where the
/// backend runs it; `name_map` turns the model's (HF) names into GGUF names.
pub fn weights(file: Arc<GgufFile>, backend: &Backend, dtype: DType, name_map: NameMap) -> Result<Weights> {
    let base = file.data().as_ptr() as usize;
    let tensors = file.tensor_names().map(|name| {
        let t = file.tensor(name).expect("listed tensor exists");
        let start = t.bytes.as_ptr() as usize - base;
        MappedTensor {
            name: name.to_string(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            range: start..start + t.bytes.len(),
        }
    });
    let tensors: Vec<MappedTensor> = tensors.collect();
    Weights::from_mapped(file.path(), file.shared_map(), tensors, backend, dtype, name_map)
}

/// llama.cpp's `general.sampling.*` keys; the built-in defaults fill what is absent.
pub fn sampling_defaults(g: &GgufFile) -> SamplingDefaults {
    let f = |k: &str| g.f64(&format!("general.sampling.{k}")).ok();
    let found = ["temp", "top_k", "top_p", "min_p", "penalty_repeat"].iter().any(|k| f(k).is_some());
    if !found {
        return SamplingDefaults::BUILT_IN;
    }
    let b = SamplingDefaults::BUILT_IN;
    SamplingDefaults {
        temperature: f("temp").map_or(b.temperature, |v| v as f32),
        top_k: f("top_k").map_or(b.top_k, |v| v.max(0.0) as usize),
        top_p: f("top_p").map_or(b.top_p, |v| v as f32),
        min_p: f("min_p").map_or(b.min_p, |v| v as f32),
        repeat_penalty: f("penalty_repeat").map_or(b.repeat_penalty, |v| v as f32),
        source: "gguf metadata",
    }
}

/// The bytes of a tensor of `dtype` and `shape` at `offset` into the data section; `None` when
/// that overflows.
fn byte_range(data_offset: u64, offset: u64, dtype: DType, shape: &[usize]) -> Option<std::ops::Range<usize>> {
    let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
    let (per_block, block_bytes) = dtype.block();
    let bytes = elements.div_ceil(per_block).checked_mul(block_bytes)?;
    let start = usize::try_from(data_offset.checked_add(offset)?).ok()?;
    Some(start..start.checked_add(bytes)?)
}

/// Longest metadata array: real vocabularies hold at most a few hundred thousand tokens and
/// merges. candle keeps each element as a 32-byte value, so a file of 2^30 one-byte elements
/// (which candle's own check allows) would take 32 GB.
const MAX_METADATA_ARRAY: u64 = 1 << 24;

/// What the header walk ahead of candle's parser learns.
struct HeaderScan {
    /// The integer value of `general.alignment` (the last one, as candle keeps); `None` when
    /// absent or not an integer.
    alignment: Option<u64>,
}

/// Walks the metadata entries ahead of candle's parser: refuses arrays longer than
/// [`MAX_METADATA_ARRAY`] (naming the key) and finds `general.alignment`. A malformed header is
/// left to candle, which says what is wrong.
fn scan_header(data: &[u8]) -> std::result::Result<HeaderScan, String> {
    let mut r = HeaderReader { data, pos: 4, too_long: None };
    let mut scan = HeaderScan { alignment: None };
    let Some(wide) = r.take::<4>().map(|v| u32::from_le_bytes(v) >= 2) else { return Ok(scan) }; // v1: 32-bit counts
    let Some(entries) = r.len(wide).and_then(|_tensors| r.len(wide)) else { return Ok(scan) };
    for _ in 0..entries {
        let Some(key_len) = r.len(wide) else { break };
        let Some(key) = r.bytes(key_len).map(|k| String::from_utf8_lossy(k).into_owned()) else { break };
        let Some(kind) = r.take::<4>().map(u32::from_le_bytes) else { break };
        if key == "general.alignment" {
            scan.alignment = match kind {
                0 | 1 => r.take::<1>().map(|b| u64::from(b[0])),
                2 | 3 => r.take::<2>().map(|b| u64::from(u16::from_le_bytes(b))),
                4 | 5 => r.take::<4>().map(|b| u64::from(u32::from_le_bytes(b))),
                _ => r.skip_value(kind, wide, 0).and(None),
            };
        } else if r.skip_value(kind, wide, 0).is_none() {
            if let Some(n) = r.too_long {
                return Err(format!("metadata `{key}` is an array of {n} elements; at most {MAX_METADATA_ARRAY}"));
            }
            break;
        }
    }
    Ok(scan)
}

struct HeaderReader<'a> {
    data: &'a [u8],
    pos: usize,
    /// The length of an array that stopped the walk for being longer than the limit.
    too_long: Option<u64>,
}

impl HeaderReader<'_> {
    fn bytes(&mut self, n: u64) -> Option<&[u8]> {
        let end = self.pos.checked_add(usize::try_from(n).ok()?)?;
        let b = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(b)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N as u64)?.try_into().ok()
    }

    fn len(&mut self, wide: bool) -> Option<u64> {
        if wide {
            self.take::<8>().map(u64::from_le_bytes)
        } else {
            self.take::<4>().map(|b| u64::from(u32::from_le_bytes(b)))
        }
    }

    /// Skips one value of GGUF type `kind` (arrays nest at most a few levels deep).
    fn skip_value(&mut self, kind: u32, wide: bool, depth: u32) -> Option<()> {
        let fixed = match kind {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => {
                let n = self.len(wide)?;
                return self.bytes(n).map(drop);
            }
            9 if depth < 4 => {
                let elem = self.take::<4>().map(u32::from_le_bytes)?;
                let n = self.len(wide)?;
                if n > MAX_METADATA_ARRAY {
                    self.too_long = Some(n);
                    return None;
                }
                for _ in 0..n {
                    self.skip_value(elem, wide, depth + 1)?;
                }
                return Some(());
            }
            _ => return None,
        };
        self.bytes(fixed).map(drop)
    }
}

fn convert(t: GgmlDType) -> Option<DType> {
    Some(match t {
        GgmlDType::F32 => DType::F32,
        GgmlDType::F16 => DType::F16,
        GgmlDType::BF16 => DType::BF16,
        GgmlDType::Q4_0 => DType::Q4_0,
        GgmlDType::Q4_1 => DType::Q4_1,
        GgmlDType::Q5_0 => DType::Q5_0,
        GgmlDType::Q5_1 => DType::Q5_1,
        GgmlDType::Q8_0 => DType::Q8_0,
        GgmlDType::Q2K => DType::Q2K,
        GgmlDType::Q3K => DType::Q3K,
        GgmlDType::Q4K => DType::Q4K,
        GgmlDType::Q5K => DType::Q5K,
        GgmlDType::Q6K => DType::Q6K,
        GgmlDType::Q8K => DType::Q8K,
        #[allow(unreachable_patterns)]
        _ => return None,
    })
}

/// The candle GGML type of a block-quantized dtype (for backends built on candle).
pub fn to_ggml(d: DType) -> Option<GgmlDType> {
    Some(match d {
        DType::Q4_0 => GgmlDType::Q4_0,
        DType::Q4_1 => GgmlDType::Q4_1,
        DType::Q5_0 => GgmlDType::Q5_0,
        DType::Q5_1 => GgmlDType::Q5_1,
        DType::Q8_0 => GgmlDType::Q8_0,
        DType::Q2K => GgmlDType::Q2K,
        DType::Q3K => GgmlDType::Q3K,
        DType::Q4K => GgmlDType::Q4K,
        DType::Q5K => GgmlDType::Q5K,
        DType::Q6K => GgmlDType::Q6K,
        DType::Q8K => GgmlDType::Q8K,
        _ => return None,
    })
}

inventory::submit! { BlockDequantizer(dequantize_to_f32_bytes) }

/// Dequantizes GGML blocks to f32 little-endian bytes on the host (for backends without the
/// block format).
pub fn dequantize_to_f32_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Vec<u8>> {
    use candle_core::quantized::{QStorage, QTensor};
    let ggml = to_ggml(dtype).ok_or_else(|| Error::unsupported(format!("{dtype} is not a block format")))?;
    let storage = QStorage::from_data(std::borrow::Cow::Borrowed(bytes), &candle_core::Device::Cpu, ggml)
        .map_err(|e| Error::backend(format!("dequantize {dtype}: {e}")))?;
    let q = QTensor::new(storage, shape).map_err(|e| Error::backend(format!("dequantize {dtype}: {e}")))?;
    let t = q
        .dequantize(&candle_core::Device::Cpu)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| Error::backend(format!("dequantize {dtype}: {e}")))?;
    Ok(t.iter().flat_map(|v| v.to_le_bytes()).collect())
}
