//! Attention without an additive mask as one op on the backend's thread pool.
//!
//! The op-by-op path runs the two batched products on gemm's own threads, the softmax on the
//! pool, and everything between (scaling q, the score buffers' zeroing and page faults, the
//! concatenation of query blocks) on the calling thread; at decode it is serial throughout. Here
//! the work is cut into tasks of (batch, KV head, group of its query heads, block of queries):
//! each task scales its queries, multiplies them with the keys it can see, takes the softmax
//! of those rows and multiplies them with the values, in a per-thread scratch small enough to
//! stay in cache, and writes its own rows of the output. The arithmetic is the op-by-op path's:
//! the same [`product`] kernels (each on one thread) and the same [`softmax_row`].

use std::cell::RefCell;

use candle_core::{CpuStorage, CustomOp3, DType as C, Layout, Result, Shape, Tensor};

use crate::attention::{product_widened, softmax_row, AttnParams, Visibility};
use crate::gemv::Widen;
use infer_cpu_kernels::out_ptr::OutPtr;
use infer_cpu_kernels::thin_product::{self, View};

/// Query rows (query heads × queries) a prefill task aims for: enough for gemm's tiles, few
/// enough that a task's scores (rows × keys) stay in a core's L2 for a few thousand keys.
const TASK_ROWS: usize = 128;
/// Fewest queries for which a KV head's query heads are split over tasks.
const MIN_QUERIES_TO_SPLIT_HEADS: usize = 8;
/// Below this many multiply-adds the op runs on the calling thread.
const PARALLEL_MIN_MACS: usize = 1 << 18;
/// Fewest keys from which a lone decode task (one KV head: Gemma 3) splits its two products over
/// the pool: the keys of `q · kᵀ`, the value columns of `p · v` (see [`thin_product_split`]).
pub(crate) const SPLIT_MIN_KEYS: usize = 128;
/// Value columns per slice of a split `p · v` (the thin kernel's register block).
const SPLIT_VALUE_COLUMNS: usize = 64;

thread_local! {
    /// A task's scaled queries, scores and output rows; kept between calls (no page faults).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// q (b, hq, tq, d) contiguous f32, k (b, hkv, tk, d) and v (b, hkv, tk, dv) views (strided, a
/// cache's narrowed buffer) -> (b, hq, tq, dv) f32. k and v are f32, or a half-precision cache
/// read in place where every task's products are thin ones (decode); shapes are checked by the
/// caller.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, p: AttnParams) -> Result<Tensor> {
    q.apply_op3_no_bwd(k, v, &FusedAttention { p })
}

struct FusedAttention {
    p: AttnParams,
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

impl CustomOp3 for FusedAttention {
    fn name(&self) -> &'static str {
        "infer-fused-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(q) = s1 else { candle_core::bail!("fused attention wants an f32 q") };
        match (s2, s3) {
            (CpuStorage::F32(k), CpuStorage::F32(v)) => attend_cpu(self.p, q, l1, k, l2, v, l3),
            (CpuStorage::F16(k), CpuStorage::F16(v)) => attend_cpu(self.p, q, l1, k, l2, v, l3),
            (CpuStorage::BF16(k), CpuStorage::BF16(v)) => attend_cpu(self.p, q, l1, k, l2, v, l3),
            _ => candle_core::bail!("fused attention wants k and v in one float dtype"),
        }
    }
}

/// [`FusedAttention`] with keys and values as stored.
fn attend_cpu<T: Widen>(
    p: AttnParams,
    q: &[f32],
    l1: &Layout,
    k: &[T],
    l2: &Layout,
    v: &[T],
    l3: &Layout,
) -> Result<(CpuStorage, Shape)> {
    let (&[b, hq, tq, d], &[_, hkv, tk, _], &[_, _, _, dv]) = (l1.dims(), l2.dims(), l3.dims()) else {
        candle_core::bail!("fused attention wants rank-4 q, k, v")
    };
    let Some((q_start, _)) = l1.contiguous_offsets() else {
        candle_core::bail!("fused attention wants a contiguous q")
    };
    let q = &q[q_start..];
    let (sk, sv) = (l2.stride(), l3.stride());
    let (ko, vo) = (l2.start_offset(), l3.start_offset());
    let pool = candle_core::utils::barrier_pool();
    let plan = Plan::new(b, hkv, hq / hkv, tq, pool.n_workers() + 1);
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
                && pool.n_workers() > 0
                && thin_product::accepts(rows, d, &qv, &kt)
                && thin_product::accepts(rows, nk, &View { data: &scores[..], row_stride: nk, col_stride: 1 }, &vv);
            if split {
                let key_step = nk.div_ceil(2 * (pool.n_workers() + 1)).next_multiple_of(16);
                thin_product_split(rows, nk, d, qv, kt, scores, key_step);
            } else {
                product_widened(rows, nk, d, qv, kt, scores, none);
            }
            if nk > 0 {
                for (r, row) in scores.chunks_exact_mut(nk).enumerate() {
                    softmax_row(&vis, p.softcap, r % c, row);
                    round_probs(row, p.probs_dtype);
                }
            }
            let pv = View { data: scores, row_stride: nk, col_stride: 1 };
            if split {
                thin_product_split(rows, dv, nk, pv, vv, ys, SPLIT_VALUE_COLUMNS);
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
    if plan.tasks() == 1 || macs < PARALLEL_MIN_MACS {
        (0..plan.tasks()).for_each(run);
    } else {
        pool.execute_chunked(plan.tasks(), |range| range.for_each(run));
    }
    Ok((CpuStorage::F32(out), Shape::from((b, hq, tq, dv))))
}

/// A thin product ([`thin_product::accepts`]) with its `n` output columns cut into slices of
/// `step` over the pool. Each output element is the same arithmetic whichever slice computes it
/// (the thin kernels' per-key dots and per-column sums in key order), so the result is bit for
/// bit the one-thread product's. The slices' outputs go through a small buffer each: the thin
/// kernels write whole rows.
fn thin_product_split<T: Widen + Sync>(
    m: usize,
    n: usize,
    k: usize,
    a: View,
    b: View<T>,
    dst: &mut [f32],
    step: usize,
) {
    let out = OutPtr(dst.as_mut_ptr());
    candle_core::utils::barrier_pool().execute_chunked(n.div_ceil(step), |slices| {
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
fn round_probs(row: &mut [f32], dtype: Option<C>) {
    match dtype {
        Some(C::F16) => crate::half_slices::round_through::<half::f16>(row),
        Some(C::BF16) => crate::half_slices::round_through::<half::bf16>(row),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::attention_blocked;
    use crate::test_inputs::tensor as rand;

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        d.iter().fold(0f32, |m, &x| if x.is_nan() { f32::INFINITY } else { m.max(x) })
    }

    /// The fused op (called directly: `attention` picks it for decode and long prompts only)
    /// agrees with the op-by-op path for prefill and decode shapes, grouped
    /// queries, windows, soft-capping, non-causal attention, cache views and an f16 cache.
    #[test]
    fn matches_the_op_by_op_path() {
        // (b, hq, hkv, tq, tk, d, dv)
        let shapes = [
            (1, 4, 1, 300, 300, 32, 32), // prefill, several query blocks, heads of one KV head
            (2, 6, 2, 40, 70, 16, 24),   // prefill after a cached prefix, batch 2
            (1, 4, 1, 1, 333, 64, 64),   // decode, one KV head: tasks split the query heads
            (1, 14, 2, 1, 129, 64, 64),  // decode, Qwen2.5-like grouping
            (1, 2, 2, 3, 3, 8, 8),       // tiny: on the calling thread
        ];
        for (b, hq, hkv, tq, tk, d, dv) in shapes {
            let q = rand(&[b, hq, tq, d], 1);
            // Cache-like views: keys and values narrowed out of a longer buffer.
            let kbuf = rand(&[b, hkv, tk + 9, d], 2);
            let vbuf = rand(&[b, hkv, tk + 9, dv], 3);
            let (k, v) = (kbuf.narrow(2, 0, tk).unwrap(), vbuf.narrow(2, 0, tk).unwrap());
            for (causal, window, softcap) in [(true, 0, 0.0), (true, 50, 0.0), (true, 7, 3.0), (false, 0, 0.0)] {
                let p = AttnParams { scale: 0.3, causal, window, softcap, probs_dtype: None };
                let want = attention_blocked(&q, &k, &v, None, p, usize::MAX).unwrap();
                let got = attend(&q, &k, &v, p).unwrap();
                assert_eq!(got.dims(), want.dims());
                let diff = max_diff(&got, &want);
                assert!(diff < 1e-5, "{:?} causal {causal} window {window} softcap {softcap}: {diff}", q.dims());
            }
            let (kh, vh) = (k.to_dtype(C::F16).unwrap(), v.to_dtype(C::F16).unwrap());
            let p = AttnParams { scale: 0.3, causal: true, window: 0, softcap: 0.0, probs_dtype: None };
            let want = attention_blocked(&q, &kh, &vh, None, p, usize::MAX).unwrap();
            // As `attention` prepares an f16 cache: q at the cache's precision, all in f32.
            let f32_of = |t: &Tensor| t.to_dtype(C::F32).unwrap();
            let qh = f32_of(&q.to_dtype(C::F16).unwrap());
            let p = AttnParams { probs_dtype: Some(C::F16), ..p };
            let got = attend(&qh, &f32_of(&kh), &f32_of(&vh), p).unwrap();
            assert!(max_diff(&got, &want) < 1e-5, "f16 cache {:?}", q.dims());
        }
    }

    /// Decode-shaped calls, which `attention` hands to the fused op when there are several KV
    /// heads, give the op-by-op path's bits: f32 and half caches read in place, f32 and bf16 q.
    #[test]
    fn decode_gives_the_op_by_op_bits() {
        use crate::attention::attention;
        // (b, hq, hkv, tq, tk, d)
        for (b, hq, hkv, tq, tk, d) in
            // The last two: one KV head at depth, its products split over the pool.
            [
                (1, 14, 2, 1, 300, 64),
                (1, 16, 8, 1, 129, 128),
                (2, 4, 1, 1, 77, 256),
                (1, 4, 2, 3, 50, 32),
                (1, 4, 1, 1, 700, 256),
                (1, 8, 1, 1, 1030, 72),
            ]
        {
            let q = rand(&[b, hq, tq, d], 1);
            let kbuf = rand(&[b, hkv, tk + 9, d], 2);
            let vbuf = rand(&[b, hkv, tk + 9, d], 3);
            let (k, v) = (kbuf.narrow(2, 0, tk).unwrap(), vbuf.narrow(2, 0, tk).unwrap());
            for (q_dtype, kv_dtype) in [(C::F32, C::F32), (C::F32, C::F16), (C::F32, C::BF16), (C::BF16, C::BF16)] {
                let q = q.to_dtype(q_dtype).unwrap();
                let (k, v) = (k.to_dtype(kv_dtype).unwrap(), v.to_dtype(kv_dtype).unwrap());
                for (window, softcap) in [(0, 0.0), (40, 0.0), (0, 5.0)] {
                    let p = AttnParams { scale: 0.125, causal: true, window, softcap, probs_dtype: None };
                    let fused = attention(&q, &k, &v, None, p).unwrap();
                    let op_by_op = attention_blocked(&q, &k, &v, None, p, usize::MAX).unwrap();
                    assert!(
                        crate::half_slices::same_bits(&fused, &op_by_op),
                        "{:?} q {q_dtype:?} kv {kv_dtype:?} window {window} softcap {softcap}",
                        q.dims()
                    );
                }
            }
        }
    }

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
