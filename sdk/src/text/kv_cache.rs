//! Key/value caches for decoder attention.
//!
//! A layer cache grows in chunks written in place (`SliceAssign`), so a decode step copies only
//! the new token's K/V; a rotating cache keeps the last `window` positions (sliding-window layers,
//! or every layer when the user bounds the context) in a buffer with a chunk of room past them:
//! it advances its start instead of moving the window each step.
//!
//! A cache may store its keys and values in a narrower float dtype than the model computes in
//! (`LoadConfig::kv_dtype`, e.g. f16: half the memory); attention then reads them at that
//! precision (see `Op::Attention`).

use abi_stable::{
    std_types::{ROption, RVec},
    StableAbi,
};

use crate::{DType, Error, Result, Tensor};

/// Positions are allocated in chunks of this many tokens.
const CHUNK: usize = 256;
/// An unbounded cache whose first append is this short gets a buffer of this many positions
/// only: first-touch zero-filling of fresh memory ran at ~1 GB/s on the machines measured, and a speech model's 28-layer talker
/// would otherwise pay ~56 MB of it (256 positions) before its first frame although its 8-token
/// prompt needs 32. Longer prompts, and all later growth, go in `CHUNK`s.
const FIRST_CHUNK: usize = 32;

#[repr(C)]
#[derive(Clone, StableAbi)]
pub struct LayerCache {
    k: ROption<Tensor>,
    v: ROption<Tensor>,
    /// First valid position in the buffers (a rotating cache advances it instead of moving data).
    start: usize,
    /// Valid positions held in the buffers, from `start`.
    len: usize,
    /// Tokens seen so far: the absolute position of the next token.
    offset: usize,
    /// 0: unbounded; otherwise keep only the last `window` positions.
    window: usize,
    /// Storage dtype of the keys and values; `None` keeps the dtype they come in.
    dtype: ROption<DType>,
}

impl LayerCache {
    pub fn new(window: usize) -> Self {
        LayerCache { k: ROption::RNone, v: ROption::RNone, start: 0, len: 0, offset: 0, window, dtype: ROption::RNone }
    }

    /// Stores keys and values as `dtype` from now on (a float dtype; call before the first
    /// append).
    pub fn set_dtype(&mut self, dtype: Option<DType>) {
        self.dtype = dtype.into();
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Appends `k`, `v` of shape (b, h, t, d) and returns all cached keys and values to attend
    /// to, the new ones included. With a window, the returned tensors hold the previous
    /// `window` positions plus the new ones; the cache then trims to `window`.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let stored;
        let (k, v) = match self.dtype {
            ROption::RSome(d) if k.dtype() != d || v.dtype() != d => {
                stored = (k.to_dtype(d)?, v.to_dtype(d)?);
                (&stored.0, &stored.1)
            }
            _ => (k, v),
        };
        let t = k.dim(2);
        self.offset += t;
        let fits = matches!(&self.k, ROption::RSome(kb) if kb.dim(2) >= self.start + self.len + t);
        if !fits {
            // A rotating cache keeps a chunk of room past its window, so it moves its window to
            // the front of a new buffer once per CHUNK tokens rather than every step.
            let room = if self.window > 0 { CHUNK } else { 0 };
            let short_start = self.k.is_none() && self.window == 0 && self.len + t <= FIRST_CHUNK;
            let chunk = if short_start { FIRST_CHUNK } else { CHUNK };
            self.relocate(k, (self.len + t + room).div_ceil(chunk) * chunk)?;
        }
        let (ROption::RSome(kb), ROption::RSome(vb)) = (&self.k, &self.v) else {
            return Err(Error::backend("kv cache: buffers missing after allocation"));
        };
        let end = self.start + self.len;
        let kb = kb.clone().slice_assign(k, 2, end)?;
        let vb = vb.clone().slice_assign(v, 2, end)?;
        self.len += t;
        let out = (kb.narrow(2, self.start, self.len)?, vb.narrow(2, self.start, self.len)?);
        let capacity = kb.dim(2);
        self.k = ROption::RSome(kb);
        self.v = ROption::RSome(vb);
        if self.window > 0 && self.len > self.window {
            self.start += self.len - self.window;
            self.len = self.window;
            // After a prefill longer than the window, give the excess back.
            let compact = (self.window + CHUNK).div_ceil(CHUNK) * CHUNK;
            if capacity > compact + CHUNK {
                self.relocate(k, compact)?;
            }
        }
        Ok(out)
    }

    /// Moves the valid positions to the front of new zero buffers of `capacity` positions
    /// (shaped like `like` otherwise).
    fn relocate(&mut self, like: &Tensor, capacity: usize) -> Result<()> {
        self.k = ROption::RSome(moved(&self.k, like, self.start, self.len, capacity)?);
        self.v = ROption::RSome(moved(&self.v, like, self.start, self.len, capacity)?);
        self.start = 0;
        Ok(())
    }

    pub fn reset(&mut self) {
        *self = LayerCache { dtype: self.dtype, ..LayerCache::new(self.window) };
    }

    /// A copy with buffers of its own, as large as its positions: appends write in place, so a
    /// plain clone would share them (a snapshot that several sequences start from is detached
    /// to be kept, and again for each sequence; the first append makes room).
    pub fn detached(&self) -> Result<Self> {
        let mut copy = self.clone();
        if let ROption::RSome(k) = &self.k {
            copy.relocate(k, self.len.max(1))?;
        }
        Ok(copy)
    }

    /// Empties the cache but keeps its buffers, so a caller that runs many short sequences (a
    /// speech model's per-frame code predictor) allocates them once: positions are overwritten
    /// before they are read again.
    pub fn clear(&mut self) {
        (self.start, self.len, self.offset) = (0, 0, 0);
    }
}

/// A zero buffer of `capacity` positions holding positions `start..start + len` of `old` first.
fn moved(old: &ROption<Tensor>, like: &Tensor, start: usize, len: usize, capacity: usize) -> Result<Tensor> {
    let mut shape = like.dims().to_vec();
    shape[2] = capacity;
    let buf = Tensor::zeros(like.backend(), like.dtype(), &shape)?;
    match old {
        ROption::RSome(old) if len > 0 => buf.slice_assign(&old.narrow(2, start, len)?.contiguous()?, 2, 0),
        _ => Ok(buf),
    }
}

/// The caches of all layers of one sequence (or one batch of sequences).
#[repr(C)]
#[derive(Clone, StableAbi)]
pub struct KvCache {
    layers: RVec<LayerCache>,
}

impl KvCache {
    /// One cache per layer; `windows[i]` is layer i's window (0 = unbounded).
    pub fn new(windows: impl IntoIterator<Item = usize>) -> Self {
        KvCache { layers: windows.into_iter().map(LayerCache::new).collect() }
    }

    /// `num_layers` caches that all keep at most `context_len` positions (0 = unbounded).
    pub fn uniform(num_layers: usize, context_len: usize) -> Self {
        Self::new(std::iter::repeat_n(context_len, num_layers))
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub fn layer(&mut self, i: usize) -> Result<&mut LayerCache> {
        let n = self.layers.len();
        self.layers.get_mut(i).ok_or_else(|| Error::backend(format!("kv cache has {n} layers, layer {i} asked for")))
    }

    /// Absolute position of the next token.
    pub fn offset(&self) -> usize {
        self.layers.first().map(|l| l.offset).unwrap_or(0)
    }

    pub fn reset(&mut self) {
        self.layers.iter_mut().for_each(LayerCache::reset)
    }

    /// Every layer [`LayerCache::detached`].
    pub fn detached(&self) -> Result<Self> {
        Ok(KvCache { layers: self.layers.iter().map(LayerCache::detached).collect::<Result<_>>()? })
    }

    /// Empties every layer, keeping the buffers ([`LayerCache::clear`]).
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(LayerCache::clear)
    }

    /// Stores every layer's keys and values as `dtype` (`None`: as they come); see
    /// [`LayerCache::set_dtype`].
    pub fn set_dtype(&mut self, dtype: Option<DType>) -> Result<()> {
        check_dtype(dtype)?;
        self.layers.iter_mut().for_each(|l| l.set_dtype(dtype));
        Ok(())
    }
}

/// A cache stores keys and values in a float dtype (or as they come: `None`).
pub fn check_dtype(dtype: Option<DType>) -> Result<()> {
    match dtype {
        Some(d) if !d.is_float() => Err(Error::invalid(format!("the kv cache dtype must be a float dtype, got {d:?}"))),
        _ => Ok(()),
    }
}
