//! Attention of bf16 q, k and v on AMX tiles, for prompts (more query rows per KV head than a
//! thin product takes) that fit one block of scores: per (batch, KV head), `q · kᵀ` with exact
//! bf16 products summed in f32, the scaled and masked softmax in f32, the probabilities rounded
//! to bf16 (as PyTorch's CPU flash attention rounds them for its second product) and `p · v`
//! rounded once to bf16. The f32 path widened q, k and v, multiplied them with f32 gemm and
//! narrowed the output: 10% of a 1-thread bf16 prefill.

use candle_core::{DType as C, Result, Storage, Tensor};
use half::bf16;

use crate::attention::{softmax_row, AttnParams, Visibility};
use crate::half_gemm::{self, amx, HalfKernel};

/// q (b, hq, tq, d), k (b, hkv, tk, d), v (b, hkv, tk, dv), all bf16 on the CPU, causal /
/// window / soft-cap as `p` (no mask, no probability rounding to another dtype) -> (b, hq, tq, dv)
/// bf16; `None` where this path does not apply (another dtype, no AMX).
pub fn try_attend(q: &Tensor, k: &Tensor, v: &Tensor, p: AttnParams) -> Result<Option<Tensor>> {
    if [q, k, v].iter().any(|t| t.dtype() != C::BF16 || !t.device().is_cpu())
        || p.probs_dtype.is_some()
        || half_gemm::best_kernel() != HalfKernel::Amx
    {
        return Ok(None);
    }
    let (b, hq, tq, d) = q.dims4()?;
    let (_, hkv, tk, _) = k.dims4()?;
    let dv = v.dim(3)?;
    let rep = hq / hkv;
    let q = q.contiguous()?;
    // Keys as (tk, d) rows of each (batch, KV head), read in place from a cache view whose
    // rows are contiguous, and values transposed to (dv, tk): the tiles' weight operand is
    // row-major.
    let k = if k.stride()[2..] == [d, 1] { k.clone() } else { k.contiguous()? };
    let vt = v.transpose(2, 3)?.contiguous()?;
    let (sq, lq) = q.storage_and_layout();
    let (sk, lk) = k.storage_and_layout();
    let (sv, lv) = vt.storage_and_layout();
    let (Storage::Cpu(cq), Storage::Cpu(ck), Storage::Cpu(cv)) = (&*sq, &*sk, &*sv) else { return Ok(None) };
    let (Ok(qs), Ok(ks), Ok(vs)) = (cq.as_slice::<bf16>(), ck.as_slice::<bf16>(), cv.as_slice::<bf16>()) else {
        return Ok(None);
    };
    let (qs, ks, vs) = (&qs[lq.start_offset()..], &ks[lk.start_offset()..], &vs[lv.start_offset()..]);
    let sk = lk.stride();
    let m = rep * tq;
    let vis = Visibility { c: tq, nk: tk, first: tk as isize - tq as isize, causal: p.causal, window: p.window };
    let mut out = vec![bf16::ZERO; b * hq * tq * dv];
    let mut scores = vec![0f32; m * tk];
    let mut probs = vec![bf16::ZERO; m * tk];
    for g in 0..b * hkv {
        let qg = &qs[g * m * d..(g + 1) * m * d];
        let k0 = (g / hkv) * sk[0] + (g % hkv) * sk[1];
        amx::product(&ks[k0..k0 + tk * d], qg, m, tk, d, &crate::pool::CandlePool, &mut scores);
        for (r, row) in scores.chunks_exact_mut(tk).enumerate() {
            row.iter_mut().for_each(|s| *s *= p.scale);
            softmax_row(&vis, p.softcap, r % tq, row);
        }
        <bf16 as crate::half_slices::HalfElem>::narrow_into(&scores, &mut probs);
        amx::product(
            &vs[g * dv * tk..(g + 1) * dv * tk],
            &probs,
            m,
            dv,
            tk,
            &crate::pool::CandlePool,
            &mut out[g * m * dv..(g + 1) * m * dv],
        );
    }
    Tensor::from_vec(out, (b, hq, tq, dv), q.device()).map(Some)
}
