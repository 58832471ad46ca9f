//! Pre-quantized checkpoints. `infer quantize` loads a model with `--quant`, records the linear
//! weights it quantized ([`record_quantized`]) and writes a copy of the checkpoint with those
//! weights as GGML blocks ([`write_quantized`]); loading the copy maps the blocks in place
//! instead of quantizing again.
//!
//! The copy is ordinary safetensors: a quantized weight is a 1-D `U8` tensor of its blocks, and
//! the header's `__metadata__` key [`METADATA_KEY`] holds a JSON object from each such tensor's
//! name to `{"dtype": "q4_k", "shape": [out, in]}` ([`Weights`](crate::Weights) reads it). Other
//! tensors and files are copied as they are.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Dtype, View};

use crate::registry::{ModelEntry, Origin};
use crate::{Error, Result, Tensor};

use infer_sdk::weights::quantized::{listed, ListedTensor};
pub use infer_sdk::weights::quantized::{record_quantized, QuantizedWeight, METADATA_KEY};

/// What [`write_quantized`] wrote.
#[derive(Debug)]
pub struct WrittenCheckpoint {
    /// Quantized tensors written.
    pub quantized: usize,
    /// Their bytes as stored in the source, and as blocks.
    pub source_bytes: u64,
    pub block_bytes: u64,
    /// Files copied as they were, and safetensors files rewritten.
    pub copied_files: usize,
    pub rewritten_files: usize,
}

/// Copies the checkpoint directory `src` to `out` (a new or empty directory outside `src`), each
/// safetensors file that holds one of `weights` rewritten with those tensors as blocks. The copy
/// is made in a temporary folder beside `out` and takes its name when complete: a failed run
/// leaves nothing behind.
pub fn write_quantized(src: &Path, out: &Path, weights: &[QuantizedWeight]) -> Result<WrittenCheckpoint> {
    if weights.is_empty() {
        return Err(Error::invalid(format!(
            "{}: the model quantized none of its weights (does it quantize at load? are they quantized already?)",
            src.display()
        )));
    }
    let src = src.canonicalize().map_err(|e| Error::io(src, e))?;
    if !src.is_dir() {
        return Err(Error::invalid(format!("{}: not a checkpoint directory", src.display())));
    }
    check_source(&src)?;
    check_destination(&src, out)?;
    let mut by_file: HashMap<PathBuf, HashMap<&str, &Tensor>> = HashMap::new();
    for w in weights {
        let file = in_real_folder(&w.file)?;
        if !file.starts_with(&src) {
            return Err(Error::invalid(format!("{} is outside the checkpoint {}", file.display(), src.display())));
        }
        let known = by_file.entry(file).or_default();
        if let Some(other) = known.insert(&w.name, &w.tensor) {
            if other.dtype() != w.tensor.dtype() {
                return Err(Error::invalid(format!(
                    "`{}` was quantized twice, to {} and to {}",
                    w.name,
                    other.dtype(),
                    w.tensor.dtype()
                )));
            }
        }
    }
    let staging = staging_dir(out)?;
    let written = copy_into(&src, &staging, &by_file);
    let finished = written.and_then(|done| {
        let recorded: usize = by_file.values().map(HashMap::len).sum();
        if done.quantized != recorded {
            return Err(Error::invalid(format!(
                "{recorded} weights were quantized but {} found in the checkpoint's files",
                done.quantized
            )));
        }
        if out.exists() {
            std::fs::remove_dir(out).map_err(|e| Error::io(out, e))?;
        }
        std::fs::rename(&staging, out).map_err(|e| Error::io(out, e))?;
        Ok(done)
    });
    if finished.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    finished
}

/// A new folder beside `out` to write the copy in.
fn staging_dir(out: &Path) -> Result<PathBuf> {
    let name = out.file_name().ok_or_else(|| Error::invalid(format!("{}: not a folder name", out.display())))?;
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let staging = parent.join(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
    }
    std::fs::create_dir(&staging).map_err(|e| Error::io(&staging, e))?;
    Ok(staging)
}

/// Every file of `src` into `dest`, the safetensors files holding recorded weights rewritten.
fn copy_into(src: &Path, dest: &Path, by_file: &HashMap<PathBuf, HashMap<&str, &Tensor>>) -> Result<WrittenCheckpoint> {
    let mut done =
        WrittenCheckpoint { quantized: 0, source_bytes: 0, block_bytes: 0, copied_files: 0, rewritten_files: 0 };
    for file in files_under(src)? {
        let rel = file.strip_prefix(src).expect("listed under src");
        let to = dest.join(rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        match by_file.get(&in_real_folder(&file)?) {
            Some(tensors) => {
                rewrite(&file, &to, tensors, &mut done)?;
                done.rewritten_files += 1;
            }
            None => {
                std::fs::copy(&file, &to).map_err(|e| Error::io(&file, e))?;
                done.copied_files += 1;
            }
        }
    }
    for index in files_under(dest)?.into_iter().filter(|f| f.to_string_lossy().ends_with(".safetensors.index.json")) {
        update_total_size(&index)?;
    }
    Ok(done)
}

/// A sharded checkpoint's index (`weight_map` from tensor to file) with `metadata.total_size`,
/// the tensors' bytes, recomputed for the copy's shards (its names and files are unchanged).
fn update_total_size(index: &Path) -> Result<()> {
    let text = std::fs::read_to_string(index).map_err(|e| Error::io(index, e))?;
    let mut v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::checkpoint(index, format!("invalid JSON: {e}")))?;
    let mut shards: Vec<String> = match v.get("weight_map").and_then(|m| m.as_object()) {
        Some(map) => map.values().filter_map(|f| f.as_str().map(String::from)).collect(),
        None => return Ok(()),
    };
    shards.sort();
    shards.dedup();
    let folder = index.parent().unwrap_or(Path::new("."));
    let mut total = 0u64;
    for shard in &shards {
        let path = folder.join(shard);
        let map = map_file(&path)?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&map)
            .map_err(|e| Error::checkpoint(&path, format!("not a valid safetensors file ({e})")))?;
        total += meta.data_len() as u64;
    }
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.insert("total_size".into(), total.into());
    }
    let text = serde_json::to_string_pretty(&v).map_err(|e| Error::invalid(format!("{}: {e}", index.display())))?;
    std::fs::write(index, text).map_err(|e| Error::io(index, e))
}

/// Refuses a model plugin loaded from a library: its weights are quantized through the library's
/// own copy of infer-core, whose recording ([`record_quantized`]) this process cannot see, so the
/// copy would hold no blocks.
pub fn check_recordable(entry: &ModelEntry) -> Result<()> {
    match &entry.origin {
        Origin::BuiltIn => Ok(()),
        Origin::Library(path) => Err(Error::unsupported(format!(
            "`{}` comes from the plugin library {}: `infer quantize` sees the weights of models built into \
             this binary only (a library quantizes through its own copy of infer-core); run it with a binary \
             that has the model built in",
            entry.plugin.name(),
            path.display()
        ))),
    }
}

/// Refuses a checkpoint `infer quantize` already wrote (quantizing it again would leave its
/// blocks as they are and only quantize float leftovers): callers check before loading.
pub fn check_source(src: &Path) -> Result<()> {
    for file in files_under(src)? {
        if file.extension().is_none_or(|x| x != "safetensors") {
            continue;
        }
        let map = map_file(&file)?;
        let listed = safetensors::SafeTensors::read_metadata(&map)
            .ok()
            .is_some_and(|(_, meta)| meta.metadata().as_ref().is_some_and(|m| m.contains_key(METADATA_KEY)));
        if listed {
            return Err(Error::invalid(format!(
                "{}: already quantized (written by `infer quantize`): quantize the original checkpoint instead",
                file.display()
            )));
        }
    }
    Ok(())
}

/// Refuses an output folder that has files in it or lies inside the checkpoint `src` (the copy
/// would copy itself): callers check before loading, [`write_quantized`] again before writing.
pub fn check_destination(src: &Path, out: &Path) -> Result<()> {
    let src = src.canonicalize().map_err(|e| Error::io(src, e))?;
    if out.exists() {
        let mut entries = std::fs::read_dir(out).map_err(|e| Error::io(out, e))?;
        if entries.next().is_some() {
            return Err(Error::invalid(format!("{}: the output directory is not empty", out.display())));
        }
    }
    if resolved(out)?.starts_with(&src) {
        return Err(Error::invalid(format!("{}: the output directory is inside the checkpoint", out.display())));
    }
    Ok(())
}

/// `path` with its deepest existing ancestor's symbolic links resolved.
fn resolved(path: &Path) -> Result<PathBuf> {
    let absolute = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return Ok(rest.iter().rev().fold(real, |p, part| p.join(part)));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return Ok(absolute),
        }
    }
}

/// `file` in its folder's real path, the file name itself kept: a Hugging Face cache's
/// snapshot links each file to a blob elsewhere, and the copy must follow the snapshot's names.
fn in_real_folder(file: &Path) -> Result<PathBuf> {
    let (Some(parent), Some(name)) = (file.parent(), file.file_name()) else {
        return Err(Error::invalid(format!("{}: not a file path", file.display())));
    };
    let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
    Ok(parent.canonicalize().map_err(|e| Error::io(parent, e))?.join(name))
}

/// Every file under `dir`, recursively, in a stable order (a linked folder once: links may loop).
/// Links to files and folders outside `dir` are followed (a Hugging Face cache links each file of
/// a snapshot to a blob elsewhere; a checkpoint may link its codec's folder) and named by
/// [`linked_outside`], so the caller says what is read from outside; anything but files and
/// folders (a FIFO, `/dev/zero`) is refused.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, seen: &mut Vec<PathBuf>, out: &mut Vec<PathBuf>) -> Result<()> {
        let real = dir.canonicalize().map_err(|e| Error::io(dir, e))?;
        if seen.contains(&real) {
            return Ok(());
        }
        seen.push(real);
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .map(|e| e.map(|e| e.path()).map_err(|err| Error::io(dir, err)))
            .collect::<Result<_>>()?;
        entries.sort();
        for p in entries {
            let target = p.canonicalize().map_err(|e| Error::io(&p, e))?;
            let meta = std::fs::metadata(&target).map_err(|e| Error::io(&target, e))?;
            let linked = p.symlink_metadata().map_err(|e| Error::io(&p, e))?.file_type().is_symlink();
            if meta.is_dir() {
                walk(&p, seen, out)?;
            } else if meta.is_file() {
                out.push(p);
            } else {
                return Err(Error::invalid(format!(
                    "{}: not a regular file or folder{}: refused",
                    p.display(),
                    if linked { format!(" (it links to {})", target.display()) } else { String::new() }
                )));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// The links in the checkpoint `src` (to files or folders) that lead outside it, with where they
/// lead: `infer quantize` copies what they hold as ordinary files and folders, and says so.
pub fn linked_outside(src: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let root = src.canonicalize().map_err(|e| Error::io(src, e))?;
    let mut linked: Vec<(PathBuf, PathBuf)> = Vec::new();
    for file in files_under(src)? {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        // The outermost link on the way to the file that leaves the checkpoint.
        let mut at = src.to_path_buf();
        for part in rel.components() {
            at.push(part);
            let is_link = at.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink());
            if !is_link {
                continue;
            }
            let target = at.canonicalize().map_err(|e| Error::io(&at, e))?;
            if !target.starts_with(&root) {
                if !linked.iter().any(|(l, _)| *l == at) {
                    linked.push((at.clone(), target));
                }
                break;
            }
        }
    }
    Ok(linked)
}

/// A tensor of the written file: the source's bytes as stored, or a recorded weight's blocks as
/// one `U8` row (read from the backend when written).
struct Written<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Data<'a>,
}

enum Data<'a> {
    Stored(&'a [u8]),
    Blocks { tensor: &'a Tensor, len: usize },
}

impl View for Written<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        match self.data {
            Data::Stored(bytes) => Cow::Borrowed(bytes),
            // `data_len` fixed the length; a backend that failed to hand the bytes back would
            // leave a short tensor, which `check_complete` refuses: no wrong file is kept.
            Data::Blocks { tensor, .. } => Cow::Owned(tensor.to_bytes().unwrap_or_default()),
        }
    }
    fn data_len(&self) -> usize {
        match self.data {
            Data::Stored(bytes) => bytes.len(),
            Data::Blocks { len, .. } => len,
        }
    }
}

/// `path` mapped read-only (its header is read through it, and copied tensors from it).
fn map_file(path: &Path) -> Result<Mmap> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: read-only mapping of a checkpoint file not modified while it is read (as for
    // loading), or of a file this process wrote.
    unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))
}

/// Writes `dest`: the safetensors file `src` with `quantized` tensors replaced by their blocks.
fn rewrite(src: &Path, dest: &Path, quantized: &HashMap<&str, &Tensor>, done: &mut WrittenCheckpoint) -> Result<()> {
    let map = map_file(src)?;
    let bad = |m: String| Error::checkpoint(src, m);
    let (header_len, meta) = safetensors::SafeTensors::read_metadata(&map)
        .map_err(|e| bad(format!("not a valid safetensors file ({e})")))?;
    let data = &map[8 + header_len..];
    let mut listed: BTreeMap<String, ListedTensor> = listed(src, meta.metadata().as_ref())?
        .into_iter()
        .map(|(name, (dtype, shape))| (name, ListedTensor { dtype: dtype.name().to_string(), shape }))
        .collect();
    let mut views = Vec::new();
    for (name, info) in meta.tensors() {
        let (s, e) = info.data_offsets;
        let bytes = data.get(s..e).ok_or_else(|| bad(format!("tensor `{name}` lies outside the file (truncated?)")))?;
        let Some(t) = quantized.get(name.as_str()) else {
            views.push((name, Written { dtype: info.dtype, shape: info.shape.clone(), data: Data::Stored(bytes) }));
            continue;
        };
        let (dtype, shape) = (t.dtype(), t.dims().to_vec());
        let len = dtype.storage_bytes(shape.iter().product());
        if !dtype.is_quantized() || shape != info.shape {
            return Err(bad(format!("tensor `{name}` {:?} was recorded as {dtype}{shape:?}", info.shape)));
        }
        done.quantized += 1;
        done.source_bytes += bytes.len() as u64;
        done.block_bytes += len as u64;
        listed.insert(name.clone(), ListedTensor { dtype: dtype.name().to_string(), shape });
        views.push((name, Written { dtype: Dtype::U8, shape: vec![len], data: Data::Blocks { tensor: t, len } }));
    }
    let mut metadata = meta.metadata().clone().unwrap_or_default();
    let json = serde_json::to_string(&listed).map_err(|e| Error::invalid(format!("{METADATA_KEY}: {e}")))?;
    metadata.insert(METADATA_KEY.to_string(), json);
    safetensors::serialize_to_file(views, Some(metadata), dest)
        .map_err(|e| Error::checkpoint(dest, format!("writing failed: {e}")))?;
    check_complete(dest)
}

/// A written file whose size is not what its header describes (a backend handed back fewer
/// bytes than a tensor's blocks) is refused.
fn check_complete(path: &Path) -> Result<()> {
    let bytes = map_file(path)?;
    let complete = safetensors::SafeTensors::read_metadata(&bytes)
        .is_ok_and(|(header_len, meta)| 8 + header_len + meta.data_len() == bytes.len());
    if complete {
        return Ok(());
    }
    Err(Error::checkpoint(path, "the written file does not match its header (a tensor's blocks came back short)"))
}
