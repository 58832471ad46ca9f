//! Scaled dot-product attention: grouped-query, causal with an offset, sliding window, additive
//! mask, logit soft-capping. Scores and softmax are computed in f32.
//!
//! K and V are never copied per query head: q (b, hkv·rep, tq, d) is viewed as
//! (b, hkv, rep·tq, d) so each KV head meets all its query heads in one batched matmul against
//! the strided view kᵀ (a KV cache's narrowed buffer is read in place).
//! Without an additive mask the whole computation is one op on the backend's thread pool
//! ([`crate::fused_attention`]); with a mask, long prefills are split into query blocks
//! (bounding the score buffer to 16 MiB). Either way a block of queries only reads the keys it
//! can see (causal upper bound, window lower bound).

use std::sync::OnceLock;

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType as C, Layout, Result, Shape, Tensor};

use crate::gemv::Widen;
pub(crate) use infer_cpu_kernels::attention::{product_widened, softmax_row, Visibility};
use infer_cpu_kernels::out_ptr::OutPtr;
use infer_cpu_kernels::thin_product::{self, View};

/// Score elements per query block (f32): 16 MiB (measured: 1.8x faster than 64 MiB for a
/// 1024-token causal prefill, which also lets causal blocks skip the keys they cannot see).
pub const BLOCK_ELEMS: usize = 1 << 22;
/// Below this many score elements the softmax runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 15;

#[derive(Debug, Clone, Copy)]
pub struct AttnParams {
    pub scale: f32,
    pub causal: bool,
    pub window: usize,
    pub softcap: f32,
    /// Round the probabilities to this dtype before they multiply v (set for a cache stored in
    /// another dtype than q's).
    pub probs_dtype: Option<C>,
}

fn to_f32(t: &Tensor) -> Result<Tensor> {
    match t.dtype() {
        C::F32 => Ok(t.clone()),
        C::F16 | C::BF16 => crate::half_slices::to_dtype(t, C::F32),
        other => candle_core::bail!("attention needs float tensors, got {other:?}"),
    }
}

/// Whether candle's batched matmul can read a rank-4 operand's batch dims without a copy.
fn batch_strides_ok(t: &Tensor) -> bool {
    let (s, d) = (t.stride(), t.dims());
    s[0] == s[1] * d[1] || d[0] == 1 || d[1] == 1
}

fn matmul_ready(t: Tensor) -> Result<Tensor> {
    if batch_strides_ok(&t) {
        Ok(t)
    } else {
        t.contiguous()
    }
}

/// q (b,hq,tq,d), k (b,hkv,tk,d), v (b,hkv,tk,dv), mask broadcastable to (b,hq,tq,tk)
/// -> (b,hq,tq,dv) in q's dtype.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, p: AttnParams) -> Result<Tensor> {
    attention_with(q, k, v, mask, p, None)
}

/// [`attention`] through the op-by-op path (batched products, then the softmax over a whole
/// block) with query blocks of at most `block_elems` score elements, mask or not. Public for
/// the benchmark that sets it against the fused op (benches/attention.rs).
pub fn attention_blocked(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    p: AttnParams,
    block_elems: usize,
) -> Result<Tensor> {
    attention_with(q, k, v, mask, p, Some(block_elems))
}

/// `block_elems`: `None` picks the fused op when there is no mask, else the op-by-op path with
/// blocks of [`BLOCK_ELEMS`].
fn attention_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    p: AttnParams,
    block_elems: Option<usize>,
) -> Result<Tensor> {
    let (b, hq, tq, d) = q.dims4()?;
    let (bk, hkv, tk, dk) = k.dims4()?;
    let (bv, hv, tv, _dv) = v.dims4()?;
    if bk != b || bv != b || hv != hkv || tv != tk || dk != d {
        candle_core::bail!("q {:?}, k {:?}, v {:?} do not fit together", q.dims(), k.dims(), v.dims());
    }
    if hkv == 0 || hq % hkv != 0 {
        candle_core::bail!("{hq} query heads are not a multiple of {hkv} kv heads");
    }
    if p.causal && tq > tk {
        candle_core::bail!("causal attention with more queries ({tq}) than keys ({tk})");
    }
    let float = |d: C| matches!(d, C::F32 | C::F16 | C::BF16);
    if k.dtype() != v.dtype() || !float(q.dtype()) || !float(k.dtype()) {
        candle_core::bail!(
            "q, k, v must be float with k and v alike: {:?}, {:?}, {:?}",
            q.dtype(),
            k.dtype(),
            v.dtype()
        );
    }
    let out_dtype = q.dtype();
    if tq == 0 {
        return Tensor::zeros((b, hq, 0, v.dim(3)?), out_dtype, q.device());
    }
    // A cache in another dtype than q's (f16 keys and values): both products take their inputs
    // at the cache's precision, as a half-precision matmul would (llama.cpp's f16 cache does).
    let cache_dtype = (k.dtype() != q.dtype()).then_some(k.dtype());
    let q = match cache_dtype {
        Some(d) => &q.to_dtype(d)?,
        None => q,
    };
    let p = AttnParams { probs_dtype: cache_dtype, ..p };
    // Decode-shaped calls (every block's products thin: the query heads of one KV head at a
    // few positions) read a half-precision cache in place with the f32 arithmetic of its widened
    // copy (same bits), whether q is f32 or of the cache's dtype. Widening the whole cache view on
    // every step cost more than the attention itself: Qwen2.5 0.5B decode at 2048 tokens ran at
    // half the f32 cache's speed, and Voxtral Realtime's streaming encoder (bf16 q and cache)
    // spent 7% of its time widening its window.
    let thin = (hq / hkv) * tq <= thin_product::MAX_ROWS;
    // The fused op for prompts the op-by-op path would cut into several blocks (where the
    // serial work it removes is large). Its gemm calls split the keys differently, so sums
    // differ in the last bits: gguf_parity's 1531-token Gemma 3 prompt moves the worst
    // near-tie gap 0.214 -> 0.267 (agreement unchanged). Short prompts keep the op-by-op path's
    // exact numbers. Decode-shaped calls with several KV heads take the fused op too, which
    // hands the (batch, KV head) pairs to the pool (the op-by-op path ran them on one thread):
    // the same thin kernels per row and the same softmax, so the same bits. So do those of one
    // KV head at depth, whose products the fused op splits over the pool.
    let split_at_depth = tk >= crate::fused_attention::SPLIT_MIN_KEYS;
    let fused = mask.is_none()
        && block_elems.is_none()
        && (b * hq * tq * tk > BLOCK_ELEMS || (thin && (b * hkv > 1 || split_at_depth)));
    // bf16 prompts on AMX tiles (probabilities rounded to bf16 before they meet v).
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if mask.is_none() && block_elems.is_none() && !fused && !thin {
        if let Some(out) = crate::amx_attention::try_attend(q, k, v, p)? {
            return Ok(out);
        }
    }
    let in_place = matches!(k.dtype(), C::BF16 | C::F16) && thin;
    let widen = |t: &Tensor| if in_place { Ok(t.clone()) } else { to_f32(t) };
    let (qf, kf, vf) = (to_f32(q)?, matmul_ready(widen(k)?)?, matmul_ready(widen(v)?)?);
    if fused {
        let out = crate::fused_attention::attend(&qf.contiguous()?, &kf, &vf, p)?;
        return crate::half_slices::to_dtype(&out, out_dtype);
    }
    let block_elems = block_elems.unwrap_or(BLOCK_ELEMS);

    // The mask as rank 4, each dim 1 or full.
    let mask = match mask {
        None => None,
        Some(m) => {
            if !matches!(m.dtype(), C::F32 | C::F16 | C::BF16) {
                candle_core::bail!("the attention mask is additive and must be float, got {:?}", m.dtype());
            }
            if m.rank() > 4 {
                candle_core::bail!("mask {:?} has rank > 4", m.dims());
            }
            let mut dims = vec![1usize; 4 - m.rank()];
            dims.extend_from_slice(m.dims());
            for (got, full) in dims.iter().zip([b, hq, tq, tk]) {
                if *got != 1 && *got != full {
                    candle_core::bail!("mask {:?} does not broadcast to {:?}", m.dims(), [b, hq, tq, tk]);
                }
            }
            Some(to_f32(m)?.reshape(dims)?)
        }
    };

    let row_elems = (b * hq * tk).max(1);
    let block = (block_elems / row_elems).clamp(1, tq.max(1));
    let mut outs = Vec::with_capacity(tq.div_ceil(block));
    let mut s = 0;
    while s < tq {
        let c = block.min(tq - s);
        outs.push(attend_block(&qf, &kf, &vf, mask.as_ref(), s, c, hkv, p)?);
        s += c;
    }
    let out = if outs.len() == 1 { outs.pop().expect("one block") } else { Tensor::cat(&outs, 2)? };
    crate::half_slices::to_dtype(&out, out_dtype)
}

/// Queries `q_start .. q_start + c` of q against the keys they can see.
#[allow(clippy::too_many_arguments)]
fn attend_block(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    q_start: usize,
    c: usize,
    hkv: usize,
    p: AttnParams,
) -> Result<Tensor> {
    let (b, hq, tq, d) = q.dims4()?;
    let (_, _, tk, _) = k.dims4()?;
    let dv = v.dim(3)?;
    let rep = hq / hkv;
    // Absolute positions of the block's first and last query.
    let first = tk - tq.min(tk) + q_start;
    let last = first + c - 1;
    let k_hi = if p.causal { (last + 1).min(tk) } else { tk };
    let k_lo = if p.window > 0 { (first + 1).saturating_sub(p.window).min(k_hi) } else { 0 };
    let nk = k_hi - k_lo;

    let qb = if c == tq { q.clone() } else { q.narrow(2, q_start, c)? };
    // affine writes a fresh contiguous tensor: the (b, hkv, rep·c, d) view is then free.
    let qb = qb.affine(p.scale as f64, 0.0)?.reshape((b, hkv, rep * c, d))?;
    let kb = if nk == tk { k.clone() } else { k.narrow(2, k_lo, nk)? };
    let vb = if nk == tk { v.clone() } else { v.narrow(2, k_lo, nk)? };
    // Absolute position of query 0 of the block, relative to key k_lo.
    let vis = Visibility { c, nk, first: first as isize - k_lo as isize, causal: p.causal, window: p.window };
    let mut scores = bmm(&qb, &kb.t()?)?; // (b, hkv, rep·c, nk)

    let mut softcap = p.softcap;
    if let Some(m) = mask {
        if softcap > 0.0 {
            scores = ((scores / softcap as f64)?.tanh()? * softcap as f64)?;
            softcap = 0.0;
        }
        let md = m.dims().to_vec();
        let m = if md[2] == tq && c != tq { m.narrow(2, q_start, c)? } else { m.clone() };
        let m = if md[3] == tk && nk != tk { m.narrow(3, k_lo, nk)? } else { m };
        let mq = m.dim(2)?;
        let mk = m.dim(3)?;
        let m5 = if md[1] == 1 {
            m.reshape((md[0], 1, 1, mq, mk))?
        } else {
            m.contiguous()?.reshape((md[0], hkv, rep, mq, mk))?
        };
        scores = scores.reshape((b, hkv, rep, c, nk))?.broadcast_add(&m5)?.reshape((b, hkv, rep * c, nk))?;
    }

    let op = MaskedSoftmax { vis, softcap };
    let mut probs = scores.contiguous()?.apply_op1_no_bwd(&op)?;
    if let Some(d) = p.probs_dtype {
        probs = crate::half_slices::to_dtype(&crate::half_slices::to_dtype(&probs, d)?, C::F32)?;
    }
    let out = bmm(&probs, &vb)?; // (b, hkv, rep·c, dv)
    out.reshape((b, hq, c, dv))
}

/// `a @ b` for rank-4 f32 `a` (b0, b1, m, k) and `b` (b0, b1, k, n), strided views included.
/// A few rows (decode: the query heads of one KV head) are multiplied in place by
/// [`thin_product`]; more get the gemm call candle's CPU matmul makes for each batch, with the
/// same arguments (so the same result), minus candle's per-call thread count lookup, which on
/// Linux re-reads /proc/cpuinfo (`num_cpus::get_physical`) on every matmul.
fn bmm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.apply_op2_no_bwd(b, &Bmm)
}

struct Bmm;

/// candle's gemm parallelism (`Rayon(threads)` when more than one thread), looked up once.
pub(crate) fn gemm_parallelism() -> gemm::Parallelism {
    static THREADS: OnceLock<usize> = OnceLock::new();
    match *THREADS.get_or_init(candle_core::utils::get_num_threads) {
        n if n > 1 => gemm::Parallelism::Rayon(n),
        _ => gemm::Parallelism::None,
    }
}

impl CustomOp2 for Bmm {
    fn name(&self) -> &'static str {
        "infer-bmm"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(a) = s1 else { candle_core::bail!("bmm wants an f32 left operand") };
        match s2 {
            CpuStorage::F32(b) => bmm_cpu(a, l1, b, l2),
            CpuStorage::F16(b) => bmm_cpu(a, l1, b, l2),
            CpuStorage::BF16(b) => bmm_cpu(a, l1, b, l2),
            _ => candle_core::bail!("bmm wants an f32, f16 or bf16 right operand"),
        }
    }
}

/// [`Bmm`] with the right operand in f32 or as a half-precision cache is stored.
fn bmm_cpu<T: Widen>(a: &[f32], l1: &Layout, b: &[T], l2: &Layout) -> Result<(CpuStorage, Shape)> {
    let (&[b0, b1, m, k], &[c0, c1, k2, n]) = (l1.dims(), l2.dims()) else {
        candle_core::bail!("bmm wants rank-4 operands, got {:?} and {:?}", l1.dims(), l2.dims())
    };
    if (b0, b1, k) != (c0, c1, k2) {
        candle_core::bail!("bmm of {:?} and {:?}", l1.dims(), l2.dims());
    }
    let (sa, sb) = (l1.stride(), l2.stride());
    let mut dst = vec![0f32; b0 * b1 * m * n];
    if m * n > 0 && k > 0 {
        let par = gemm_parallelism();
        for i in 0..b0 {
            for j in 0..b1 {
                let ao = l1.start_offset() + i * sa[0] + j * sa[1];
                let bo = l2.start_offset() + i * sb[0] + j * sb[1];
                let d = &mut dst[(i * b1 + j) * m * n..];
                let va = View { data: &a[ao..], row_stride: sa[2], col_stride: sa[3] };
                let vb = View { data: &b[bo..], row_stride: sb[2], col_stride: sb[3] };
                product_widened(m, n, k, va, vb, d, par);
            }
        }
    }
    Ok((CpuStorage::F32(dst), Shape::from((b0, b1, m, n))))
}

/// Row-wise softcap + causal / window masking + softmax over the last dim of contiguous f32
/// scores.
struct MaskedSoftmax {
    vis: Visibility,
    softcap: f32,
}

impl MaskedSoftmax {
    fn row(&self, i: usize, src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
        softmax_row(&self.vis, self.softcap, i, dst);
    }
}

impl CustomOp1 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "infer-masked-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let src = match (storage, layout.contiguous_offsets()) {
            (CpuStorage::F32(v), Some((a, z))) => &v[a..z],
            _ => candle_core::bail!("masked softmax wants contiguous f32 scores"),
        };
        let n = self.vis.nk;
        let total = src.len();
        let mut dst = vec![0f32; total];
        if n == 0 {
            return Ok((CpuStorage::F32(dst), layout.shape().clone()));
        }
        let rows = total / n;
        if total < PARALLEL_MIN {
            for (r, (s, d)) in src.chunks_exact(n).zip(dst.chunks_exact_mut(n)).enumerate() {
                self.row(r % self.vis.c, s, d);
            }
        } else {
            let out = OutPtr(dst.as_mut_ptr());
            candle_core::utils::barrier_pool().execute_chunked(rows, |range| {
                let out = &out;
                for r in range {
                    // SAFETY: each row index is handed to exactly one worker; rows do not overlap.
                    let d = unsafe { std::slice::from_raw_parts_mut(out.0.add(r * n), n) };
                    self.row(r % self.vis.c, &src[r * n..(r + 1) * n], d);
                }
            });
        }
        Ok((CpuStorage::F32(dst), layout.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_inputs::tensor as rand;

    /// The direct gemm call gives candle's matmul bit for bit, strided views included; the thin
    /// product (few rows) agrees to f32 rounding.
    #[test]
    fn bmm_matches_candle_matmul() {
        let bits = |t: &Tensor| {
            t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let max_diff = |a: &Tensor, b: &Tensor| {
            (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
        };
        let kv = rand(&[2, 3, 40, 16], 6);
        // A cache-like view: keys 4..33 of a longer buffer, transposed.
        let k = kv.narrow(2, 4, 29).unwrap();
        for rows in [5, thin_product::MAX_ROWS + 3] {
            let q = rand(&[2, 3, rows, 16], 5);
            let p = rand(&[2, 3, rows, 29], 7);
            let (scores, want_scores) = (bmm(&q, &k.t().unwrap()).unwrap(), q.matmul(&k.t().unwrap()).unwrap());
            let (out, want_out) = (bmm(&p, &k).unwrap(), p.matmul(&k).unwrap());
            assert_eq!(scores.dims(), want_scores.dims());
            assert_eq!(out.dims(), want_out.dims());
            if rows > thin_product::MAX_ROWS {
                assert_eq!(bits(&scores), bits(&want_scores));
                assert_eq!(bits(&out), bits(&want_out));
            } else {
                assert!(max_diff(&scores, &want_scores) < 1e-5);
                assert!(max_diff(&out, &want_out) < 1e-5);
            }
        }
    }

    /// A half-precision right operand (an f16 / bf16 cache) gives the bits of its f32 copy, on
    /// the thin path (read in place) and the gemm one (widened first).
    #[test]
    fn bmm_of_half_operands_equals_their_f32_copies() {
        let bits = |t: &Tensor| {
            t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        for dtype in [C::F16, C::BF16] {
            let kv = rand(&[2, 3, 40, 16], 6).to_dtype(dtype).unwrap();
            let k = kv.narrow(2, 4, 29).unwrap();
            let kf = k.to_dtype(C::F32).unwrap();
            for rows in [5, thin_product::MAX_ROWS + 3] {
                let q = rand(&[2, 3, rows, 16], 5);
                let p = rand(&[2, 3, rows, 29], 7);
                let scores = bmm(&q, &k.t().unwrap()).unwrap();
                assert_eq!(bits(&scores), bits(&bmm(&q, &kf.t().unwrap()).unwrap()), "{dtype:?} {rows} rows");
                assert_eq!(bits(&bmm(&p, &k).unwrap()), bits(&bmm(&p, &kf).unwrap()), "{dtype:?} {rows} rows");
            }
        }
    }

    /// bf16 prompts on AMX tiles agree with the f32 path on the same bf16 values to the
    /// probabilities' and the output's bf16 rounding (2^-8 relative each).
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn amx_prompts_match_the_f32_path() {
        if crate::half_gemm::best_kernel() != crate::half_gemm::HalfKernel::Amx {
            eprintln!("skipped: no AMX tiles for this process");
            return;
        }
        for (b, hq, hkv, tq, tk, d) in [(1, 16, 8, 128, 128, 128), (2, 4, 1, 40, 70, 64), (1, 6, 2, 33, 33, 80)] {
            let q = rand(&[b, hq, tq, d], 1).to_dtype(C::BF16).unwrap();
            let kbuf = rand(&[b, hkv, tk + 5, d], 2).to_dtype(C::BF16).unwrap();
            let vbuf = rand(&[b, hkv, tk + 5, d], 3).to_dtype(C::BF16).unwrap();
            let (k, v) = (kbuf.narrow(2, 0, tk).unwrap(), vbuf.narrow(2, 0, tk).unwrap());
            for (causal, window, softcap) in [(true, 0, 0.0), (true, 16, 0.0), (false, 0, 4.0)] {
                let p = AttnParams { scale: 0.125, causal, window, softcap, probs_dtype: None };
                let got = attention(&q, &k, &v, None, p).unwrap();
                assert_eq!(got.dtype(), C::BF16);
                let want = attention_blocked(&q, &k, &v, None, p, usize::MAX).unwrap();
                let (g, w) = (got.to_dtype(C::F32).unwrap(), want.to_dtype(C::F32).unwrap());
                let diff = (&g - &w).unwrap().abs().unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let vmax = v
                    .to_dtype(C::F32)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .max(0)
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap();
                let worst = diff.iter().fold(0f32, |m, &x| if x.is_nan() { f32::INFINITY } else { m.max(x) });
                assert!(
                    worst <= 2.0 * vmax / 256.0,
                    "{:?} causal {causal} window {window}: {worst} (|v| <= {vmax})",
                    q.dims()
                );
            }
        }
    }

    /// Query blocks (and the key ranges each block reads) give the same result as one block.
    #[test]
    fn query_blocks_match_one_block() {
        let (b, hq, hkv, tq, tk, d) = (1, 4, 2, 9, 13, 8);
        let q = rand(&[b, hq, tq, d], 1);
        let k = rand(&[b, hkv, tk, d], 2);
        let v = rand(&[b, hkv, tk, d], 3);
        let mask = rand(&[1, hq, tq, tk], 4);
        for (causal, window, softcap, with_mask) in [
            (true, 0, 0.0, false),
            (true, 4, 0.0, false),
            (true, 3, 2.0, true),
            (false, 0, 0.0, true),
            (false, 5, 0.0, false),
        ] {
            let p = AttnParams { scale: 0.5, causal, window, softcap, probs_dtype: None };
            let m = with_mask.then_some(&mask);
            let one = attention_blocked(&q, &k, &v, m, p, usize::MAX).unwrap();
            for rows in [1, 2, 4] {
                let blocked = attention_blocked(&q, &k, &v, m, p, rows * b * hq * tk).unwrap();
                let diff = (&one - &blocked).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(diff < 1e-6, "causal {causal} window {window} rows {rows}: {diff}");
            }
        }
    }
}
