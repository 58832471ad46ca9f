//! Attention without an additive mask as one call on the caller's thread pool.
//!
//! The op-by-op path runs the two batched products on gemm's own threads, the softmax on the
//! pool, and everything between (scaling q, the score buffers' zeroing and page faults, the
//! concatenation of query blocks) on the calling thread; at decode it is serial throughout. Here
//! the work is cut into tasks of (batch, KV head, group of its query heads, block of queries):
//! each task scales its queries, multiplies them with the keys it can see, takes the softmax
//! of those rows and multiplies them with the values, in a per-thread scratch small enough to
//! stay in cache, and writes its own rows of the output. The arithmetic is the op-by-op path's:
//! the same [`product_widened`] kernels (each on one thread) and the same [`softmax_row`].

use std::cell::RefCell;

use crate::attention::{product_widened, softmax_row, Visibility};
use crate::gemv::Widen;
use crate::out_ptr::OutPtr;
use crate::pool::Pool;
use crate::thin_product::{self, View};

/// Query rows (query heads × queries) a prefill task aims for: enough for gemm's tiles, few
/// enough that a task's scores (rows × keys) stay in a core's L2 for a few thousand keys.
const TASK_ROWS: usize = 128;
/// Fewest queries for which a KV head's query heads are split over tasks.
const MIN_QUERIES_TO_SPLIT_HEADS: usize = 8;
/// Below this many multiply-adds the op runs on the calling thread.
const PARALLEL_MIN_MACS: usize = 1 << 18;
/// Fewest keys from which a lone decode task (one KV head: Gemma 3) splits its two products over
/// the pool: the keys of `q · kᵀ`, the value columns of `p · v` (see [`thin_product_split`]).
pub const SPLIT_MIN_KEYS: usize = 128;
/// Value columns per slice of a split `p · v` (the thin kernel's register block).
const SPLIT_VALUE_COLUMNS: usize = 64;

thread_local! {
    /// A task's scaled queries, scores and output rows; kept between calls (no page faults).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// What an attention call computes besides the products: `softmax(scale · q kᵀ)` with causal
/// masking (queries at the last positions of the keys), a sliding `window` (0: none), logit
/// soft-capping (`softcap > 0`), and the probabilities rounded as a half-precision cache's
/// op-by-op path rounds them.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub scale: f32,
    pub causal: bool,
    pub window: usize,
    pub softcap: f32,
    pub round_probs: Option<ProbsRounding>,
}

/// The half-precision type probabilities are rounded through before they multiply v.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbsRounding {
    F16,
    Bf16,
}

/// A rank-4 operand (b, h, t, d) read in place: element (i, j, l, e) at
/// `offset + i·strides[0] + j·strides[1] + l·strides[2] + e·strides[3]` of `data`.
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a, T> {
    pub data: &'a [T],
    pub dims: [usize; 4],
    pub strides: [usize; 4],
    pub offset: usize,
}

/// q (b, hq, tq, d) contiguous f32, k (b, hkv, tk, d) and v (b, hkv, tk, dv) views (strided, a
/// cache's narrowed buffer) -> (b, hq, tq, dv) f32, row-major. k and v are f32, or a
/// half-precision cache read in place where every task's products are thin ones (decode).
/// Shapes must agree (hq a multiple of hkv, tq <= tk where causal); the views must hold every
/// element their dims and strides imply.
pub fn attend<T: Widen>(
    p: Params,
    q: &[f32],
    q_dims: [usize; 4],
    k: Operand<T>,
    v: Operand<T>,
    pool: &impl Pool,
) -> Vec<f32> {
    let [b, hq, tq, d] = q_dims;
    let [_, hkv, tk, _] = k.dims;
    let dv = v.dims[3];
    let (sk, sv) = (k.strides, v.strides);
    let (ko, vo) = (k.offset, v.offset);
    let (k, v) = (k.data, v.data);
    let plan = Plan::new(b, hkv, hq / hkv, tq, pool.threads());
    let mut out = vec![0f32; b * hq * tq * dv];
    let dst = OutPtr(out.as_mut_ptr());
    let run = |t: usize| {
        let (bi, h, h0, nh, q0, c) = plan.task(t);
        // Absolute positions of the task's first and last query, and the keys they see.
        let first = tk - tq.min(tk) + q0;
        let last = first + c - 1;
        let k_hi = if p.causal { (last + 1).min(tk) } else { tk };
        let k_lo = if p.window > 0 { (first + 1).saturating_sub(p.window).min(k_hi) } else { 0 };
        let nk = k_hi - k_lo;
        let vis = Visibility { c, nk, first: first as isize - k_lo as isize, causal: p.causal, window: p.window };
        let rows = nh * c;
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let need = rows * (d + nk + dv);
            if scratch.len() < need {
                scratch.resize(need, 0.0);
            }
            let (qs, rest) = scratch.split_at_mut(rows * d);
            let (scores, ys) = rest.split_at_mut(rows * nk);
            // Rows are (query head, query), as the op-by-op path's (b, hkv, rep·c, d) view.
            for j in 0..nh {
                let head = (bi * hkv + h) * plan.rep + h0 + j;
                let src = &q[(head * tq + q0) * d..(head * tq + q0 + c) * d];
                for (o, &x) in qs[j * c * d..(j + 1) * c * d].iter_mut().zip(src) {
                    *o = x * p.scale;
                }
            }
            let kb = ko + bi * sk[0] + h * sk[1] + k_lo * sk[2];
            let vb = vo + bi * sv[0] + h * sv[1] + k_lo * sv[2];
            let none = gemm::Parallelism::None;
            let qv = View { data: qs, row_stride: d, col_stride: 1 };
            // kᵀ: row e (the head dim) strided by sk[3], column j (the key) by sk[2].
            let kt = View { data: &k[kb..], row_stride: sk[3], col_stride: sk[2] };
            let vv = View { data: &v[vb..], row_stride: sv[2], col_stride: sv[3] };
            // A decode step with one task leaves the other threads idle: at depth its products
            // (reading the whole cache) split over the pool instead, with the same bits.
            let split = plan.tasks() == 1
                && tq == 1
                && nk >= SPLIT_MIN_KEYS
                && pool.threads() > 1
                && thin_product::accepts(rows, d, &qv, &kt)
                && thin_product::accepts(rows, nk, &View { data: &scores[..], row_stride: nk, col_stride: 1 }, &vv);
            if split {
                let key_step = nk.div_ceil(2 * pool.threads()).next_multiple_of(16);
                thin_product_split(rows, nk, d, qv, kt, scores, key_step, pool);
            } else {
                product_widened(rows, nk, d, qv, kt, scores, none);
            }
            if nk > 0 {
                for (r, row) in scores.chunks_exact_mut(nk).enumerate() {
                    softmax_row(&vis, p.softcap, r % c, row);
                    round_probs(row, p.round_probs);
                }
            }
            let pv = View { data: scores, row_stride: nk, col_stride: 1 };
            if split {
                thin_product_split(rows, dv, nk, pv, vv, ys, SPLIT_VALUE_COLUMNS, pool);
            } else {
                product_widened(rows, dv, nk, pv, vv, ys, none);
            }
            for j in 0..nh {
                let head = (bi * hkv + h) * plan.rep + h0 + j;
                let src = &ys[j * c * dv..(j + 1) * c * dv];
                // SAFETY: the rows (head, q0 .. q0 + c) belong to this task alone.
                let o = unsafe { std::slice::from_raw_parts_mut(dst.at((head * tq + q0) * dv), c * dv) };
                o.copy_from_slice(src);
            }
        });
    };
    let macs = b * hq * tq * tk * (d + dv);
    pool.execute_chunked_if(macs >= PARALLEL_MIN_MACS, plan.tasks(), |range| range.for_each(run));
    out
}

/// How the work is cut into tasks.
#[derive(Debug, Clone, Copy)]
struct Plan {
    b: usize,
    hkv: usize,
    rep: usize,
    tq: usize,
    /// Query heads per task and groups per KV head.
    heads: usize,
    groups: usize,
    /// Queries per task and blocks of them.
    queries: usize,
    blocks: usize,
}

impl Plan {
    fn new(b: usize, hkv: usize, rep: usize, tq: usize, threads: usize) -> Plan {
        let queries = TASK_ROWS.div_ceil(rep).clamp(1, tq.max(1));
        let blocks = tq.div_ceil(queries);
        // Short prompts have fewer (batch, KV head, block) tasks than threads: split the query
        // heads sharing a KV head too. Each group reads all the KV head's keys and values, which
        // pays while many queries share them (products), not at decode (streaming the cache:
        // measured 2x slower there at 2048 keys).
        let base = b * hkv * blocks;
        let want = if threads > 1 && tq >= MIN_QUERIES_TO_SPLIT_HEADS {
            (2 * threads).div_ceil(base.max(1)).clamp(1, rep)
        } else {
            1
        };
        let mut heads = rep.div_ceil(want);
        // Keep the op-by-op path's kernel per row: where its block of rep · queries rows went to
        // gemm, a task's rows must too (the thin product sums in another order).
        if rep * queries > thin_product::MAX_ROWS {
            heads = heads.max((thin_product::MAX_ROWS / queries + 1).min(rep));
        }
        let groups = rep.div_ceil(heads);
        Plan { b, hkv, rep, tq, heads, groups, queries, blocks }
    }

    fn tasks(&self) -> usize {
        self.b * self.hkv * self.groups * self.blocks
    }

    /// Task `t` as (batch, KV head, first query head within the group's KV head, query heads,
    /// first query, queries). The last query blocks (the most keys when causal) come first,
    /// so the pool's shared cursor ends on short tasks.
    fn task(&self, t: usize) -> (usize, usize, usize, usize, usize, usize) {
        let block = self.blocks - 1 - t % self.blocks;
        let t = t / self.blocks;
        let group = t % self.groups;
        let t = t / self.groups;
        let (h, bi) = (t % self.hkv, t / self.hkv);
        let h0 = group * self.heads;
        let q0 = block * self.queries;
        (bi, h, h0, self.heads.min(self.rep - h0), q0, self.queries.min(self.tq - q0))
    }
}

/// A thin product ([`thin_product::accepts`]) with its `n` output columns cut into slices of
/// `step` over the pool. Each output element is the same arithmetic whichever slice computes it
/// (the thin kernels' per-key dots and per-column sums in key order), so the result is bit for
/// bit the one-thread product's. The slices' outputs go through a small buffer each: the thin
/// kernels write whole rows.
#[allow(clippy::too_many_arguments)]
fn thin_product_split<T: Widen + Sync>(
    m: usize,
    n: usize,
    k: usize,
    a: View,
    b: View<T>,
    dst: &mut [f32],
    step: usize,
    pool: &impl Pool,
) {
    let out = OutPtr(dst.as_mut_ptr());
    pool.execute_chunked(n.div_ceil(step), |slices| {
        for s in slices {
            let (j0, j1) = (s * step, ((s + 1) * step).min(n));
            let cols = View { data: &b.data[j0 * b.col_stride..], row_stride: b.row_stride, col_stride: b.col_stride };
            let mut part = vec![0f32; m * (j1 - j0)];
            product_widened(m, j1 - j0, k, a, cols, &mut part, gemm::Parallelism::None);
            for (i, row) in part.chunks_exact(j1 - j0).enumerate() {
                // SAFETY: columns j0 .. j1 of every row belong to this slice alone; i < m.
                unsafe { std::slice::from_raw_parts_mut(out.at(i * n + j0), j1 - j0) }.copy_from_slice(row);
            }
        }
    });
}

/// Rounds probabilities to the cache's dtype (as the op-by-op path's cast there and back),
/// vectorized: one value at a time it was 10% of a 2048-token prefill with an f16 cache.
fn round_probs(row: &mut [f32], dtype: Option<ProbsRounding>) {
    match dtype {
        Some(ProbsRounding::F16) => crate::half_slices::round_through::<half::f16>(row),
        Some(ProbsRounding::Bf16) => crate::half_slices::round_through::<half::bf16>(row),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every query head, query and batch row lands in exactly one task.
    #[test]
    fn tasks_cover_every_row_once() {
        for (b, hkv, rep, tq, threads) in
            [(1, 1, 4, 1, 2), (2, 2, 7, 300, 2), (1, 3, 1, 5, 8), (1, 1, 8, 12, 16), (1, 1, 8, 9, 2)]
        {
            let plan = Plan::new(b, hkv, rep, tq, threads);
            let mut seen = vec![0u8; b * hkv * rep * tq];
            for t in 0..plan.tasks() {
                let (bi, h, h0, nh, q0, c) = plan.task(t);
                for j in h0..h0 + nh {
                    for i in q0..q0 + c {
                        seen[((bi * hkv + h) * rep + j) * tq + i] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "b {b} hkv {hkv} rep {rep} tq {tq} threads {threads}");
        }
    }
}
