//! Key/value caches for decoder attention.
//!
//! A layer cache grows in chunks written in place (`SliceAssign`), so a decode step copies only
//! the new token's K/V; a rotating cache keeps the last `window` positions (sliding-window layers,
//! or every layer when the user bounds the context).

use abi_stable::{
    std_types::{ROption, RVec},
    StableAbi,
};

use crate::{Error, Result, Tensor};

/// Positions are allocated in chunks of this many tokens.
const CHUNK: usize = 256;

#[repr(C)]
#[derive(Clone, StableAbi)]
pub struct LayerCache {
    k: ROption<Tensor>,
    v: ROption<Tensor>,
    /// Valid positions held in the buffers.
    len: usize,
    /// Tokens seen so far: the absolute position of the next token.
    offset: usize,
    /// 0: unbounded; otherwise keep only the last `window` positions.
    window: usize,
}

impl LayerCache {
    pub fn new(window: usize) -> Self {
        LayerCache { k: ROption::RNone, v: ROption::RNone, len: 0, offset: 0, window }
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
        let t = k.dim(2);
        self.offset += t;
        if self.window > 0 {
            return self.append_rotating(k, v, t);
        }
        let (k_all, v_all) = match (&self.k, &self.v) {
            (ROption::RSome(kb), ROption::RSome(vb)) if kb.dim(2) >= self.len + t => {
                let kb = kb.clone().slice_assign(k, 2, self.len)?;
                let vb = vb.clone().slice_assign(v, 2, self.len)?;
                (kb, vb)
            }
            (old_k, old_v) => {
                let capacity = (self.len + t).div_ceil(CHUNK) * CHUNK;
                let kb = grow(old_k, k, self.len, capacity)?;
                let vb = grow(old_v, v, self.len, capacity)?;
                (kb, vb)
            }
        };
        self.len += t;
        let out = (k_all.narrow(2, 0, self.len)?, v_all.narrow(2, 0, self.len)?);
        self.k = ROption::RSome(k_all);
        self.v = ROption::RSome(v_all);
        Ok(out)
    }

    fn append_rotating(&mut self, k: &Tensor, v: &Tensor, t: usize) -> Result<(Tensor, Tensor)> {
        let (k_all, v_all) = match (&self.k, &self.v) {
            (ROption::RSome(kc), ROption::RSome(vc)) => (Tensor::concat(&[kc, k], 2)?, Tensor::concat(&[vc, v], 2)?),
            _ => (k.clone(), v.clone()),
        };
        let total = k_all.dim(2);
        let keep = total.min(self.window);
        self.k = ROption::RSome(k_all.narrow(2, total - keep, keep)?.contiguous()?);
        self.v = ROption::RSome(v_all.narrow(2, total - keep, keep)?.contiguous()?);
        self.len = keep;
        let _ = t;
        Ok((k_all, v_all))
    }

    pub fn reset(&mut self) {
        *self = LayerCache::new(self.window);
    }
}

/// A zero buffer of `capacity` positions holding the first `len` positions of `old` and `new`.
fn grow(old: &ROption<Tensor>, new: &Tensor, len: usize, capacity: usize) -> Result<Tensor> {
    let mut shape = new.dims().to_vec();
    shape[2] = capacity;
    let mut buf = Tensor::zeros(new.backend(), new.dtype(), &shape)?;
    if let ROption::RSome(old) = old {
        if len > 0 {
            buf = buf.slice_assign(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
        }
    }
    buf.slice_assign(&new.contiguous()?, 2, len)
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
}
