//! Checkpoint weights: memory-mapped (or, with `INFER_NO_MMAP=1`, read) safetensors (one file or shards with
//! `model.safetensors.index.json`) or a GGUF file, handed to a backend tensor by tensor, by name.

pub mod quantized;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RArc, RSlice};
use memmap2::{Mmap, MmapMut};

use crate::backend::{SharedBytes, SharedBytesImpl, SharedBytesImpl_TO};
use crate::{Backend, DType, Error, Result, Tensor};

/// Whether weights files are read into memory instead of mapped: `INFER_NO_MMAP=1` (`infer
/// --no-mmap` sets it). A mapped file that is overwritten in place (`cp new old`) changes under a
/// running model, and one truncated makes its reads fault (SIGBUS); a copy in memory does not.
/// Read from the environment, once, so that plugin libraries, which carry their own copy of
/// infer-core, decide alike.
pub fn weights_in_memory() -> bool {
    static IN_MEMORY: OnceLock<bool> = OnceLock::new();
    *IN_MEMORY.get_or_init(|| std::env::var_os("INFER_NO_MMAP").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// The bytes of a weights file: mapped read-only, or with [`weights_in_memory`] read whole into
/// anonymous memory (the same type, so every reader works on either).
pub fn open_weights_file(path: &Path) -> Result<Mmap> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    if weights_in_memory() {
        use std::io::Read;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let len = usize::try_from(len).map_err(|_| Error::checkpoint(path, "too large to read into memory"))?;
        let mut bytes = MmapMut::map_anon(len).map_err(|e| Error::io(path, e))?;
        file.read_exact(&mut bytes).map_err(|e| Error::io(path, e))?;
        return bytes.make_read_only().map_err(|e| Error::io(path, e));
    }
    // SAFETY: the mapping is read-only; a checkpoint modified while loaded is undefined
    // behaviour, as for every mmap-based loader (`weights_in_memory` avoids it).
    unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))
}

struct Entry {
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Byte range inside the file.
    start: usize,
    end: usize,
}

enum Backing {
    /// A safetensors file.
    Mmap(Arc<Mmap>),
    /// A file another reader indexed (GGUF, through infer-gguf): its mapping, metadata dropped.
    Mapped(Arc<Mmap>),
}

/// A mapped safetensors file as [`SharedBytes`]: tensors handed over this way may stay in the
/// file's pages (a lookup table: [`Weights::get_table`]).
#[derive(Clone)]
struct MmapBytes(Arc<Mmap>);

impl SharedBytesImpl for MmapBytes {
    fn bytes(&self) -> RSlice<'_, u8> {
        self.0[..].into()
    }
}

impl Backing {
    fn data(&self) -> &[u8] {
        self.map()
    }

    fn map(&self) -> &Arc<Mmap> {
        match self {
            Backing::Mmap(m) | Backing::Mapped(m) => m,
        }
    }

    /// The whole file as bytes a backend may keep (ranges are relative to [`Backing::data`]).
    fn shared(&self) -> SharedBytes {
        SharedBytesImpl_TO::from_ptr(RArc::new(MmapBytes(self.map().clone())), TD_Opaque)
    }

    /// Entry `e` through `from_shared`. A backend that kept the file's bytes (it holds another
    /// handle on the mapping now) gets their pages mapped in one call when `prefault` (weights
    /// every product reads whole); one that copied them gets them dropped, so the tensor is not
    /// resident twice (as after `from_bytes`).
    fn hand_over(&self, backend: &Backend, e: &Entry, prefault: bool) -> Result<Tensor> {
        let holders = self.holders();
        let t = Tensor::from_shared(backend, self.shared(), e.start, e.end, e.dtype, &e.shape)?;
        if self.holders() <= holders {
            self.release(e.start, e.end);
        } else if prefault {
            self.prefault(e.start, e.end);
        }
        Ok(t)
    }

    /// Handles on the mapping alive now (this store's, and those backends kept).
    fn holders(&self) -> usize {
        Arc::strong_count(self.map())
    }

    /// Maps the pages of `start..end` in one call (best effort: older kernels lack
    /// `MADV_POPULATE_READ`): page by page, the first product over weights left in place took
    /// several times longer where page faults are expensive.
    fn prefault(&self, start: usize, end: usize) {
        let map = self.map();
        #[cfg(target_os = "linux")]
        let _ = map.advise_range(memmap2::Advice::PopulateRead, start, end - start);
        let _ = (map, start, end);
    }

    /// Drops the mapped pages of a range the backend has copied, so a loaded model is not
    /// resident twice (file pages + backend copy).
    fn release(&self, start: usize, end: usize) {
        release_pages(self.map(), start, end);
    }
}

/// `madvise(DONTNEED)` on the whole pages inside `start..end`. The mapping is a read-only private
/// file mapping, so a later read of those pages faults them back in from the file: always safe.
fn release_pages(map: &Mmap, start: usize, end: usize) {
    // Pages read into anonymous memory have no file behind them: dropped, they would read back
    // as zeros.
    if weights_in_memory() {
        return;
    }
    const PAGE: usize = 4096;
    let (s, e) = (start.div_ceil(PAGE) * PAGE, end / PAGE * PAGE);
    if e > s {
        // SAFETY: see above; DontNeed on a read-only file mapping cannot lose data.
        let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, s, e - s) };
    }
}

struct Store {
    files: Vec<(PathBuf, Backing)>,
    entries: HashMap<String, Entry>,
    /// Whether a load asked for another block format than the stored one (said once).
    warned_stored_quant: AtomicBool,
}

/// Maps the names a model asks for (Hugging Face style) to the names in the file.
pub type NameMap = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// One tensor of a file mapped by another reader ([`Weights::from_mapped`]).
pub struct MappedTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Its bytes inside the mapping.
    pub range: std::ops::Range<usize>,
}

/// Turns GGML blocks of `dtype` (logical `shape`) into little-endian f32 bytes, for a backend
/// with no kernel for that block format. The GGUF runtime (infer-gguf) registers the one in use,
/// so that this crate carries no block-format code of its own.
pub struct BlockDequantizer(pub DequantizeBlocks);

/// `(block format, logical shape, blocks) -> f32 bytes`.
pub type DequantizeBlocks = fn(DType, &[usize], &[u8]) -> Result<Vec<u8>>;

inventory::collect!(BlockDequantizer);

fn dequantize_blocks(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Vec<u8>> {
    let Some(d) = inventory::iter::<BlockDequantizer>.into_iter().next() else {
        return Err(Error::unsupported(format!(
            "the backend has no {dtype} kernel and no block dequantizer is linked in (infer-gguf provides one)"
        )));
    };
    (d.0)(dtype, shape, bytes)
}

/// Named weights of one checkpoint bound to a backend and a compute dtype. Cloning is cheap;
/// [`Weights::prefixed`] narrows to a name prefix, as blocks fetch their own weights.
#[derive(Clone)]
pub struct Weights {
    store: Arc<Store>,
    backend: Backend,
    dtype: DType,
    /// Block format float linear weights are quantized to at load ([`Weights::get_linear`]).
    linear_quant: Option<DType>,
    prefix: String,
    name_map: Option<NameMap>,
}

impl Weights {
    /// Opens every safetensors file of the checkpoint directory `dir`.
    pub fn from_dir(dir: &Path, backend: &Backend, dtype: DType) -> Result<Self> {
        Self::from_files(safetensors_files(dir)?, backend, dtype)
    }

    /// Opens one safetensors file (a checkpoint whose weights have a fixed name, such as Mistral's
    /// `consolidated.safetensors`).
    pub fn from_file(path: &Path, backend: &Backend, dtype: DType) -> Result<Self> {
        if !path.is_file() {
            return Err(Error::checkpoint(path, "weights file not found"));
        }
        Self::from_files(vec![path.to_path_buf()], backend, dtype)
    }

    fn from_files(files: Vec<PathBuf>, backend: &Backend, dtype: DType) -> Result<Self> {
        let mut store =
            Store { files: Vec::new(), entries: HashMap::new(), warned_stored_quant: AtomicBool::new(false) };
        for path in files {
            let mmap = open_weights_file(&path)?;
            let idx = store.files.len();
            index_file(&path, &mmap, idx, &mut store.entries)?;
            store.files.push((path, Backing::Mmap(Arc::new(mmap))));
        }
        Ok(Weights {
            store: Arc::new(store),
            backend: backend.clone(),
            dtype,
            linear_quant: None,
            prefix: String::new(),
            name_map: None,
        })
    }

    /// The tensors of a file that a format reader outside this crate mapped and indexed (GGUF:
    /// `infer_gguf::weights`). Quantized tensors stay in their block format where the backend
    /// runs it; `name_map` turns the model's (HF) names into the file's names.
    pub fn from_mapped(
        path: &Path,
        map: Arc<Mmap>,
        tensors: impl IntoIterator<Item = MappedTensor>,
        backend: &Backend,
        dtype: DType,
        name_map: NameMap,
    ) -> Result<Self> {
        let mut entries = HashMap::new();
        for t in tensors {
            if t.range.end > map.len() || t.range.start > t.range.end {
                return Err(Error::checkpoint(path, format!("tensor `{}` lies outside the file", t.name)));
            }
            entries.insert(
                t.name,
                Entry { file: 0, dtype: t.dtype, shape: t.shape, start: t.range.start, end: t.range.end },
            );
        }
        let store = Store {
            files: vec![(path.to_path_buf(), Backing::Mapped(map))],
            entries,
            warned_stored_quant: AtomicBool::new(false),
        };
        Ok(Weights {
            store: Arc::new(store),
            backend: backend.clone(),
            dtype,
            linear_quant: None,
            prefix: String::new(),
            name_map: Some(name_map),
        })
    }

    /// The same weights, with the names blocks ask for mapped to the names in the file (the one
    /// place a model translates its checkpoint's naming, like mlx's `sanitize`).
    pub fn with_name_map(self, name_map: NameMap) -> Self {
        Weights { name_map: Some(name_map), ..self }
    }

    /// The same weights under `prefix.` (e.g. `model.layers.3`).
    pub fn prefixed(&self, prefix: impl std::fmt::Display) -> Self {
        let prefix = if self.prefix.is_empty() { prefix.to_string() } else { format!("{}.{prefix}", self.prefix) };
        Weights { prefix, ..self.clone() }
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The float dtype weights are converted to.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The same weights with float tensors converted to `dtype` instead.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        Weights { dtype, ..self.clone() }
    }

    /// The same weights with float linear weights quantized to the block format `quant` at load
    /// (`None`: kept in the compute dtype). An error when the backend has no kernels for it.
    pub fn with_linear_quant(&self, quant: Option<DType>) -> Result<Self> {
        if let Some(q) = quant {
            if !q.is_quantized() {
                return Err(Error::invalid(format!("{q} is not a quantized format")));
            }
            if !self.backend.supports_dtype(q) {
                return Err(Error::unsupported(format!(
                    "the {} backend cannot run {q} weights (quantizing at load needs a backend with GGML kernels, such as candle)",
                    self.backend.name()
                )));
            }
        }
        Ok(Weights { linear_quant: quant, ..self.clone() })
    }

    /// The block format linear weights are quantized to, if any.
    pub fn linear_quant(&self) -> Option<DType> {
        self.linear_quant
    }

    /// The weight (out, in) of a linear layer: like [`Weights::get_shaped`], quantized to
    /// [`Weights::linear_quant`] when one is set, the stored tensor is float and `in` is a whole
    /// number of blocks (other matrices stay in the compute dtype, as llama.cpp keeps them).
    pub fn get_linear(&self, name: &str, out_dim: usize, in_dim: usize) -> Result<Tensor> {
        let shape = [out_dim, in_dim];
        let Some(q) = self.linear_quant.filter(|q| in_dim.is_multiple_of(q.block().0)) else {
            return self.get_in_place(name, &shape);
        };
        // Quantized straight from the stored floats where widening them to the compute dtype
        // is exact (bf16 or f16 stored, f32 compute; or stored as computed): the same blocks,
        // without a compute-dtype copy of the whole matrix first.
        let stored = self.store.entries.get(&self.full_name(name));
        if let Some(e) = stored.filter(|e| e.dtype.is_quantized() && e.dtype != q) {
            if !self.store.warned_stored_quant.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "{}: weights stored as {} are used as they are (not requantized to {q})",
                    self.store.files[e.file].0.display(),
                    e.dtype
                );
            }
        }
        let t = match stored {
            Some(e)
                if e.dtype.is_float() && (e.dtype == self.dtype || self.dtype == DType::F32) && e.shape == shape =>
            {
                self.get_as(name, q)?
            }
            _ => self.get_shaped(name, &shape)?,
        };
        let t = if t.dtype().is_float() { t.to_dtype(q)? } else { t };
        if let Some(e) = stored.filter(|e| e.dtype.is_float() && t.dtype().is_quantized()) {
            crate::weights::quantized::note(&self.store.files[e.file].0, &self.full_name(name), &t);
        }
        Ok(t)
    }

    /// Drops this process's mapped pages of `name` (best effort): for a weight the caller has
    /// copied (such as parts stacked into one matrix), so it is not resident twice. A later read
    /// faults them back in from the file.
    pub fn release(&self, name: &str) {
        if let Some(e) = self.store.entries.get(&self.full_name(name)) {
            self.store.files[e.file].1.release(e.start, e.end);
        }
    }

    /// The dtype `name` is stored in, if the checkpoint has it.
    pub fn stored_dtype(&self, name: &str) -> Option<DType> {
        self.store.entries.get(&self.full_name(name)).map(|e| e.dtype)
    }

    fn full_name(&self, name: &str) -> String {
        let full = if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) };
        match &self.name_map {
            Some(map) => map(&full),
            None => full,
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.store.entries.contains_key(&self.full_name(name))
    }

    /// All tensor names in the checkpoint.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.store.entries.keys().map(String::as_str)
    }

    /// The tensor `name`, float types converted to the compute dtype.
    pub fn get(&self, name: &str) -> Result<Tensor> {
        self.get_as(name, self.dtype)
    }

    /// The tensor `name`, float types converted to `to` (a float dtype, or a block format the
    /// backend quantizes to on the way).
    fn get_as(&self, name: &str, to: DType) -> Result<Tensor> {
        let full = self.full_name(name);
        let e = self.store.entries.get(&full).ok_or_else(|| {
            let dir = self.store.files.first().and_then(|f| f.0.parent()).unwrap_or(Path::new("."));
            Error::checkpoint(dir, format!("missing tensor `{full}`"))
        })?;
        let (path, backing) = &self.store.files[e.file];
        let bytes = &backing.data()[e.start..e.end];
        let located = |err: Error| Error::checkpoint(path, format!("tensor `{full}`: {err}"));
        if e.dtype.is_quantized() && !self.backend.supports_dtype(e.dtype) {
            // The backend has no kernel for this block format: compute in floats instead.
            let f32_bytes = dequantize_blocks(e.dtype, &e.shape, bytes).map_err(located)?;
            let t = Tensor::from_bytes(&self.backend, &f32_bytes, DType::F32, &e.shape).map_err(located)?;
            return t.to_dtype(to);
        }
        if let (true, Backing::Mmap(_)) = (e.dtype.is_quantized(), backing) {
            // Blocks written by `infer quantize`: kept in the file's pages where the backend
            // multiplies them in place (mapped now, not page by page in the first product).
            return backing.hand_over(&self.backend, e, true).map_err(located);
        }
        if let (true, Backing::Mapped(_)) = (e.dtype.is_quantized(), backing) {
            let t = Tensor::from_shared(&self.backend, backing.shared(), e.start, e.end, e.dtype, &e.shape)
                .map_err(located)?;
            // A backend that copied leaves no reason to keep the pages; one that kept them in
            // place faults them back in from the page cache on first use.
            backing.release(e.start, e.end);
            return Ok(t);
        }
        let t = if e.dtype.is_float() && e.dtype != to {
            Tensor::from_bytes_as(&self.backend, bytes, e.dtype, to, &e.shape)
        } else {
            Tensor::from_bytes(&self.backend, bytes, e.dtype, &e.shape)
        };
        let t = t.map_err(located)?;
        backing.release(e.start, e.end);
        Ok(t)
    }

    /// A linear weight stored in half precision and computed in that dtype or in f32: handed
    /// over as shared bytes, which a backend whose product kernels read such weights in place
    /// keeps (candle): loading copies nothing and the weights are resident once, as the file's
    /// pages (mapped in one call here rather than page by page on the first product). For f32
    /// compute the handed-over tensor is then converted to f32, which such a backend does
    /// without a copy (its kernels widen the rows as they read them; widening is exact); a
    /// backend that copies converts its copy. Other weights as [`Weights::get_shaped`].
    fn get_in_place(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = self.full_name(name);
        let Some(e) = self.store.entries.get(&full) else { return self.get_shaped(name, shape) };
        let half = matches!(e.dtype, DType::BF16 | DType::F16);
        if !half || !(e.dtype == self.dtype || self.dtype == DType::F32) || e.shape != shape {
            return self.get_shaped(name, shape);
        }
        let (path, backing) = &self.store.files[e.file];
        let located = |err: Error| Error::checkpoint(path, format!("tensor `{full}`: {err}"));
        let t = backing.hand_over(&self.backend, e, true).map_err(located)?;
        if t.dtype() == self.dtype {
            Ok(t)
        } else {
            t.to_dtype(self.dtype).map_err(located)
        }
    }

    /// A lookup table (rows, dim) read only through [`Tensor::embedding`], in its stored float
    /// dtype (callers convert the rows they look up). A backend may leave it in the checkpoint's
    /// mapped pages (the candle backend does): a large vocabulary then costs neither load time
    /// nor memory beyond the rows used. Not for a table that is also a linear weight (tied
    /// embeddings): a product over it would make a copy. Other stored types load as
    /// [`Weights::get_shaped`] loads them.
    pub fn get_table(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let Some(e) = self.store.entries.get(&self.full_name(name)).filter(|e| e.dtype.is_float()) else {
            return self.get_shaped(name, shape);
        };
        let (path, backing) = &self.store.files[e.file];
        let t = backing.hand_over(&self.backend, e, false);
        let t = t.map_err(|err| Error::checkpoint(path, format!("tensor `{}`: {err}", self.full_name(name))))?;
        self.checked_shape(name, t, shape)
    }

    /// Like [`Weights::get`], checking the shape.
    pub fn get_shaped(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.checked_shape(name, self.get(name)?, shape)
    }

    /// `t` (the tensor `name`) when it has `shape`, else an error naming the file.
    fn checked_shape(&self, name: &str, t: Tensor, shape: &[usize]) -> Result<Tensor> {
        if t.dims() != shape {
            let path = &self.store.files[self.store.entries[&self.full_name(name)].file].0;
            return Err(Error::checkpoint(
                path,
                format!("tensor `{}` has shape {:?}, the config implies {shape:?}", self.full_name(name), t.dims()),
            ));
        }
        Ok(t)
    }
}

/// The safetensors files of `dir`: the shards named by the index, or `model.safetensors`, or
/// every `*.safetensors` file.
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::checkpoint(&index, format!("invalid JSON: {e}")))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::checkpoint(&index, "missing object `weight_map`"))?;
        let mut files: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
        files.sort();
        files.dedup();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::checkpoint(dir, "no *.safetensors weights found"));
    }
    Ok(files)
}

fn index_file(path: &Path, bytes: &[u8], file: usize, out: &mut HashMap<String, Entry>) -> Result<()> {
    let bad = |m: String| Error::checkpoint(path, m);
    let (header_len, meta) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| match e {
        safetensors::SafeTensorError::MetadataIncompleteBuffer => {
            bad(format!("truncated: its header describes more tensor data than the file's {} bytes", bytes.len()))
        }
        e => bad(format!("not a valid safetensors file ({e})")),
    })?;
    let data_start = 8 + header_len;
    let data_len = bytes.len() - data_start;
    // GGML blocks stored as U8 rows by `infer quantize`, with their format and logical shape.
    let mut quantized = crate::weights::quantized::listed(path, meta.metadata().as_ref())?;
    for (name, info) in meta.tensors() {
        let stored = convert_dtype(info.dtype)
            .ok_or_else(|| bad(format!("tensor `{name}` has unsupported dtype {:?}", info.dtype)))?;
        let (dtype, shape) = match quantized.remove(&name) {
            Some(q) if stored == DType::U8 => q,
            Some(_) => return Err(bad(format!("tensor `{name}` is listed as quantized but stored as {stored}"))),
            None => (stored, info.shape.clone()),
        };
        let (s, e) = info.data_offsets;
        if e > data_len || s > e {
            return Err(bad(format!(
                "tensor `{name}` ends at byte {e} but the data section has {data_len} bytes (truncated file?)"
            )));
        }
        // Shapes come from the file: sizes are computed without overflow.
        if dtype.checked_storage_bytes(&shape) != Some(e - s)
            || (dtype.is_quantized() && !quantizable_shape(dtype, &shape))
        {
            return Err(bad(format!("tensor `{name}`: {} bytes for shape {shape:?} {dtype}", e - s)));
        }
        out.insert(name, Entry { file, dtype, shape, start: data_start + s, end: data_start + e });
    }
    if let Some(name) = quantized.keys().next() {
        return Err(bad(format!("tensor `{name}` is listed as quantized but not stored")));
    }
    Ok(())
}

/// Rows of whole blocks (blocks never span rows).
fn quantizable_shape(dtype: DType, shape: &[usize]) -> bool {
    shape.last().is_some_and(|&k| k > 0 && k.is_multiple_of(dtype.block().0))
}

fn convert_dtype(d: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype as S;
    Some(match d {
        S::F32 => DType::F32,
        S::F16 => DType::F16,
        S::BF16 => DType::BF16,
        S::U8 => DType::U8,
        S::U32 => DType::U32,
        S::I64 => DType::I64,
        _ => return None,
    })
}
