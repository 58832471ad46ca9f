//! The slice kernels of scaled dot-product attention: which keys a query sees
//! ([`Visibility`]), the masked softmax of one row of scores ([`softmax_row`]; 16 lanes at a
//! time in `x86/avx512/softmax.rs`), and the products of strided views ([`product`],
//! [`product_widened`]: [`crate::thin_product`] for a few rows, else one gemm call with the
//! arguments candle's CPU matmul passes, so candle's result). A backend's attention op walks
//! batches, heads and query blocks over these.

use crate::gemv::Widen;
use crate::thin_product::{self, View};

/// Which keys each query of a block sees: rows of scores are (…, rep, c) queries by `nk` keys.
#[derive(Debug, Clone, Copy)]
pub struct Visibility {
    /// Queries in the block.
    pub c: usize,
    /// Keys the block reads.
    pub nk: usize,
    /// Absolute position of the block's query 0, relative to its first key.
    pub first: isize,
    pub causal: bool,
    pub window: usize,
}

impl Visibility {
    /// Visible keys [lo, hi) of query `i` of the block: j <= pos when causal, j > pos - window
    /// when window > 0.
    pub fn range(&self, i: usize) -> (usize, usize) {
        let pos = self.first + i as isize;
        let hi = if self.causal { (pos + 1).clamp(0, self.nk as isize) as usize } else { self.nk };
        let lo = if self.window > 0 { (pos + 1 - self.window as isize).clamp(0, hi as isize) as usize } else { 0 };
        (lo, hi)
    }
}

/// Softcap, causal / window masking and softmax of query `i`'s scores, in place.
pub fn softmax_row(vis: &Visibility, softcap: f32, i: usize, row: &mut [f32]) {
    let (lo, hi) = vis.range(i);
    if lo >= hi {
        // No visible key: PyTorch yields NaN for an all -inf row.
        row.fill(f32::NAN);
        return;
    }
    row[..lo].fill(0.0);
    row[hi..].fill(0.0);
    let d = &mut row[lo..hi];
    #[cfg(target_arch = "x86_64")]
    if softcap == 0.0 && crate::half_slices::has_avx512() {
        // SAFETY: the CPU has AVX-512 F (checked).
        return unsafe { crate::x86::avx512::softmax::softmax(d) };
    }
    let mut max = f32::NEG_INFINITY;
    if softcap > 0.0 {
        for o in d.iter_mut() {
            let y = softcap * (*o / softcap).tanh();
            *o = y;
            max = max.max(y);
        }
    } else {
        for &x in d.iter() {
            max = max.max(x);
        }
    }
    let mut sum = 0f32;
    for o in d.iter_mut() {
        let e = (*o - max).exp();
        *o = e;
        sum += e;
    }
    let inv = 1.0 / sum;
    for o in d.iter_mut() {
        *o *= inv;
    }
}

/// `dst (m × n, row-major) = a (m × k) @ b (k × n)` for strided views: [`thin_product`] for a
/// few rows, else one gemm call with candle's matmul arguments (so candle's result).
pub fn product(m: usize, n: usize, k: usize, a: View, b: View, dst: &mut [f32], par: gemm::Parallelism) {
    let dst = &mut dst[..m * n];
    if m * n == 0 || k == 0 {
        dst.fill(0.0);
        return;
    }
    if thin_product::try_product(m, n, k, a, b, dst) {
        return;
    }
    // SAFETY: the views hold every element (r, c) at r·rs + c·cs the shapes imply (the
    // callers' contract, as for `thin_product`); `dst` holds m × n row-major values.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    }
}

/// [`product`] with `b` in any [`Widen`] type: the thin product reads it in place; gemm reads an
/// f32 view in place (attention's widened keys and values: copying them element by element with
/// a division each was 5% of a bf16 prefill's main thread) and gets an f32 copy of a half view.
pub fn product_widened<T: Widen>(
    m: usize,
    n: usize,
    k: usize,
    a: View,
    b: View<T>,
    dst: &mut [f32],
    par: gemm::Parallelism,
) {
    let dst = &mut dst[..m * n];
    if m * n == 0 || k == 0 {
        dst.fill(0.0);
    } else if !thin_product::try_product(m, n, k, a, b, dst) {
        if let Some(data) = T::as_f32(b.data) {
            return product(m, n, k, a, View { data, row_stride: b.row_stride, col_stride: b.col_stride }, dst, par);
        }
        let mut wide = Vec::with_capacity(k * n);
        for r in 0..k {
            let row = &b.data[r * b.row_stride..];
            wide.extend((0..n).map(|c| row[c * b.col_stride].widen()));
        }
        product(m, n, k, a, View { data: &wide, row_stride: n, col_stride: 1 }, dst, par);
    }
}
