//! Attention without an additive mask as one op on candle's thread pool: infer-cpu-kernels'
//! `fused_attention` (tasks of batch, KV head, query heads and queries, each in a per-thread
//! scratch; the op-by-op path's arithmetic) on q, k and v read in place.

use candle_core::{CpuStorage, CustomOp3, DType as C, Layout, Result, Shape, Tensor};
use infer_cpu_kernels::fused_attention::{self as kernel, Operand, ProbsRounding};

use crate::attention::AttnParams;
use crate::gemv::Widen;
use crate::pool::CandlePool;

pub(crate) use infer_cpu_kernels::fused_attention::SPLIT_MIN_KEYS;

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
    let (&[b, hq, tq, d], &[kb, hkv, tk, kd], &[vb, vh, vt, dv]) = (l1.dims(), l2.dims(), l3.dims()) else {
        candle_core::bail!("fused attention wants rank-4 q, k, v")
    };
    let Some((q_start, _)) = l1.contiguous_offsets() else {
        candle_core::bail!("fused attention wants a contiguous q")
    };
    if hkv == 0 || hq % hkv != 0 || (kb, kd) != (b, d) || (vb, vh, vt) != (b, hkv, tk) {
        candle_core::bail!("fused attention of q {:?}, k {:?}, v {:?}", l1.dims(), l2.dims(), l3.dims())
    }
    let operand = |data, l: &Layout| {
        let s = l.stride();
        Operand {
            data,
            dims: [l.dims()[0], l.dims()[1], l.dims()[2], l.dims()[3]],
            strides: [s[0], s[1], s[2], s[3]],
            offset: l.start_offset(),
        }
    };
    let round_probs = match p.probs_dtype {
        Some(C::F16) => Some(ProbsRounding::F16),
        Some(C::BF16) => Some(ProbsRounding::Bf16),
        _ => None,
    };
    let kp = kernel::Params { scale: p.scale, causal: p.causal, window: p.window, softcap: p.softcap, round_probs };
    let out = kernel::attend(kp, &q[q_start..], [b, hq, tq, d], operand(k, l2), operand(v, l3), &CandlePool);
    Ok((CpuStorage::F32(out), Shape::from((b, hq, tq, dv))))
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
}
