//! Named voice presets, stored next to the model in `voices.safetensors`: one x-vector per voice
//! (`<name>.xvector`, f32), and for presets that clone in context the reference codes
//! (`<name>.codes`, u32 `[frames, codebooks]`) with the transcript in the file's metadata
//! (`<name>.transcript`). Made by `infer voice`; chosen with `--voice NAME`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use infer_core::{Error, Result};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

pub const FILE_NAME: &str = "voices.safetensors";

#[derive(Debug, Clone, PartialEq)]
pub struct VoicePreset {
    pub xvector: Vec<f32>,
    /// Transcript and codes of the reference recording, for in-context cloning.
    pub in_context: Option<(String, Vec<Vec<u32>>)>,
}

pub struct VoiceStore {
    path: PathBuf,
    voices: BTreeMap<String, VoicePreset>,
}

impl VoiceStore {
    /// The presets of the model in `dir` (none when the file does not exist yet).
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(FILE_NAME);
        let voices = if path.exists() { read(&path)? } else { BTreeMap::new() };
        Ok(VoiceStore { path, voices })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.voices.keys().map(String::as_str)
    }

    pub fn get(&self, name: &str) -> Option<&VoicePreset> {
        self.voices.get(name)
    }

    /// Adds (or replaces) `name` and rewrites the file atomically. Under an exclusive lock on
    /// `voices.safetensors.lock` the file is read again and the preset added to what it holds
    /// then, so presets saved meanwhile by another process are kept, not overwritten.
    pub fn save(&mut self, name: &str, preset: VoicePreset) -> Result<()> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(Error::invalid(format!(
                "voice name `{name}` must be letters, digits, `-` or `_` (it becomes a tensor name)"
            )));
        }
        let lock_path = self.path.with_extension("safetensors.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io(&lock_path, e))?;
        lock.lock().map_err(|e| Error::io(&lock_path, e))?;
        let mut voices = if self.path.exists() { read(&self.path)? } else { BTreeMap::new() };
        voices.insert(name.to_string(), preset);
        write(&self.path, &voices)?;
        self.voices = voices;
        // Closing `lock` releases it.
        Ok(())
    }
}

fn read(path: &Path) -> Result<BTreeMap<String, VoicePreset>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |m: String| Error::checkpoint(path, m);
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| bad(format!("not a voice file: {e}")))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(format!("not a voice file: {e}")))?;
    let text = meta.metadata().clone().unwrap_or_default();
    let mut voices = BTreeMap::new();
    for (name, view) in st.tensors() {
        let Some(voice) = name.strip_suffix(".xvector") else { continue };
        if view.dtype() != Dtype::F32 || view.shape().len() != 1 {
            return Err(bad(format!("`{name}` must be a 1-D f32 tensor")));
        }
        let xvector = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let in_context = match st.tensor(&format!("{voice}.codes")) {
            Ok(codes) => {
                let shape = codes.shape();
                if codes.dtype() != Dtype::U32 || shape.len() != 2 {
                    return Err(bad(format!("`{voice}.codes` must be a 2-D u32 tensor")));
                }
                let flat: Vec<u32> =
                    codes.data().chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
                let frames = flat.chunks(shape[1].max(1)).map(<[u32]>::to_vec).collect();
                let transcript = text
                    .get(&format!("{voice}.transcript"))
                    .cloned()
                    .ok_or_else(|| bad(format!("`{voice}` has codes but no transcript")))?;
                Some((transcript, frames))
            }
            Err(_) => None,
        };
        voices.insert(voice.to_string(), VoicePreset { xvector, in_context });
    }
    Ok(voices)
}

fn write(path: &Path, voices: &BTreeMap<String, VoicePreset>) -> Result<()> {
    let mut blobs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut meta = HashMap::new();
    for (name, v) in voices {
        let bytes = v.xvector.iter().flat_map(|x| x.to_le_bytes()).collect();
        blobs.push((format!("{name}.xvector"), Dtype::F32, vec![v.xvector.len()], bytes));
        if let Some((transcript, codes)) = &v.in_context {
            let width = codes.first().map_or(0, Vec::len);
            let bytes = codes.iter().flatten().flat_map(|c| c.to_le_bytes()).collect();
            blobs.push((format!("{name}.codes"), Dtype::U32, vec![codes.len(), width], bytes));
            meta.insert(format!("{name}.transcript"), transcript.clone());
        }
    }
    let views = blobs
        .iter()
        .map(|(n, d, s, b)| {
            TensorView::new(*d, s.clone(), b).map(|v| (n.clone(), v)).map_err(|e| Error::backend(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let data = safetensors::serialize(views, Some(meta)).map_err(|e| Error::backend(e.to_string()))?;
    // A name no other writer uses (the lock serialises writers of this store; a stale file
    // from a killed run is never reused), written whole and synced before it takes the name.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("safetensors.{}-{n}.tmp", std::process::id()));
    let written = (|| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(&data)?;
        f.sync_all()
    })();
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_round_trip_and_names_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = VoiceStore::open(dir.path()).unwrap();
        let plain = VoicePreset { xvector: vec![0.5, -1.0, 2.0], in_context: None };
        let icl =
            VoicePreset { xvector: vec![1.0; 3], in_context: Some(("hi there".into(), vec![vec![1, 2], vec![3, 4]])) };
        store.save("plain", plain.clone()).unwrap();
        store.save("clone-1", icl.clone()).unwrap();
        assert!(store.save("bad.name", plain.clone()).is_err());
        let again = VoiceStore::open(dir.path()).unwrap();
        assert_eq!(again.names().collect::<Vec<_>>(), ["clone-1", "plain"]);
        assert_eq!(again.get("plain"), Some(&plain));
        assert_eq!(again.get("clone-1"), Some(&icl));
    }
}
