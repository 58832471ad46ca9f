//! Preset voices: `voice_embedding/<name>.pt` (the real repository: `torch.save` of a bare bf16
//! tensor `[N, dim]`, read here through candle's pickle reader, no libtorch) or
//! `voice_embedding/<name>.safetensors` (tensor `embedding`, or the file's only tensor; the layout
//! mlx conversions ship). Each row is a backbone input standing in for one `[AUDIO]` position of
//! the prompt.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use candle_core::pickle::{Object, Stack};
use infer_core::{Backend, DType, Error, Result, Tensor};

pub const DIR_NAME: &str = "voice_embedding";

/// A voice's rows as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceRows {
    pub dtype: DType,
    pub rows: usize,
    pub dim: usize,
    /// Little-endian values, row-major.
    pub bytes: Vec<u8>,
}

impl VoiceRows {
    /// The rows as a `(rows, dim)` tensor in `dtype`.
    pub fn tensor(&self, backend: &Backend, dtype: DType) -> Result<Tensor> {
        Tensor::from_bytes(backend, &self.bytes, self.dtype, &[self.rows, self.dim])?.to_dtype(dtype)
    }
}

/// The voice files of a checkpoint, by name; `.safetensors` is preferred when both exist.
pub struct VoiceFiles {
    files: BTreeMap<String, PathBuf>,
}

impl VoiceFiles {
    /// Lists `dir/voice_embedding` (no voices when it does not exist).
    pub fn scan(dir: &Path) -> Result<Self> {
        let vdir = dir.join(DIR_NAME);
        let mut files = BTreeMap::new();
        if !vdir.is_dir() {
            return Ok(VoiceFiles { files });
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&vdir)
            .map_err(|e| Error::io(&vdir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        // `.pt` sorts before `.safetensors`: a later insert replaces an earlier one.
        entries.sort();
        for path in entries {
            let ext = path.extension().and_then(|e| e.to_str());
            if let (Some("pt" | "safetensors"), Some(stem)) = (ext, path.file_stem().and_then(|s| s.to_str())) {
                files.insert(stem.to_string(), path);
            }
        }
        Ok(VoiceFiles { files })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    pub fn path(&self, name: &str) -> Option<&Path> {
        self.files.get(name).map(PathBuf::as_path)
    }
}

/// Reads a voice file (`.pt` or `.safetensors`), checking it is `[N, dim]` with N > 0.
pub fn read_voice(path: &Path, dim: usize) -> Result<VoiceRows> {
    let rows = match path.extension().and_then(|e| e.to_str()) {
        Some("pt") => read_pt(path)?,
        Some("safetensors") => read_safetensors(path)?,
        _ => return Err(Error::checkpoint(path, "a voice must be a .pt or .safetensors file")),
    };
    if rows.dim != dim || rows.rows == 0 {
        return Err(Error::checkpoint(
            path,
            format!("voice embedding is [{}, {}], the backbone needs [N > 0, {dim}]", rows.rows, rows.dim),
        ));
    }
    Ok(rows)
}

fn read_safetensors(path: &Path) -> Result<VoiceRows> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |m: String| Error::checkpoint(path, m);
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
    let names = st.names();
    let name = if names.contains(&"embedding") {
        "embedding".to_string()
    } else if names.len() == 1 {
        names[0].to_string()
    } else {
        return Err(bad(format!("expected a tensor `embedding` (or a single tensor), found {names:?}")));
    };
    let view = st.tensor(&name).map_err(|e| bad(e.to_string()))?;
    let dtype = match view.dtype() {
        safetensors::Dtype::BF16 => DType::BF16,
        safetensors::Dtype::F16 => DType::F16,
        safetensors::Dtype::F32 => DType::F32,
        d => return Err(bad(format!("`{name}` has dtype {d:?}; a voice is bf16, f16 or f32"))),
    };
    two_dims(path, dtype, view.shape(), view.data().to_vec())
}

/// A `torch.save` file: a zip holding `<archive>/data.pkl` (the pickled tensor: a storage
/// reference, offset, shape and strides) and `<archive>/data/<key>` (the raw storage bytes).
fn read_pt(path: &Path) -> Result<VoiceRows> {
    let bad = |m: String| Error::checkpoint(path, m);
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut zip =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| bad(format!("not a torch.save file (zip: {e})")))?;
    let pkl = (0..zip.len())
        .filter_map(|i| zip.by_index(i).ok().and_then(|f| f.name().ok().map(|n| n.to_string())))
        .find(|n| n.ends_with("data.pkl"))
        .ok_or_else(|| bad("not a torch.save file (no data.pkl inside)".into()))?;
    let entry = zip.by_name(&pkl).map_err(|e| bad(e.to_string()))?;
    // candle's pickle reader can panic on hostile opcodes (the fuzzer found LONG1 with more than 8
    // bytes overflowing a shift in checked builds): its panic is an unreadable file.
    let obj = infer_core::catch_panic("the pickle reader panicked", || {
        let mut stack = Stack::empty();
        stack.read_loop(&mut BufReader::new(entry)).map_err(|e| bad(format!("unreadable pickle: {e}")))?;
        stack.finalize().map_err(|e| bad(format!("unreadable pickle: {e}")))
    })
    .map_err(|e| e.into_reader_panic(|| format!("{}: unreadable pickle", path.display())))?;
    // A bare tensor, or (as some conversions save it) a dict holding one.
    let obj = match obj {
        Object::Dict(entries) => {
            entries.into_iter().map(|(_, v)| v).next().ok_or_else(|| bad("the pickled dict is empty".into()))?
        }
        other => other,
    };
    if !tensor_record_is_complete(&obj) {
        return Err(bad("unreadable tensor record: not a torch tensor as torch.save writes it".into()));
    }
    let archive = Path::new(pkl.strip_suffix(".pkl").unwrap_or(&pkl));
    let info = obj
        .into_tensor_info(Object::Unicode("embedding".into()), archive)
        .map_err(|e| bad(format!("unreadable tensor record: {e}")))?
        .ok_or_else(|| bad("the pickle holds no tensor".into()))?;
    let dtype = match info.dtype {
        candle_core::DType::BF16 => DType::BF16,
        candle_core::DType::F16 => DType::F16,
        candle_core::DType::F32 => DType::F32,
        d => return Err(bad(format!("voice tensor has dtype {d:?}; a voice is bf16, f16 or f32"))),
    };
    if !info.layout.is_contiguous() {
        return Err(bad(format!("voice tensor is not contiguous ({:?})", info.layout)));
    }
    let shape = info.layout.dims().to_vec();
    let too_large = || bad(format!("voice tensor of shape {shape:?} is too large"));
    let len = shape.iter().try_fold(dtype.storage_bytes(1), |n, &d| n.checked_mul(d)).ok_or_else(too_large)?;
    let start = info.layout.start_offset();
    let end = start.checked_add(len).ok_or_else(too_large)?;
    let mut data = Vec::new();
    zip.by_name(&info.path)
        .map_err(|e| bad(format!("tensor data `{}`: {e}", info.path)))?
        .read_to_end(&mut data)
        .map_err(|e| Error::io(path, e))?;
    if end > data.len() {
        return Err(bad(format!("tensor data `{}` has {} bytes, the tensor needs {end}", info.path, data.len())));
    }
    two_dims(path, dtype, &shape, data[start..end].to_vec())
}

/// Whether a pickled tensor record has every part candle's `into_tensor_info` takes out of it
/// (it indexes the argument tuples without checking their lengths, candle-core 0.11.1):
/// `_rebuild_tensor_v2(storage, offset, size, stride, ...)`, possibly wrapped in
/// `_rebuild_parameter(tensor, ...)` or `_rebuild_from_type_v2(func, type, args, ...)`, with
/// `storage` a persistent id `(tag, class, key, location, size)` and a sane offset.
fn tensor_record_is_complete(obj: &Object) -> bool {
    let Object::Reduce { callable, args } = obj else { return true }; // not a tensor: candle says so
    let tuple = |o: &Object, n: usize| matches!(o, Object::Tuple(v) if v.len() >= n);
    let (callable, args) = match (&**callable, &**args) {
        (Object::Class { module_name, class_name }, Object::Tuple(a))
            if module_name == "torch._tensor" && class_name == "_rebuild_from_type_v2" =>
        {
            match a.as_slice() {
                [inner, _, rebuild_args, ..] => (inner, rebuild_args),
                _ => return false,
            }
        }
        (Object::Class { module_name, class_name }, a)
            if module_name == "torch._utils" && class_name == "_rebuild_parameter" =>
        {
            match a {
                Object::Tuple(v) if !v.is_empty() => return tensor_record_is_complete(&v[0]),
                _ => return false,
            }
        }
        (c, a) => (c, a),
    };
    if !matches!(callable, Object::Class { module_name, class_name }
        if module_name == "torch._utils" && class_name == "_rebuild_tensor_v2")
    {
        return true; // not a tensor: candle says so
    }
    let Object::Tuple(a) = args else { return false };
    let [storage, offset, _size, _stride, ..] = a.as_slice() else { return false };
    let offset_ok = match offset {
        Object::Int(o) => *o >= 0,
        Object::Long(o) => (0..1 << 40).contains(o),
        _ => true, // candle rejects it
    };
    offset_ok && matches!(storage, Object::PersistentLoad(p) if tuple(p, 5))
}

fn two_dims(path: &Path, dtype: DType, shape: &[usize], bytes: Vec<u8>) -> Result<VoiceRows> {
    match *shape {
        [rows, dim] => Ok(VoiceRows { dtype, rows, dim, bytes }),
        _ => Err(Error::checkpoint(path, format!("voice embedding has shape {shape:?}, expected [N, dim]"))),
    }
}
