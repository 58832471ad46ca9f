//! Products with a handful of left rows, as decode attention makes them: the query heads sharing a
//! KV head (one row each) against the cache, `q @ kᵀ` then `p @ v`. gemm packs the right operand
//! (the whole cache view) on every call, which at decode costs several times the arithmetic;
//! here the cache is read in place: keys as contiguous rows dotted with each query, values as
//! contiguous rows accumulated into each output row. The right operand may be a half-precision
//! cache, read as it is stored (see [`Widen`]).

use crate::gemv::Widen;

/// Largest number of left rows handled here.
pub const MAX_ROWS: usize = 16;

/// A strided matrix view (f32 unless said): element (r, c) at
/// `data[r * row_stride + c * col_stride]`.
pub struct View<'a, T = f32> {
    pub data: &'a [T],
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<T> Clone for View<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for View<'_, T> {}

impl<T> View<'_, T> {
    /// Row `r`'s first `len` elements when they are contiguous.
    fn row(&self, r: usize, len: usize) -> &[T] {
        &self.data[r * self.row_stride..r * self.row_stride + len]
    }

    /// Column `c`'s first `len` elements when they are contiguous (`row_stride == 1`).
    fn col(&self, c: usize, len: usize) -> &[T] {
        &self.data[c * self.col_stride..c * self.col_stride + len]
    }
}

/// Whether [`try_product`] computes a product of these shapes and views (whatever `n`): each
/// output element then comes from the same arithmetic whichever columns are computed with it.
pub fn accepts<T>(m: usize, k: usize, a: &View, b: &View<T>) -> bool {
    m <= MAX_ROWS && (a.col_stride == 1 || k <= 1) && (b.row_stride == 1 || k == 1 || b.col_stride == 1)
}

/// `dst (m × n, row-major) = a (m × k) @ b (k × n)` when `a`'s rows are contiguous and `b` has a
/// unit stride in either direction; `false` (nothing written) otherwise, or when `m` exceeds
/// [`MAX_ROWS`]. The views must hold every element the shapes imply.
pub fn try_product<T: Widen>(m: usize, n: usize, k: usize, a: View, b: View<T>, dst: &mut [f32]) -> bool {
    if !accepts(m, k, &a, &b) {
        return false;
    }
    let dst = &mut dst[..m * n];
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::features().avx512() && m * n * k > 0 {
        if b.row_stride == 1 && k.is_multiple_of(16) {
            // SAFETY: AVX-512 F is present; the views' contract is the caller's.
            unsafe { crate::x86::avx512::thin_product::scores(m, n, k, a, b, dst) };
            return true;
        }
        if b.col_stride == 1 && n >= 16 {
            // SAFETY: as above.
            unsafe { crate::x86::avx512::thin_product::accumulate(m, n, k, a, b, dst) };
            return true;
        }
    }
    if b.row_stride == 1 || k == 1 {
        // Columns of b are contiguous (kᵀ of a cache): one dot product per output element.
        for j in 0..n {
            let col = b.col(j, k);
            for i in 0..m {
                dst[i * n + j] = T::dot_widened(col, a.row(i, k));
            }
        }
        true
    } else if b.col_stride == 1 {
        // Rows of b are contiguous (v of a cache): each output row accumulates b's rows.
        for (i, out) in dst.chunks_exact_mut(n.max(1)).enumerate() {
            out.fill(0.0);
            let coefs = a.row(i, k);
            for (kk, &c) in coefs.iter().enumerate() {
                T::axpy_widened(c, b.row(kk, n), out);
            }
        }
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0).collect()
    }

    fn naive(m: usize, n: usize, k: usize, a: View, b: View) -> Vec<f32> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for kk in 0..k {
                    out[i * n + j] += a.data[i * a.row_stride + kk * a.col_stride] as f64
                        * b.data[kk * b.row_stride + j * b.col_stride] as f64;
                }
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }

    /// Both layouts of b (transposed cache keys, cache values) against an f64 reference, for
    /// sizes that are and are not multiples of the vector width.
    #[test]
    fn both_layouts_match_a_reference() {
        for (m, n, k) in [(1, 7, 5), (4, 33, 256), (7, 64, 19), (16, 3, 64), (2, 1, 1)] {
            let a_data = values(m * k, 1);
            let a = View { data: &a_data, row_stride: k, col_stride: 1 };
            // b as kᵀ of a (n, k + 3) buffer (padding between key rows), and as a (k, n + 5) one.
            let kt_data = values(n * (k + 3), 2);
            let kt = View { data: &kt_data, row_stride: 1, col_stride: k + 3 };
            let v_data = values(k * (n + 5), 3);
            let v = View { data: &v_data, row_stride: n + 5, col_stride: 1 };
            for b in [kt, v] {
                let mut got = vec![f32::NAN; m * n];
                assert!(try_product(m, n, k, a, b, &mut got));
                let want = naive(m, n, k, a, b);
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{m}x{n}x{k}: {g} vs {w}");
                }
            }
        }
    }

    /// A half-precision b read in place gives exactly the bits of its f32 copy, in both layouts
    /// (the decode attention of an f16 / bf16 KV cache), for lengths on and off the kernels' steps.
    #[test]
    fn half_operands_equal_their_f32_copies() {
        use half::{bf16, f16};
        fn check<T: Widen>(from: fn(f32) -> T) {
            for (m, n, k) in [(1, 7, 5), (4, 33, 256), (7, 64, 19), (16, 3, 64), (2, 1, 1), (3, 17, 40)] {
                let a_data = values(m * k, 1);
                let a = View { data: &a_data, row_stride: k, col_stride: 1 };
                let kt_half: Vec<T> = values(n * (k + 3), 2).into_iter().map(from).collect();
                let v_half: Vec<T> = values(k * (n + 5), 3).into_iter().map(from).collect();
                let (kt_f32, v_f32): (Vec<f32>, Vec<f32>) =
                    (kt_half.iter().map(|h| h.widen()).collect(), v_half.iter().map(|h| h.widen()).collect());
                let layouts = [(1, k + 3, &kt_half, &kt_f32), (n + 5, 1, &v_half, &v_f32)];
                for (row_stride, col_stride, half, wide) in layouts {
                    let (mut got, mut want) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                    assert!(try_product(m, n, k, a, View { data: half, row_stride, col_stride }, &mut got));
                    assert!(try_product(m, n, k, a, View { data: wide, row_stride, col_stride }, &mut want));
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!(g.to_bits(), w.to_bits(), "{m}x{n}x{k}: {g} vs {w}");
                    }
                }
            }
        }
        check(f16::from_f32);
        check(bf16::from_f32);
    }

    #[test]
    fn other_shapes_are_left_to_gemm() {
        let data = values(64, 4);
        let strided = View { data: &data, row_stride: 8, col_stride: 2 };
        let rows = View { data: &data, row_stride: 4, col_stride: 1 };
        let mut out = vec![0f32; 64];
        assert!(!try_product(2, 2, 2, rows, strided, &mut out));
        assert!(!try_product(MAX_ROWS + 1, 1, 1, rows, rows, &mut out));
        assert!(!try_product(2, 2, 2, strided, rows, &mut out));
    }
}
