//! AVX2 dot products of GGML weight rows with 8-bit activations: the weight blocks are widened
//! to bytes in registers, multiplied with `maddubs` (u8 × i8 pairs -> i16) and `madd` (-> i32),
//! and each block's integer sum is scaled into an f32 accumulator. Only called after run-time
//! detection of avx2, fma and f16c (see [`crate::ggml`]'s dispatch).

use std::arch::x86_64::*;

use crate::ggml::act::ActRow;

/// The f16 at `p` as f32. Reads 8 bytes (`p..p + 8` must be readable): `vcvtph2ps` from memory
/// has no dependency on a register's old contents, where a 2-byte insert into a register would
/// chain every block to the previous block's accumulator.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_loadl_epi64(p as *const __m128i)))
}

/// Lane 3 of the four f16 at `p` (the last two bytes of `p..p + 8`) as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn last_f16(p: *const u8) -> f32 {
    let v = _mm_cvtph_ps(_mm_loadl_epi64(p as *const __m128i));
    _mm_cvtss_f32(_mm_shuffle_ps(v, v, 3))
}

/// Sum of the 8 lanes in llama.cpp's order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// [`hsum`] of each accumulator.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsums<const N: usize>(acc: [__m256; N]) -> [f32; N] {
    let mut out = [0f32; N];
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum(a);
    }
    out
}

/// Sum of the products of signed bytes, four adjacent pairs per i32 lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_i8(w: __m256i, x: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// 32 nibbles of 16 bytes: low nibbles in bytes 0..16, high nibbles in bytes 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles_32(p: *const u8) -> __m256i {
    let v = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_insertf128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Byte i = 0xFF where bit i of `bits` is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bits_32(bits: u32) -> __m256i {
    let select = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), select);
    // Every bit but bit (i % 8) set in byte i: the byte is all ones iff that bit was set.
    let others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi64x(-1))
}

/// The 32 weights of a Q8_0 block as signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_weights(blk: *const u8) -> __m256i {
    _mm256_loadu_si256(blk.add(2) as *const __m256i)
}

/// The 32 weights of a Q5_0 block as unsigned 5-bit q (the value is q - 16; the kernel
/// subtracts 16 × the activations' sum once per block).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q5_0_unsigned(blk: *const u8) -> __m256i {
    let fifth = _mm256_and_si256(bits_32((blk.add(2) as *const u32).read_unaligned()), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles_32(blk.add(6)), fifth)
}

/// How far ahead of the block being read its row is prefetched, in bytes (the one-row k-quant
/// kernels). A weight stream is read once: without prefetching, each cache miss stalls the
/// arithmetic instead of overlapping with it. (A prefetch past the matrix's end is harmless:
/// prefetches never fault.)
const PREFETCH: usize = 2048;

/// How far ahead of the group of rows being read its weight stream is prefetched, in bytes (at
/// least the next group). A miss to memory takes a few hundred cycles; the next group's rows are
/// read within about a hundred, so prefetching only them left the reads latency-bound. Measured
/// on AMD Zen 5 (ggml_matvec, the streams of matrices past the L3): one thread Q8_0 37 → 43-45
/// GB/s with the AVX2 kernels and 37 → 42-45 with the AVX-512 ones, AVX-512 Q5_0 20 → 31-36,
/// Q4_K 34 → 37; two threads Q8_0 50 → 53-56, Q5_0 39 → 54-56 (membw.c read 46-54 there). 4 KB
/// ahead was between, 12-32 KB no better than 8.
const GROUP_PREFETCH_AHEAD: usize = 8192;

/// The prefetch hint of a product that reads each weight once (decode: one activation row):
/// non-temporal, so the weight stream (hundreds of MB a token) does not push the KV cache and
/// activations out of the caches. Gemma 3 270M decode, Zen 5, alternating binaries: +4-6% at one
/// thread, +2-6% at two, against `STREAM_REUSED`.
pub(crate) const STREAM_ONCE: i32 = _MM_HINT_NTA;
/// The hint of a tile, whose weight rows serve several activation rows from L1.
pub(crate) const STREAM_REUSED: i32 = _MM_HINT_T0;

/// Prefetches the slice of the weight stream `max(group_bytes, GROUP_PREFETCH_AHEAD)` past the
/// group being read (`group_bytes` from `w`) that matches block `b`'s place in this group: `step`
/// bytes (the group's bytes per block) from there, a line at a time. A group of R rows read block
/// by block walks R places at once, R streams that the hardware prefetcher follows badly; this
/// turns them into one sequential stream ahead of the reads. (Zen 3, Q8_0 output matrix: 7.1 →
/// 11.3 GB/s at 1 thread, 12.4 → 19 at 2 for the next group alone, where a per-row prefetch
/// 2 KB ahead gained nothing at any distance.)
#[inline(always)]
pub(crate) unsafe fn prefetch_group_stream<const HINT: i32>(w: *const u8, group_bytes: usize, step: usize, b: usize) {
    // wrapping: the address may lie past the weights (a prefetch never faults; `add` there
    // would be undefined behaviour).
    let p = w.wrapping_add(group_bytes.max(GROUP_PREFETCH_AHEAD) + b * step);
    let mut off = 0;
    while off < step {
        _mm_prefetch::<HINT>(p.wrapping_add(off) as *const i8);
        off += 64;
    }
}

/// Dot products of `R` consecutive weight rows (32-value blocks of `$bytes` bytes, f16 scale
/// first) with one activation row: the activation block is loaded once for all rows, and the
/// rows' independent accumulators keep several loads from memory in flight.
macro_rules! dot_rows_32 {
    ($name:ident, $bytes:expr, $weights:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize>(w: *const u8, row_bytes: usize, x: &ActRow) -> [f32; R] {
            let nb = row_bytes / $bytes;
            let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..nb {
                prefetch_group_stream::<STREAM_ONCE>(w, R * row_bytes, R * $bytes, b);
                let xv = _mm256_loadu_si256(xq.add(b * 32) as *const __m256i);
                let dx = *xd.add(b);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let blk = w.add(r * row_bytes + b * $bytes);
                    let d = _mm256_set1_ps(f16_at(blk) * dx);
                    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8($weights(blk), xv)), *acc);
                }
            }
            hsums(acc)
        }
    };
}

dot_rows_32!(dot_q8_0_rows, 34, q8_0_weights);

/// As `dot_q8_0_rows` for Q5_0: the weights (unsigned, < 32) go straight into `maddubs`, which
/// needs no sign juggling, and Σ (q - 16) x = Σ q x - 16 Σ x.
///
/// Every kernel here keeps llama.cpp's AVX2 lane layout and f32 accumulation order: Gemma 3's
/// activations have outliers that make 8-bit activation rounding chaotic, so a different f32
/// order alone moves its logits by ~0.5 and its greedy ids away from llama.cpp's.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_0_rows<const R: usize>(w: *const u8, row_bytes: usize, x: &ActRow) -> [f32; R] {
    let nb = row_bytes / 22;
    let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        prefetch_group_stream::<STREAM_ONCE>(w, R * row_bytes, R * 22, b);
        let xv = _mm256_loadu_si256(xq.add(b * 32) as *const __m256i);
        let dx = *xd.add(b);
        // 16 × the sum of each lane's four activations, so every lane holds Σ (q - 16) x of its
        // four values exactly as a signed kernel would (the f32 rounding then matches too).
        let offset = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(16), xv), ones);
        for (r, acc) in acc.iter_mut().enumerate() {
            let blk = w.add(r * row_bytes + b * 22);
            let d = _mm256_set1_ps(f16_at(blk) * dx);
            let sum = _mm256_madd_epi16(_mm256_maddubs_epi16(q5_0_unsigned(blk), xv), ones);
            *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(sum, offset)), *acc);
        }
    }
    hsums(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8_0(row: &[u8], x: &ActRow) -> f32 {
    dot_q8_0_rows::<1>(row.as_ptr(), row.len(), x)[0]
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_0(row: &[u8], x: &ActRow) -> f32 {
    dot_q5_0_rows::<1>(row.as_ptr(), row.len(), x)[0]
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4k(row: &[u8], x: &ActRow) -> f32 {
    q4k_cols::<1>(row.as_ptr(), row.len(), [x])[0]
}

/// A Q4_K block's eight 6-bit scales (bytes 0..8) and eight 6-bit mins (bytes 8..16), unpacked
/// from its 12 packed bytes at `p` with word operations (the layout of `q4k_scale_min`: entries
/// 0..4 are the low 6 bits of bytes 0..4 / 4..8; entries 4..8 take a nibble of bytes 8..12 and
/// the top 2 bits of bytes 0..4 / 4..8).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4k_scales_mins(p: *const u8) -> (u64, __m128i) {
    let word = |i: usize| (p.add(4 * i) as *const u32).read_unaligned();
    let (a, b, c) = (word(0), word(1), word(2));
    let (six, four, two) = (0x3f3f_3f3f_u32, 0x0f0f_0f0f_u32, 0x0303_0303_u32);
    let scales = (a & six) as u64 | (((c & four) | ((a >> 6) & two) << 4) as u64) << 32;
    let mins = (b & six) as u64 | ((((c >> 4) & four) | ((b >> 6) & two) << 4) as u64) << 32;
    (scales, _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mins as i64)))
}

/// One Q4_K row dotted with `C` activation rows: the row's scales and nibbles are unpacked once
/// for all of them; each column accumulates as `C = 1` does.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_cols<const C: usize>(w: *const u8, row_bytes: usize, xs: [&ActRow; C]) -> [f32; C] {
    let nb = row_bytes / 144;
    let low = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); C];
    // The mins' terms in four lanes (lane j: sub-blocks 2j and 2j + 1), as llama.cpp
    // accumulates them.
    let mut acc_min = [_mm_setzero_ps(); C];
    let min_terms = |acc_min: &mut [__m128; C], b: usize, mins: __m128i| {
        let dminw = f16_at(w.add(b * 144 + 2));
        for c in 0..C {
            // Sums of 32 activations per sub-block (pairs of the 16-value sums), times its min.
            let sums = xs[c].sums.as_ptr().add(b * 16) as *const __m128i;
            let pairs = _mm_hadd_epi16(_mm_loadu_si128(sums), _mm_loadu_si128(sums.add(1)));
            let dmin = _mm_set1_ps(-(xs[c].d[b] * dminw));
            acc_min[c] = _mm_fmadd_ps(dmin, _mm_cvtepi32_ps(_mm_madd_epi16(mins, pairs)), acc_min[c]);
        }
    };
    // With several columns the mins' terms go first, in a pass of their own: the same operations
    // in the same order per column, but their accumulators are not live in the main loop, whose
    // 2·C accumulators and unpacked nibbles and scales then fit AVX2's 16 registers (fused, the
    // 4-column tile spilled the scales to the stack).
    let separate = C > 1;
    if separate {
        for b in 0..nb {
            min_terms(&mut acc_min, b, q4k_scales_mins(w.add(b * 144 + 4)).1);
        }
    }
    for b in 0..nb {
        let blk = w.add(b * 144);
        let (scales, mins) = q4k_scales_mins(blk.add(4));
        let dw = f16_at(blk);
        if !separate {
            min_terms(&mut acc_min, b, mins);
        }
        let mut sumi = [_mm256_setzero_si256(); C];
        for j in 0..4 {
            let sc = |i: usize| _mm256_set1_epi16(((scales >> (8 * i)) & 0xff) as i16);
            let (sc_lo, sc_hi) = (sc(2 * j), sc(2 * j + 1));
            _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(16 + 32 * j + PREFETCH) as *const i8);
            let q = _mm256_loadu_si256(blk.add(16 + 32 * j) as *const __m256i);
            let (lo, hi) = (_mm256_and_si256(q, low), _mm256_and_si256(_mm256_srli_epi16(q, 4), low));
            for c in 0..C {
                let xq = xs[c].q.as_ptr().add(b * 256 + 64 * j);
                let p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(xq as *const __m256i));
                let p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xq.add(32) as *const __m256i));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p_lo, sc_lo));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p_hi, sc_hi));
            }
        }
        for c in 0..C {
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(xs[c].d[b] * dw), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    let mut out = [0f32; C];
    for c in 0..C {
        let mut m = [0f32; 4];
        _mm_storeu_ps(m.as_mut_ptr(), acc_min[c]);
        out[c] = hsum(acc[c]) + ((m[0] + m[2]) + (m[1] + m[3]));
    }
    out
}

/// `_mm_shuffle_epi8` masks putting scale 2p in bytes 0..8 and scale 2p + 1 in bytes 8..16.
pub(crate) const Q6K_SCALE_PAIRS: [[i8; 16]; 8] = {
    let mut masks = [[0i8; 16]; 8];
    let mut p = 0;
    while p < 8 {
        let mut i = 0;
        while i < 16 {
            masks[p][i] = (2 * p + i / 8) as i8;
            i += 1;
        }
        p += 1;
    }
    masks
};

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6k(row: &[u8], x: &ActRow) -> f32 {
    q6k_cols::<1>(row.as_ptr(), row.len(), [x])[0]
}

/// One Q6_K row dotted with `C` activation rows (unpacked once; each column as `C = 1`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_cols<const C: usize>(w: *const u8, row_bytes: usize, xs: [&ActRow; C]) -> [f32; C] {
    let nb = row_bytes / 210;
    let (low4, low2, m32) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x03), _mm256_set1_epi8(32));
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * 210);
        let scales = _mm_loadu_si128(blk.add(192) as *const __m128i);
        let mut sumi = [_mm256_setzero_si256(); C];
        for half in 0..2 {
            let ql = blk.add(64 * half);
            _mm_prefetch::<_MM_HINT_T0>(ql.wrapping_add(PREFETCH) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(ql.wrapping_add(PREFETCH + 64) as *const i8);
            let (ql_a, ql_b) =
                (_mm256_loadu_si256(ql as *const __m256i), _mm256_loadu_si256(ql.add(32) as *const __m256i));
            let qh = _mm256_loadu_si256(blk.add(128 + 32 * half) as *const __m256i);
            // The 2-bit highs of value group g sit at bits 2g..2g+2 of each qh byte.
            macro_rules! hi {
                ($shift:literal) => {
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, $shift), low2), 4)
                };
            }
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql_a, low4), hi!(0)),
                _mm256_or_si256(_mm256_and_si256(ql_b, low4), hi!(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_a, 4), low4), hi!(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_b, 4), low4), hi!(6)),
            ];
            for (g, q) in q.into_iter().enumerate() {
                let mask = _mm_loadu_si128(Q6K_SCALE_PAIRS[4 * half + g].as_ptr() as *const __m128i);
                let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, mask));
                for c in 0..C {
                    let xq = xs[c].q.as_ptr().add(b * 256 + 128 * half + 32 * g);
                    let xv = _mm256_loadu_si256(xq as *const __m256i);
                    // (q - 32) x in i16 pairs: q x - 32 x.
                    let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xv), _mm256_maddubs_epi16(m32, xv));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, sc));
                }
            }
        }
        let dw = last_f16(blk.add(202));
        for c in 0..C {
            let d = xs[c].d[b] * dw;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    hsums(acc)
}

/// Prefill tiles that run a one-row, `C`-column kernel (`$cols`) over `R` weight rows, built
/// with the target features `$features` (the k-quants: each row's blocks are unpacked once for
/// the `C` activation rows).
macro_rules! tile_rows {
    ($name:ident, $cols:ident, $features:literal) => {
        #[target_feature(enable = $features)]
        pub unsafe fn $name<const R: usize, const C: usize>(
            w: *const u8,
            row_bytes: usize,
            xs: &[ActRow; C],
        ) -> [[f32; C]; R] {
            let cols: [&ActRow; C] = std::array::from_fn(|c| &xs[c]);
            std::array::from_fn(|r| $cols::<C>(w.add(r * row_bytes), row_bytes, cols))
        }
    };
}
pub(crate) use tile_rows;

tile_rows!(tile_q4k, q4k_cols, "avx2,fma,f16c");
tile_rows!(tile_q6k, q6k_cols, "avx2,fma,f16c");

/// Prefill tiles: `R` weight rows × `C` activation rows. Each weight block is unpacked once and
/// used for all `C` rows; every (row, activation) pair accumulates exactly as the one-row
/// kernels do, so batched and single-token results are bit-identical.
macro_rules! tile_32 {
    ($name:ident, $bytes:expr, $unpack:ident, $pair:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name<const R: usize, const C: usize>(
            w: *const u8,
            row_bytes: usize,
            xs: &[ActRow; C],
        ) -> [[f32; C]; R] {
            let nb = row_bytes / $bytes;
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            for b in 0..nb {
                prefetch_group_stream::<STREAM_REUSED>(w, R * row_bytes, R * $bytes, b);
                let mut xv = [_mm256_setzero_si256(); C];
                let mut dx = [0f32; C];
                for c in 0..C {
                    xv[c] = _mm256_loadu_si256(xs[c].q.as_ptr().add(b * 32) as *const __m256i);
                    dx[c] = *xs[c].d.get_unchecked(b);
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let blk = w.add(r * row_bytes + b * $bytes);
                    let (wv, dw) = ($unpack(blk), f16_at(blk));
                    for c in 0..C {
                        let d = _mm256_set1_ps(dw * dx[c]);
                        acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps($pair(wv, xv[c])), acc[c]);
                    }
                }
            }
            let mut out = [[0f32; C]; R];
            for (o, a) in out.iter_mut().zip(acc) {
                for c in 0..C {
                    o[c] = hsum(a[c]);
                }
            }
            out
        }
    };
}

/// Q5_0 pair: unsigned weights into `maddubs`, minus 16 × each lane's activations (as in
/// `dot_q5_0_rows`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_pair(w: __m256i, x: __m256i) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let sum = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
    _mm256_sub_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(16), x), ones))
}

tile_32!(tile_q8_0, 34, q8_0_weights, dot_i8);
tile_32!(tile_q5_0, 22, q5_0_unsigned, q5_0_pair);
