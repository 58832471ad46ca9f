//! Attention for a few query rows per KV head (decode steps, short chunks), without gemm.
//!
//! gemm is slow for a handful of rows against thousands of strided keys (it packs all of K on
//! every call). Here the keys of each KV head are split into chunks handed to candle's thread
//! pool; each chunk streams its K and V rows once (read in place through the cache's strides)
//! and keeps a running max, sum and weighted V sum per query row (flash-decoding); the chunks
//! are then merged. Same math as the generic path: f32 scores, optional softcap, causal /
//! window visibility, softmax.

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};

use crate::attention::Visibility;
use crate::gemv::dot_f32;

/// Keys per work unit.
const KEYS_PER_UNIT: usize = 256;
/// Query rows per KV head handled here; more go to the gemm path.
pub const MAX_ROWS: usize = 32;
/// Below this many score elements everything runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 14;

struct Ptr(*mut f32);
// SAFETY: hands disjoint slots of one buffer to the pool's threads.
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

/// A rank-4 f32 CPU tensor's data, offset and strides; `None` unless its last dim is unit-stride.
fn view(t: &Tensor) -> Option<(usize, [usize; 4])> {
    let s = t.stride();
    if t.dtype() != C::F32 || s.len() != 4 || (s[3] != 1 && t.dim(3).ok()? > 1) {
        return None;
    }
    Some((t.layout().start_offset(), [s[0], s[1], s[2], 1]))
}

/// q (b, hkv, rows, d) contiguous and pre-scaled, k (b, hkv, nk, d), v (b, hkv, nk, dv), all f32
/// -> (b, hkv, rows, dv); `None` when the layouts do not suit this kernel.
pub(crate) fn attend(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Visibility, softcap: f32) -> Result<Option<Tensor>> {
    let (b, hkv, rows, d) = q.dims4()?;
    let nk = k.dim(2)?;
    let dv = v.dim(3)?;
    if rows == 0 || rows > MAX_ROWS || nk == 0 || !q.is_contiguous() {
        return Ok(None);
    }
    let (Some((ko, ks)), Some((vo, vs))) = (view(k), view(v)) else { return Ok(None) };
    let qv = q.flatten_all()?.to_vec1::<f32>()?;
    let (kg, _) = k.storage_and_layout();
    let (vg, _) = v.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(kd)), Storage::Cpu(CpuStorage::F32(vd))) = (&*kg, &*vg) else {
        return Ok(None);
    };

    let chunks = nk.div_ceil(KEYS_PER_UNIT);
    let units = b * hkv * chunks;
    let slot = dv + 2; // running max, sum, then the weighted V sum
    let mut partial = vec![0f32; units * rows * slot];
    let work = |u: usize, out: &Ptr| {
        let (bh, ch) = (u / chunks, u % chunks);
        let (bi, h) = (bh / hkv, bh % hkv);
        let (c0, c1) = (ch * KEYS_PER_UNIT, ((ch + 1) * KEYS_PER_UNIT).min(nk));
        let kbase = ko + bi * ks[0] + h * ks[1];
        let vbase = vo + bi * vs[0] + h * vs[1];
        let mut scores = [0f32; KEYS_PER_UNIT];
        for r in 0..rows {
            // SAFETY: unit u owns slots u * rows .. (u + 1) * rows exclusively.
            let o = unsafe { std::slice::from_raw_parts_mut(out.0.add((u * rows + r) * slot), slot) };
            let (lo, hi) = vis.range(r % vis.c);
            let (j0, j1) = (lo.max(c0), hi.min(c1));
            if j0 >= j1 {
                o[0] = f32::NEG_INFINITY;
                o[1] = 0.0;
                o[2..].fill(0.0);
                continue;
            }
            let qr = &qv[(bh * rows + r) * d..(bh * rows + r + 1) * d];
            let s = &mut scores[..j1 - j0];
            let mut max = f32::NEG_INFINITY;
            for (j, sj) in (j0..j1).zip(s.iter_mut()) {
                let kr = &kd[kbase + j * ks[2]..kbase + j * ks[2] + d];
                let mut x = dot_f32(qr, kr);
                if softcap > 0.0 {
                    x = softcap * (x / softcap).tanh();
                }
                *sj = x;
                max = max.max(x);
            }
            let (head, acc) = o.split_at_mut(2);
            acc.fill(0.0);
            let mut sum = 0f32;
            for (j, &sj) in (j0..j1).zip(s.iter()) {
                let e = (sj - max).exp();
                sum += e;
                let vr = &vd[vbase + j * vs[2]..vbase + j * vs[2] + dv];
                for (a, &x) in acc.iter_mut().zip(vr) {
                    *a += e * x;
                }
            }
            head[0] = max;
            head[1] = sum;
        }
    };
    let ptr = Ptr(partial.as_mut_ptr());
    if units == 1 || b * hkv * rows * nk < PARALLEL_MIN {
        (0..units).for_each(|u| work(u, &ptr));
    } else {
        candle_core::utils::barrier_pool().execute_chunked(units, |range| range.for_each(|u| work(u, &ptr)));
    }
    drop((kg, vg));

    // Merge the chunks of each (batch, head, row).
    let mut out = vec![0f32; b * hkv * rows * dv];
    for bh in 0..b * hkv {
        for r in 0..rows {
            let parts = (0..chunks).map(|ch| &partial[((bh * chunks + ch) * rows + r) * slot..][..slot]);
            let m = parts.clone().fold(f32::NEG_INFINITY, |m, p| m.max(p[0]));
            let o = &mut out[(bh * rows + r) * dv..(bh * rows + r + 1) * dv];
            if m == f32::NEG_INFINITY {
                o.fill(f32::NAN); // no visible key: PyTorch gives NaN
                continue;
            }
            let mut total = 0f32;
            for p in parts {
                if p[0] == f32::NEG_INFINITY {
                    continue;
                }
                let w = (p[0] - m).exp();
                total += p[1] * w;
                for (a, &x) in o.iter_mut().zip(&p[2..]) {
                    *a += w * x;
                }
            }
            let inv = 1.0 / total;
            o.iter_mut().for_each(|a| *a *= inv);
        }
    }
    Ok(Some(Tensor::from_vec(out, (b, hkv, rows, dv), q.device())?))
}
