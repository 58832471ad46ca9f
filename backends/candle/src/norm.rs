//! Fused normalizations (RMSNorm, LayerNorm) and rotary embeddings.

use candle_core::{CpuStorage, DType as C, Result, Storage, Tensor};
use half::{bf16, f16};
use infer_core::RopeLayout;

use infer_cpu_kernels::out_ptr::OutPtr;

/// f16/bf16 inputs are normalized in f32 (as the reference implementations do) and the result
/// is cast back; the weight is applied in f32 too.
fn compute_dtype(d: C) -> Result<C> {
    match d {
        C::F32 => Ok(C::F32),
        C::F16 | C::BF16 => Ok(C::F32),
        other => candle_core::bail!("normalization needs a float tensor, got {other:?}"),
    }
}

fn as_dtype(t: &Tensor, d: C) -> Result<Tensor> {
    crate::half_slices::to_dtype(t, d)
}

/// `x / sqrt(mean(x²) + eps) * weight` over the last dim.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    if let Some(y) = rms_rows(x, w, eps)? {
        return Ok(y);
    }
    let d = x.dtype();
    let cd = compute_dtype(d)?;
    let xc = as_dtype(x, cd)?.contiguous()?;
    let wc = as_dtype(w, cd)?.contiguous()?;
    let y = candle_nn::ops::rms_norm(&xc, &wc, eps)?;
    as_dtype(&y, d)
}

/// RMSNorm of a CPU x whose rows (its last dim) are contiguous, in any order (Qwen3's q/k norms
/// run on a transposed view), by a contiguous weight of x's dtype, computed as [`rms_norm`]'s
/// general path computes it (widen to f32, candle's f32 kernel: a sequential sum of squares,
/// `x / rms * weight`; round once), so the same bits, in one pass instead of three (the casts
/// and the copy to contiguous were 7% of a bf16 prefill's main thread). Rows are split across
/// candle's pool; the result is contiguous. `None` for other dtypes, layouts or devices.
fn rms_rows(x: &Tensor, w: &Tensor, eps: f32) -> Result<Option<Tensor>> {
    let n = x.dims().last().copied().unwrap_or(0);
    if n == 0 || w.dims() != [n] || !x.device().is_cpu() {
        return Ok(None);
    }
    let ((sx, lx), (sw, lw)) = (x.storage_and_layout(), w.storage_and_layout());
    let Some((w0, w1)) = lw.contiguous_offsets() else {
        return Ok(None);
    };
    let (dims, strides) = (lx.dims(), lx.stride());
    if n > 1 && strides[dims.len() - 1] != 1 {
        return Ok(None);
    }
    // Where row r (in x's logical order) starts in the storage.
    let outer = (&dims[..dims.len() - 1], &strides[..dims.len() - 1]);
    let start = lx.start_offset();
    let row_at = |mut r: usize| {
        let mut at = start;
        for (&d, &st) in outer.0.iter().zip(outer.1).rev() {
            at += (r % d) * st;
            r /= d;
        }
        at
    };
    let (shape, dev) = (x.shape(), x.device());
    let rows = x.elem_count() / n;
    let y = match (&*sx, &*sw) {
        (Storage::Cpu(CpuStorage::F32(v)), Storage::Cpu(CpuStorage::F32(a))) => {
            Tensor::from_vec(rms_apply(v, rows, row_at, &a[w0..w1], eps), shape, dev)?
        }
        (Storage::Cpu(CpuStorage::BF16(v)), Storage::Cpu(CpuStorage::BF16(a))) => {
            Tensor::from_vec(rms_apply(v, rows, row_at, &a[w0..w1], eps), shape, dev)?
        }
        (Storage::Cpu(CpuStorage::F16(v)), Storage::Cpu(CpuStorage::F16(a))) => {
            Tensor::from_vec(rms_apply(v, rows, row_at, &a[w0..w1], eps), shape, dev)?
        }
        _ => return Ok(None),
    };
    Ok(Some(y))
}

/// [`rms_rows`] on slices: `rows` rows of `w.len()` values, row r at `x[row_at(r)..]`.
fn rms_apply<E: RowElem + Default>(
    x: &[E],
    rows: usize,
    row_at: impl Fn(usize) -> usize + Sync,
    w: &[E],
    eps: f32,
) -> Vec<E> {
    let n = w.len();
    let w: Vec<f32> = w.iter().map(|v| v.widen()).collect();
    let mut out = vec![E::default(); rows * n];
    let dst = OutPtr(out.as_mut_ptr());
    let wide = crate::half_slices::has_avx512();
    let body = |range: std::ops::Range<usize>| {
        let mut xw = vec![0f32; SUM_ROWS * n];
        let mut sums = [0f32; SUM_ROWS];
        let mut r = range.start;
        while r < range.end {
            let rows = if wide && range.end - r >= SUM_ROWS { SUM_ROWS } else { 1 };
            for (j, xw) in xw.chunks_exact_mut(n).take(rows).enumerate() {
                let at = row_at(r + j);
                x[at..at + n].iter().zip(xw).for_each(|(v, d)| *d = v.widen());
            }
            if rows == SUM_ROWS {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX-512 (`wide`); xw holds SUM_ROWS rows of n values.
                unsafe {
                    sums_of_squares(&xw, n, &mut sums)
                };
            } else {
                // In order, as candle sums (a reordered sum would change the last bits).
                sums[0] = xw[..n].iter().map(|&v| v * v).sum::<f32>();
            }
            for (j, xw) in xw.chunks_exact(n).take(rows).enumerate() {
                let rms = (sums[j] / n as f32 + eps).sqrt();
                // SAFETY: row r + j's n values are written by this work item only, inside `out`.
                let o = unsafe { std::slice::from_raw_parts_mut(dst.at((r + j) * n), n) };
                o.iter_mut().zip(xw).zip(&w).for_each(|((o, &v), &a)| *o = E::narrow(v / rms * a));
            }
            r += rows;
        }
    };
    if rows * n < ROW_PARALLEL_MIN {
        body(0..rows);
    } else {
        candle_core::utils::barrier_pool().execute_chunked(rows, body);
    }
    out
}

/// Rows whose sums of squares [`sums_of_squares`] takes at once.
const SUM_ROWS: usize = 16;

/// `sums[j]` = Σ x² over row j of 16 rows of `n` values, each summed in order from `Sum`'s
/// zero, a rounded product then a rounded add per value, as the one-row loop does (so the same
/// bits): lane j carries row j's sum, the rows' values transposed 16 at a time. One row's
/// in-order sum is a chain of dependent adds (4 cycles each): 6% of a 1-thread bf16 prefill.
///
/// # Safety
/// The CPU has AVX-512 F; `xw` holds 16 · n values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sums_of_squares(xw: &[f32], n: usize, sums: &mut [f32; SUM_ROWS]) {
    use std::arch::x86_64::*;
    assert!(xw.len() >= SUM_ROWS * n);
    let mut acc = _mm512_set1_ps([0f32; 0].iter().sum::<f32>());
    let full = n / 16 * 16;
    let p = xw.as_ptr();
    for c in (0..full).step_by(16) {
        let mut rows = [_mm512_setzero_ps(); 16];
        for (j, v) in rows.iter_mut().enumerate() {
            // SAFETY: values c .. c + 16 of row j, inside xw (asserted).
            *v = unsafe { _mm512_loadu_ps(p.add(j * n + c)) };
        }
        for v in infer_cpu_kernels::x86::avx512::simd::transpose16(rows) {
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
        }
    }
    for e in full..n {
        let column: [f32; SUM_ROWS] = std::array::from_fn(|j| xw[j * n + e]);
        // SAFETY: reads the 16 values of `column`.
        let v = unsafe { _mm512_loadu_ps(column.as_ptr()) };
        acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
    }
    // SAFETY: writes the 16 values of `sums`.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), acc) };
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim (biased variance).
pub fn layer_norm(x: &Tensor, w: &Tensor, b: Option<&Tensor>, eps: f32) -> Result<Tensor> {
    let d = x.dtype();
    let cd = compute_dtype(d)?;
    let xc = as_dtype(x, cd)?.contiguous()?;
    let wc = as_dtype(w, cd)?.contiguous()?;
    let bc = match b {
        Some(b) => as_dtype(b, cd)?.contiguous()?,
        None => Tensor::zeros(wc.dims(), cd, wc.device())?,
    };
    let y = candle_nn::ops::layer_norm(&xc, &wc, &bc, eps)?;
    as_dtype(&y, d)
}

/// Rotary embedding of x (b, h, t, d) with cos/sin of shape (t', d/2), t' >= t (the first t
/// rows are used). Tables are cast to x's dtype; x is made contiguous if needed.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
    let (_b, _h, t, d) = x.dims4()?;
    if d % 2 != 0 {
        candle_core::bail!("rope needs an even head dim, got {d}");
    }
    let prep = |cs: &Tensor, name: &str| -> Result<Tensor> {
        let (rows, half) = cs.dims2()?;
        if half * 2 != d || rows < t {
            candle_core::bail!("{name} table {:?} does not fit x {:?} (want ({t}, {}))", cs.dims(), x.dims(), d / 2);
        }
        let cs = if rows > t { cs.narrow(0, 0, t)? } else { cs.clone() };
        as_dtype(&cs, x.dtype())?.contiguous()
    };
    let (cos, sin) = (prep(cos, "cos")?, prep(sin, "sin")?);
    let x = x.contiguous()?;
    if let Some(y) = rope_rows(&x, &cos, &sin, layout)? {
        return Ok(y);
    }
    match layout {
        RopeLayout::SplitHalf => candle_nn::rotary_emb::rope(&x, &cos, &sin),
        RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin),
    }
}

/// A float element the row kernels (RMSNorm, rotary embedding) read and write: widened to f32
/// exactly, rounded back to nearest (ties to even) as half's arithmetic rounds.
trait RowElem: Copy + Send + Sync + 'static {
    fn widen(self) -> f32;
    fn narrow(v: f32) -> Self;
    /// `v` rounded to this type and widened again (the identity for f32).
    fn round(v: f32) -> f32 {
        Self::narrow(v).widen()
    }
}

impl RowElem for f32 {
    fn widen(self) -> f32 {
        self
    }
    fn narrow(v: f32) -> f32 {
        v
    }
}

impl RowElem for bf16 {
    fn widen(self) -> f32 {
        crate::half_slices::widen_bf16(self)
    }
    fn narrow(v: f32) -> bf16 {
        crate::half_slices::round_bf16(v)
    }
}

impl RowElem for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

/// Longest head dim [`rope_rows`] takes (its row buffers live on the stack).
const ROPE_MAX_DIM: usize = 1024;

/// Rotary embedding of a contiguous CPU x (b, h, t, d) with contiguous (t, d/2) tables of its
/// dtype: the same operations as candle's kernel, in the same dtype (each product, and the sum
/// of two, rounded to x's dtype: what PyTorch's eager `q * cos + rotate_half(q) * sin` does in
/// bf16), so the same bits. candle runs them one value at a time through half's conversions
/// (12% of a bf16 prefill); here a row is widened once and the roundings vectorize. Rows are
/// split across candle's pool. `None` where x is not an f32/bf16/f16 CPU tensor of this form.
fn rope_rows(x: &Tensor, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Option<Tensor>> {
    let (_, _, t, d) = x.dims4()?;
    if d > ROPE_MAX_DIM || !x.device().is_cpu() {
        return Ok(None);
    }
    let (sx, lx) = x.storage_and_layout();
    let (sc, lc) = cos.storage_and_layout();
    let (ss, ls) = sin.storage_and_layout();
    let (Some(ox), Some(oc), Some(os)) = (lx.contiguous_offsets(), lc.contiguous_offsets(), ls.contiguous_offsets())
    else {
        return Ok(None);
    };
    let (shape, dev) = (x.shape(), x.device());
    let y = match (&*sx, &*sc, &*ss) {
        (Storage::Cpu(CpuStorage::F32(v)), Storage::Cpu(CpuStorage::F32(c)), Storage::Cpu(CpuStorage::F32(s))) => {
            Tensor::from_vec(rope_apply(&v[ox.0..ox.1], &c[oc.0..oc.1], &s[os.0..os.1], t, d, layout), shape, dev)?
        }
        (Storage::Cpu(CpuStorage::BF16(v)), Storage::Cpu(CpuStorage::BF16(c)), Storage::Cpu(CpuStorage::BF16(s))) => {
            Tensor::from_vec(rope_apply(&v[ox.0..ox.1], &c[oc.0..oc.1], &s[os.0..os.1], t, d, layout), shape, dev)?
        }
        (Storage::Cpu(CpuStorage::F16(v)), Storage::Cpu(CpuStorage::F16(c)), Storage::Cpu(CpuStorage::F16(s))) => {
            Tensor::from_vec(rope_apply(&v[ox.0..ox.1], &c[oc.0..oc.1], &s[os.0..os.1], t, d, layout), shape, dev)?
        }
        _ => return Ok(None),
    };
    Ok(Some(y))
}

/// [`rope_rows`] on slices: x holds rows of d values, row r at position r mod t; the tables
/// hold t rows of d/2.
fn rope_apply<E: RowElem + Default>(x: &[E], cos: &[E], sin: &[E], t: usize, d: usize, layout: RopeLayout) -> Vec<E> {
    let half = d / 2;
    let rows = x.len() / d;
    let mut out = vec![E::default(); x.len()];
    let dst = OutPtr(out.as_mut_ptr());
    // The tables are widened once: every head at a position reads the same row.
    let (cos, sin): (Vec<f32>, Vec<f32>) =
        (cos.iter().map(|v| v.widen()).collect(), sin.iter().map(|v| v.widen()).collect());
    #[cfg(target_arch = "x86_64")]
    let wide = crate::half_slices::has_avx512();
    let body = |range: std::ops::Range<usize>| {
        for r in range {
            let p = r % t;
            let (cw, sw) = (&cos[p * half..(p + 1) * half], &sin[p * half..(p + 1) * half]);
            // SAFETY: row r's d values are written by this work item only, inside `out`.
            let o = unsafe { std::slice::from_raw_parts_mut(dst.at(r * d), d) };
            let xr = &x[r * d..(r + 1) * d];
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: the CPU has AVX-512 F/BW (checked once by has_avx512).
                unsafe { rope_row_avx512(xr, cw, sw, layout, o) };
                continue;
            }
            rope_row(xr, cw, sw, layout, o)
        }
    };
    if rows * d < ROW_PARALLEL_MIN {
        body(0..rows);
    } else {
        candle_core::utils::barrier_pool().execute_chunked(rows, body);
    }
    out
}

/// One row of [`rope_apply`]: x's d values rotated by the position's (d/2) cos and sin into `o`.
#[inline(always)]
fn rope_row<E: RowElem>(x: &[E], cw: &[f32], sw: &[f32], layout: RopeLayout, o: &mut [E]) {
    use std::mem::MaybeUninit;
    let (d, half) = (x.len(), x.len() / 2);
    // Only the row's d values of the scratch are initialized: zeroing two 4 KB arrays per row
    // of 128 was most of the rotation's time (memset, 1.4% of a 1-thread bf16 prefill).
    let (mut xbuf, mut ybuf) =
        ([MaybeUninit::<f32>::uninit(); ROPE_MAX_DIM], [MaybeUninit::<f32>::uninit(); ROPE_MAX_DIM]);
    x.iter().zip(&mut xbuf[..d]).for_each(|(v, w)| {
        w.write(v.widen());
    });
    ybuf[..d].iter_mut().for_each(|w| {
        w.write(0.0);
    });
    // SAFETY: the first d values of both buffers were just written (d <= ROPE_MAX_DIM, checked
    // by the caller); MaybeUninit<f32> has f32's layout.
    let (xw, yw) = unsafe {
        (
            &*(&xbuf[..d] as *const [MaybeUninit<f32>] as *const [f32]),
            &mut *(&mut ybuf[..d] as *mut [MaybeUninit<f32>] as *mut [f32]),
        )
    };
    let r_ = E::round;
    match layout {
        RopeLayout::SplitHalf => {
            for (i, (&c, &s)) in cw.iter().zip(sw).enumerate() {
                let (a, b) = (xw[i], xw[i + half]);
                yw[i] = r_(r_(a * c) - r_(b * s));
                yw[i + half] = r_(r_(a * s) + r_(b * c));
            }
        }
        RopeLayout::Interleaved => {
            for (i, (&c, &s)) in cw.iter().zip(sw).enumerate() {
                let (a, b) = (xw[2 * i], xw[2 * i + 1]);
                yw[2 * i] = r_(r_(a * c) - r_(b * s));
                yw[2 * i + 1] = r_(r_(a * s) + r_(b * c));
            }
        }
    }
    o.iter_mut().zip(yw.iter()).for_each(|(o, &v)| *o = E::narrow(v));
}

/// [`rope_row`] compiled for AVX-512, where its roundings vectorize 16 lanes wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn rope_row_avx512<E: RowElem>(x: &[E], cw: &[f32], sw: &[f32], layout: RopeLayout, o: &mut [E]) {
    rope_row(x, cw, sw, layout, o)
}

/// Values below which one thread does the whole rotation or normalization.
const ROW_PARALLEL_MIN: usize = 1 << 14;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::half_slices::same_bits;

    /// The same bits as the general path (widen, candle's f32 kernel, round) for every float
    /// dtype, on one thread and split across the pool.
    #[test]
    fn rms_rows_match_the_general_path() {
        let dev = &candle_core::Device::Cpu;
        for (rows, n) in [(3, 8), (128, 1024), (40, 128), (37, 100), (18, 7)] {
            let x: Vec<f32> = (0..rows * n).map(|i| ((i * 7919 % 4099) as f32 - 2049.0) * 0.0031).collect();
            let w: Vec<f32> = (0..n).map(|i| 1.0 + ((i * 31 % 17) as f32 - 8.0) * 0.05).collect();
            let (x, w) = (Tensor::from_vec(x, (rows, n), dev).unwrap(), Tensor::from_vec(w, n, dev).unwrap());
            for dtype in [C::F32, C::BF16, C::F16] {
                let (x, w) = (x.to_dtype(dtype).unwrap(), w.to_dtype(dtype).unwrap());
                // Contiguous, and a transposed view of (2, rows / 2, n) as q/k norms see it.
                let xt =
                    x.narrow(0, 0, rows / 2 * 2).unwrap().reshape((rows / 2, 2, n)).unwrap().transpose(0, 1).unwrap();
                for x in [x.clone(), xt] {
                    let got = rms_rows(&x, &w, 1e-6).unwrap().expect("taken");
                    let (xc, wc) = (x.to_dtype(C::F32).unwrap().contiguous().unwrap(), w.to_dtype(C::F32).unwrap());
                    let want = candle_nn::ops::rms_norm(&xc, &wc, 1e-6).unwrap().to_dtype(dtype).unwrap();
                    assert_eq!(got.dims(), x.dims());
                    assert!(same_bits(&got, &want), "{dtype:?} {:?}", x.dims());
                }
            }
        }
    }

    /// The same bits as candle's kernel for every float dtype and both layouts, on one thread
    /// and split across the pool.
    #[test]
    fn rope_rows_match_candles_kernel() {
        let dev = &candle_core::Device::Cpu;
        for (b, h, t, d) in [(1, 2, 3, 8), (2, 16, 40, 128)] {
            let n = b * h * t * d;
            let x: Vec<f32> = (0..n).map(|i| ((i * 7919 % 4099) as f32 - 2049.0) * 0.0031).collect();
            let angles: Vec<f32> =
                (0..t * d / 2).map(|i| (i % (d / 2)) as f32 * 0.37 + (i / (d / 2)) as f32 * 0.11).collect();
            let x = Tensor::from_vec(x, (b, h, t, d), dev).unwrap();
            let a = Tensor::from_vec(angles, (t, d / 2), dev).unwrap();
            let (cos, sin) = (a.cos().unwrap(), a.sin().unwrap());
            for dtype in [C::F32, C::BF16, C::F16] {
                let (x, cos, sin) =
                    (x.to_dtype(dtype).unwrap(), cos.to_dtype(dtype).unwrap(), sin.to_dtype(dtype).unwrap());
                for layout in [RopeLayout::SplitHalf, RopeLayout::Interleaved] {
                    let got = rope_rows(&x, &cos, &sin, layout).unwrap().expect("taken");
                    let want = match layout {
                        RopeLayout::SplitHalf => candle_nn::rotary_emb::rope(&x, &cos, &sin).unwrap(),
                        RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin).unwrap(),
                    };
                    assert!(same_bits(&got, &want), "{dtype:?} {layout:?} {:?}", (b, h, t, d));
                }
            }
        }
    }
}
