//! AVX-512 (BW + VNNI) Q5_0 and Q8_0 rows: 64 weights per 512-bit register, the Q5_0 5th bits
//! applied through a mask register, and `vpdpbusd` doing the multiply-add of four byte pairs
//! into i32 in one instruction. Q5_0 is the formats' most expensive to unpack, and the one these
//! "Q4_K_M" files hold most of (rows of 640 and 896 values do not divide into k-quant
//! super-blocks); their largest matrix, the tied output projection, is Q8_0.
//!
//! Decode takes two rows per register (block b of each in one half: each half accumulates as the
//! AVX2 kernel's 8 lanes, with one multiply-add per register); a single row and the prefill
//! tiles take two consecutive blocks of a row (an even block count). Q4_K decode and prefill
//! take two rows per register the same way (`tile_q4k_pairs`). Only called after run-time
//! detection of avx512f/bw/vl/vnni. Every path is bit-identical to the AVX2 kernels.

use std::arch::x86_64::*;

use crate::ggml::act::ActRow;
use crate::x86::avx2::ggml::{
    hsum, hsums, last_f16, prefetch_group_stream, q4k_scales_mins, tile_rows, Q6K_SCALE_PAIRS, STREAM_ONCE,
    STREAM_REUSED,
};

/// How far ahead of the block being read a single row is prefetched, in bytes (see `avx2`).
/// Groups of rows prefetch their stream instead (`avx2::prefetch_group_stream`): on AMD Zen 4
/// the per-row prefetch left the 4-row Q8_0 walk at 9.3 GB/s on one thread (the read
/// bandwidth: 24), the group stream reaches 22–29; Gemma 3 decode +37%, Qwen2.5 +55%. One row at
/// a time (the Q6_K decode kernel) reads a single stream: 8 KB ahead took it from 35 to 45 GB/s
/// on Zen 5, against 2 KB (the AVX2 kernels' distance).
const PREFETCH: usize = 8192;

/// The sums of a row pair's accumulator: [`hsum`] of its low and of its high 8 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn pair_sums(acc: __m512) -> [f32; 2] {
    [hsum(_mm512_castps512_ps256(acc)), hsum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)))]
}

/// Two consecutive Q5_0 blocks at `b0`: their 64 values in 0..32 (the 5th bit added through a
/// mask), and their two scales in lanes 0 and 1.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn unpack_pair(b0: *const u8) -> (__m512i, __m128) {
    unpack_two(b0, b0.add(22))
}

/// The Q5_0 blocks at `b0` and `b1`: their values in the low and the high half, their scales in
/// lanes 0 and 1.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn unpack_two(b0: *const u8, b1: *const u8) -> (__m512i, __m128) {
    let (n0, n1) = (_mm_loadu_si128(b0.add(6) as *const __m128i), _mm_loadu_si128(b1.add(6) as *const __m128i));
    let lo_hi0 = _mm256_inserti128_si256(_mm256_castsi128_si256(n0), _mm_srli_epi16(n0, 4), 1);
    let lo_hi1 = _mm256_inserti128_si256(_mm256_castsi128_si256(n1), _mm_srli_epi16(n1, 4), 1);
    let nibbles =
        _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo_hi0), lo_hi1, 1), _mm512_set1_epi8(0x0F));
    let qh =
        (b0.add(2) as *const u32).read_unaligned() as u64 | ((b1.add(2) as *const u32).read_unaligned() as u64) << 32;
    let q = _mm512_mask_add_epi8(nibbles, _cvtu64_mask64(qh), nibbles, _mm512_set1_epi8(16));
    let dw = (b0 as *const u16).read_unaligned() as u32 | ((b1 as *const u16).read_unaligned() as u32) << 16;
    (q, _mm_cvtph_ps(_mm_cvtsi32_si128(dw as i32)))
}

/// The Q5_0 row-pair lane layout of the AVX-512 kernels: rows 2p and 2p + 1 share a register as
/// four 128-bit lanes [row 2p's values 0..16, row 2p + 1's 0..16, row 2p's 16..32, row 2p + 1's
/// 16..32], which is each block's 16 packed bytes as stored, both rows' in one 256-bit load pair,
/// and the same bytes shifted by 4 (one shift for both rows); the activations are laid out to
/// match ([`q5_0_lane_acts`]). Each i32 lane then sums the four products an AVX2 lane sums and
/// accumulates in f32 as that lane does; [`q5_0_pair_sums`] puts the lanes back in AVX2 order
/// for the final sums, so results are bit for bit `avx2::dot_q5_0_rows`'s. Against keeping each
/// row's 32 values in one half (two shifts and three inserts per pair) this is a third fewer
/// vector operations per block pair.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,bmi2,f16c,fma")]
unsafe fn q5_0_pair_lanes(b0: *const u8, b1: *const u8) -> __m512i {
    let packed = _mm256_inserti128_si256::<1>(
        _mm256_castsi128_si256(_mm_loadu_si128(b0.add(6) as *const __m128i)),
        _mm_loadu_si128(b1.add(6) as *const __m128i),
    );
    // Both rows' bytes twice, the second copy shifted to its high nibbles.
    let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(packed), packed);
    let shifted = _mm512_mask_srli_epi16(both, 0xFFFF_0000, both, 4);
    // Fifth bits: each row's bits 0..16 go with its low lane, 16..32 with its high one.
    let (h0, h1) = ((b0.add(2) as *const u32).read_unaligned(), (b1.add(2) as *const u32).read_unaligned());
    let high = _pdep_u64(h0 as u64, 0x0000_FFFF_0000_FFFF) | _pdep_u64(h1 as u64, 0xFFFF_0000_FFFF_0000);
    let fifth = _mm512_maskz_mov_epi8(_cvtu64_mask64(high), _mm512_set1_epi8(16));
    // (nibble & 0x0F) | fifth, in one operation.
    _mm512_ternarylogic_epi32::<0xEA>(shifted, _mm512_set1_epi8(0x0F), fifth)
}

/// Block `b` of an activation row in [`q5_0_pair_lanes`]' layout ([x 0..16, x 0..16, x 16..32,
/// x 16..32]) and -16 Σ x per lane of four values: Σ (q - 16) x = Σ q x - 16 Σ x, so the products
/// accumulate onto it (as the AVX2 kernel's difference, exactly).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn q5_0_lane_acts(x: &ActRow, b: usize) -> (__m512i, __m512i) {
    let x32 = _mm512_castsi256_si512(_mm256_loadu_si256(x.q.as_ptr().add(b * 32) as *const __m256i));
    let xv = _mm512_shuffle_i64x2::<0x50>(x32, x32);
    let zero = _mm512_setzero_si512();
    (xv, _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(16), xv)))
}

/// The f16 scales of block `b` of `R` (at most 4) consecutive rows, as f32 in lanes 0..R.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn q5_0_block_scales<const R: usize>(w: *const u8, row_bytes: usize, b: usize) -> __m128 {
    let mut halves = 0u64;
    for r in 0..R {
        halves |= ((w.add(r * row_bytes + b * 22) as *const u16).read_unaligned() as u64) << (16 * r);
    }
    _mm_cvtph_ps(_mm_cvtsi64_si128(halves as i64))
}

/// Per row pair p: row 2p's scale (lane 2p of [`q5_0_block_scales`]) into its lanes, row
/// 2p + 1's into the others.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn q5_0_scale_lanes<const R: usize>() -> [__m512i; R] {
    std::array::from_fn(|p| {
        let (a, b) = (2 * p as i32, 2 * p as i32 + 1);
        _mm512_setr_epi32(a, a, a, a, b, b, b, b, a, a, a, a, b, b, b, b)
    })
}

/// A row pair's accumulator in [`q5_0_pair_lanes`]' layout, summed as the AVX2 kernel's two rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn q5_0_pair_sums(acc: __m512) -> [f32; 2] {
    let avx2_order = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
    pair_sums(_mm512_permutexvar_ps(avx2_order, acc))
}

/// `R` (even, at most 4) Q5_0 rows dotted with one activation row (decode), any block count, in
/// [`q5_0_pair_lanes`]' layout: bit for bit `avx2::dot_q5_0_rows`. The kernel is bound by its
/// vector operations, not by memory.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,bmi2,f16c,fma")]
pub unsafe fn dot_q5_0_row_pairs<const R: usize>(w: *const u8, row_bytes: usize, x: &ActRow) -> [f32; R] {
    debug_assert!(R.is_multiple_of(2) && R <= 4);
    let scale_lanes = q5_0_scale_lanes::<R>();
    // The row pairs' accumulators are the first R / 2.
    let mut acc = [_mm512_setzero_ps(); R];
    for b in 0..row_bytes / 22 {
        let (xv, neg_offset) = q5_0_lane_acts(x, b);
        prefetch_group_stream::<STREAM_ONCE>(w, R * row_bytes, R * 22, b);
        // The R rows' scales times the activations' (the AVX2 kernel's f32 product per row).
        let d = _mm512_castps128_ps512(_mm_mul_ps(q5_0_block_scales::<R>(w, row_bytes, b), _mm_set1_ps(x.d[b])));
        for (p, acc) in acc.iter_mut().enumerate().take(R / 2) {
            let b0 = w.add(2 * p * row_bytes + b * 22);
            let sum = _mm512_dpbusd_epi32(neg_offset, q5_0_pair_lanes(b0, b0.add(row_bytes)), xv);
            *acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(scale_lanes[p], d), _mm512_cvtepi32_ps(sum), *acc);
        }
    }
    let mut out = [0f32; R];
    for p in 0..R / 2 {
        [out[2 * p], out[2 * p + 1]] = q5_0_pair_sums(acc[p]);
    }
    out
}

/// `vpermw` indices putting word `i` of a row pair's scales (row 0's eight words, then row 1's)
/// in every word of the low half and word `8 + i` in every word of the high half.
const Q4K_PAIR_SCALES: [[i16; 32]; 8] = {
    let mut idx = [[0i16; 32]; 8];
    let mut i = 0;
    while i < 8 {
        let mut lane = 0;
        while lane < 32 {
            idx[i][lane] = (i + 8 * (lane / 16)) as i16;
            lane += 1;
        }
        i += 1;
    }
    idx
};

/// `R` (even) Q4_K rows dotted with one activation row (decode): [`tile_q4k_pairs`] with one
/// column.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn dot_q4k_row_pairs<const R: usize>(w: *const u8, row_bytes: usize, x: &ActRow) -> [f32; R] {
    tile_q4k_pairs::<R, 1>(w, row_bytes, std::slice::from_ref(x).try_into().expect("one row")).map(|[v]| v)
}

/// `R` (even) Q4_K rows × `C` activation rows. Rows 2p and 2p + 1 share a register, block b of
/// each in one half, and each half runs `avx2::q4k_cols`'s operations for every activation row:
/// the same integer sums per lane (exact), the same f32 multiply-adds block after block into 8
/// lanes and the mins' terms into 4, the same final sums; so each (row, activation row) result
/// is the AVX2 one-row kernel's bit for bit (prefill and decode agree), with half the
/// instructions per weight. Each block pair's nibbles and scales are unpacked once for the `C`
/// activation rows. The Qwen3-TTS code predictor (rows of 1024 values: 4 blocks) spent more of
/// each row in the one-row kernel's entry, reductions and exit than in its blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn tile_q4k_pairs<const R: usize, const C: usize>(
    w: *const u8,
    row_bytes: usize,
    xs: &[ActRow; C],
) -> [[f32; C]; R] {
    debug_assert!(R.is_multiple_of(2));
    let nb = row_bytes / 144;
    let low = _mm512_set1_epi8(0x0F);
    let idx = Q4K_PAIR_SCALES.map(|v| _mm512_loadu_si512(v.as_ptr() as *const __m512i));
    // Lane 0 of a 128-bit value into lanes 0..8, lane 1 into 8..16.
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    // The row pairs' accumulators are the first R / 2 of each.
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let mut acc_min = [[_mm256_setzero_ps(); C]; R];
    for b in 0..nb {
        if C == 1 {
            prefetch_group_stream::<STREAM_ONCE>(w, R * row_bytes, R * 144, b);
        } else {
            prefetch_group_stream::<STREAM_REUSED>(w, R * row_bytes, R * 144, b);
        }
        // Per activation row: sums of 32 activations per sub-block (in both halves), its scale.
        let mut pairs = [_mm256_setzero_si256(); C];
        let mut dx = [_mm_setzero_ps(); C];
        for c in 0..C {
            let sums = xs[c].sums.as_ptr().add(b * 16) as *const __m128i;
            let p = _mm_hadd_epi16(_mm_loadu_si128(sums), _mm_loadu_si128(sums.add(1)));
            pairs[c] = _mm256_broadcastsi128_si256(p);
            dx[c] = _mm_set1_ps(*xs[c].d.get_unchecked(b));
        }
        for p in 0..R / 2 {
            let b0 = w.add(2 * p * row_bytes + b * 144);
            let b1 = b0.add(row_bytes);
            let ((sc0, mins0), (sc1, mins1)) = (q4k_scales_mins(b0.add(4)), q4k_scales_mins(b1.add(4)));
            // f16 d of each row in lane 0 / 1, dmin in lane 2 / 3.
            let dw = |o: usize| {
                (b0.add(o) as *const u16).read_unaligned() as u32
                    | ((b1.add(o) as *const u16).read_unaligned() as u32) << 16
            };
            let dw = _mm_cvtph_ps(_mm_cvtsi64_si128((dw(0) as u64 | (dw(2) as u64) << 32) as i64));
            let mins = _mm256_inserti128_si256(_mm256_castsi128_si256(mins0), mins1, 1);
            let scales = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_set_epi64x(sc1 as i64, sc0 as i64)));
            let mut sumi = [_mm512_setzero_si512(); C];
            for j in 0..4 {
                let half = |r: *const u8| _mm256_loadu_si256(r.add(16 + 32 * j) as *const __m256i);
                let q = _mm512_inserti64x4(_mm512_castsi256_si512(half(b0)), half(b1), 1);
                let (lo, hi) = (_mm512_and_si512(q, low), _mm512_and_si512(_mm512_srli_epi16(q, 4), low));
                let sc_lo = _mm512_permutexvar_epi16(idx[2 * j], scales);
                let sc_hi = _mm512_permutexvar_epi16(idx[2 * j + 1], scales);
                for c in 0..C {
                    // Values 64j..64j+32 (low nibbles) and 64j+32..64j+64 (high), in both halves.
                    let xq = xs[c].q.as_ptr().add(b * 256 + 64 * j);
                    let at = |o: usize| _mm512_broadcast_i64x4(_mm256_loadu_si256(xq.add(o) as *const __m256i));
                    // `vpdpwssd`: the scale multiply-add and the accumulation in one instruction
                    // (exact integers, so the same sums as madd + add).
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(lo, at(0)), sc_lo);
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], _mm512_maddubs_epi16(hi, at(32)), sc_hi);
                }
            }
            for c in 0..C {
                let dd = _mm_mul_ps(dx[c], dw);
                // -(d_x · dmin) (a sign flip, as the AVX2 kernel's negation: 0 - v would turn
                // -0.0 into +0.0): lanes 2 and 3 into the halves of the mins' accumulator.
                let dmin = _mm256_xor_ps(
                    _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dd), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)),
                    _mm256_set1_ps(-0.0),
                );
                let m = _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, pairs[c]));
                acc_min[p][c] = _mm256_fmadd_ps(dmin, m, acc_min[p][c]);
                let d = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(dd));
                acc[p][c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi[c]), acc[p][c]);
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for p in 0..R / 2 {
        for c in 0..C {
            let mut m = [0f32; 8];
            _mm256_storeu_ps(m.as_mut_ptr(), acc_min[p][c]);
            let [s0, s1] = pair_sums(acc[p][c]);
            out[2 * p][c] = s0 + ((m[0] + m[2]) + (m[1] + m[3]));
            out[2 * p + 1][c] = s1 + ((m[4] + m[6]) + (m[5] + m[7]));
        }
    }
    out
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn dot_q5_0_rows<const R: usize>(w: *const u8, row_bytes: usize, x: &ActRow) -> [f32; R] {
    let nb = row_bytes / 22;
    debug_assert!(nb.is_multiple_of(2));
    let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
    let sixteen = _mm512_set1_epi8(16);
    let mut acc = [_mm256_setzero_ps(); R];
    for b in (0..nb).step_by(2) {
        let xv = _mm512_loadu_si512(xq.add(b * 32) as *const __m512i);
        let dx = _mm_castsi128_ps(_mm_loadl_epi64(xd.add(b) as *const __m128i));
        // Σ (q - 16) x = Σ q x - 16 Σ x, per lane of four values (as the AVX2 kernel).
        let offset = _mm512_dpbusd_epi32(_mm512_setzero_si512(), sixteen, xv);
        for (r, acc) in acc.iter_mut().enumerate() {
            let b0 = w.add(r * row_bytes + b * 22);
            _mm_prefetch::<_MM_HINT_T0>(b0.wrapping_add(PREFETCH) as *const i8);
            let (q, dw) = unpack_pair(b0);
            let sum = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xv), offset);
            let d = _mm_mul_ps(dx, dw);
            // One block after the other into 8 lanes: llama.cpp's f32 order (see `avx2`).
            let sum = _mm512_cvtepi32_ps(sum);
            *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(d), _mm512_castps512_ps256(sum), *acc);
            *acc = _mm256_fmadd_ps(
                _mm256_broadcastss_ps(_mm_movehdup_ps(d)),
                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1)),
                *acc,
            );
        }
    }
    hsums(acc)
}

/// [`dot_q5_0_row_pairs`] for `C` activation rows at once (prefill), any block count: rows 2p
/// and 2p + 1 share a register in [`q5_0_pair_lanes`]' layout, each pair of blocks is unpacked
/// once for every activation row, and each lane accumulates as an AVX2 lane (bit-identical to
/// the one-row kernels). Per (row pair, activation row, block): one 512-bit `vpdpbusd` started
/// from -16 Σ x, a scale product, a conversion and one multiply-add; two blocks of one row per
/// register (an older layout) needed a subtraction, two 256-bit multiply-adds, two broadcasts and
/// an extract to keep that order.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,bmi2,f16c,fma")]
pub unsafe fn tile_q5_0_pairs<const R: usize, const C: usize>(
    w: *const u8,
    row_bytes: usize,
    xs: &[ActRow; C],
) -> [[f32; C]; R] {
    debug_assert!(R.is_multiple_of(2) && R <= 4);
    let scale_lanes = q5_0_scale_lanes::<R>();
    // The row pairs' accumulators are the first R / 2.
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for b in 0..row_bytes / 22 {
        prefetch_group_stream::<STREAM_REUSED>(w, R * row_bytes, R * 22, b);
        let acts: [(__m512i, __m512i); C] = std::array::from_fn(|c| q5_0_lane_acts(&xs[c], b));
        let dx: [__m512; C] = std::array::from_fn(|c| _mm512_set1_ps(*xs[c].d.get_unchecked(b)));
        let scales = _mm512_castps128_ps512(q5_0_block_scales::<R>(w, row_bytes, b));
        for (p, acc) in acc.iter_mut().enumerate().take(R / 2) {
            let b0 = w.add(2 * p * row_bytes + b * 22);
            let q = q5_0_pair_lanes(b0, b0.add(row_bytes));
            let dw = _mm512_permutexvar_ps(scale_lanes[p], scales);
            for c in 0..C {
                // d · x as the one-row kernels' f16_at(blk) · dx: one f32 product per lane.
                let d = _mm512_mul_ps(dw, dx[c]);
                let sum = _mm512_dpbusd_epi32(acts[c].1, q, acts[c].0);
                acc[c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sum), acc[c]);
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for p in 0..R / 2 {
        for c in 0..C {
            [out[2 * p][c], out[2 * p + 1][c]] = q5_0_pair_sums(acc[p][c]);
        }
    }
    out
}

/// The f16 scale at `p` as f32 in lane 0. Reads 8 bytes (`p..p + 8` must be readable): from
/// memory, `vcvtph2ps` needs no shuffle (see `avx2::f16_at`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn scale_at(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_loadl_epi64(p as *const __m128i))
}

/// The Q8_0 blocks at `b0` and `b1`: their 32 weights each, in the low and the high half, and
/// their scales in lanes 0..8 and 8..16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn q8_0_halves(b0: *const u8, b1: *const u8) -> (__m512i, __m512) {
    let lo = _mm256_loadu_si256(b0.add(2) as *const __m256i);
    let q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256(b1.add(2) as *const __m256i), 1);
    // Lane 0 of the first operand into lanes 0..8, lane 0 of the second (index 16) into 8..16.
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16);
    let (d0, d1) = (_mm512_castps128_ps512(scale_at(b0)), _mm512_castps128_ps512(scale_at(b1)));
    (q, _mm512_permutex2var_ps(d0, halves, d1))
}

/// `R` Q8_0 rows (34-byte blocks: f16 scale, 32 signed bytes) dotted with one activation row.
/// Rows 2p and 2p + 1 share a 512-bit register, block b of each in one half, so each half
/// accumulates block after block as the 8 lanes of `avx2::dot_q8_0_rows` do: the same lane
/// sums and the same f32 operations in the same order, bit-identical results. An odd last row
/// runs in 256 bits. (Two blocks of one row per register measured slower than AVX2: keeping
/// that order costs an extract and two broadcasts per pair.)
///
/// `vpdpbusd` multiplies unsigned by signed bytes: it takes w + 128 (w xor 0x80) and starts
/// from -128 Σ x, per lane of four values: exactly Σ w x, as AVX2's `maddubs` + `madd` (no
/// intermediate i16 that w + 128 could saturate).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn dot_q8_0_rows<const R: usize>(w: *const u8, row_bytes: usize, x: &ActRow) -> [f32; R] {
    let nb = row_bytes / 34;
    let (xq, xd) = (x.q.as_ptr(), x.d.as_ptr());
    let flip = _mm512_set1_epi8(-128);
    // The row pairs' accumulators (the first R / 2), and an odd last row's.
    let mut acc = [_mm512_setzero_ps(); R];
    let mut last = _mm256_setzero_ps();
    for b in 0..nb {
        let x = _mm256_loadu_si256(xq.add(b * 32) as *const __m256i);
        let xv = _mm512_broadcast_i64x4(x);
        let offset = _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, xv);
        let neg_offset = _mm512_sub_epi32(_mm512_setzero_si512(), offset);
        let dx = _mm512_set1_ps(*xd.add(b));
        if R >= 2 {
            prefetch_group_stream::<STREAM_ONCE>(w, R * row_bytes, R * 34, b);
        }
        for (p, acc) in acc.iter_mut().enumerate().take(R / 2) {
            let b0 = w.add(2 * p * row_bytes + b * 34);
            let b1 = b0.add(row_bytes);
            let (q, dw) = q8_0_halves(b0, b1);
            let sum = _mm512_dpbusd_epi32(neg_offset, _mm512_xor_si512(q, flip), xv);
            *acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(sum), *acc);
        }
        if R % 2 == 1 {
            let blk = w.add((R - 1) * row_bytes + b * 34);
            if R == 1 {
                _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH) as *const i8);
            }
            let q = _mm256_xor_si256(_mm256_loadu_si256(blk.add(2) as *const __m256i), _mm512_castsi512_si256(flip));
            let sum = _mm256_dpbusd_epi32(_mm512_castsi512_si256(neg_offset), q, x);
            let d = _mm_mul_ss(scale_at(blk), _mm512_castps512_ps128(dx));
            last = _mm256_fmadd_ps(_mm256_broadcastss_ps(d), _mm256_cvtepi32_ps(sum), last);
        }
    }
    let mut out = [0f32; R];
    for p in 0..R / 2 {
        [out[2 * p], out[2 * p + 1]] = pair_sums(acc[p]);
    }
    if R % 2 == 1 {
        out[R - 1] = hsum(last);
    }
    out
}

/// `R` (even) Q8_0 rows × `C` activation rows (prefill): [`dot_q8_0_rows`]'s row pairs, each
/// block pair's weights loaded and offset once for the `C` activation rows, and every
/// (row, activation row) the decode kernel's operations in its order: bit-identical to it (so to
/// the AVX2 kernels). Replaces the AVX2 tile on AVX-512 CPUs, which reads a block per row and
/// multiplies in 256 bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn tile_q8_0_pairs<const R: usize, const C: usize>(
    w: *const u8,
    row_bytes: usize,
    xs: &[ActRow; C],
) -> [[f32; C]; R] {
    debug_assert!(R.is_multiple_of(2));
    let nb = row_bytes / 34;
    let (zero, flip) = (_mm512_setzero_si512(), _mm512_set1_epi8(-128));
    // The row pairs' accumulators are the first R / 2.
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for b in 0..nb {
        let xv = xs.map(|x| _mm512_broadcast_i64x4(_mm256_loadu_si256(x.q.as_ptr().add(b * 32) as *const __m256i)));
        let neg_offset = xv.map(|xv| _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, xv)));
        let dx = xs.map(|x| _mm512_set1_ps(*x.d.get_unchecked(b)));
        prefetch_group_stream::<STREAM_REUSED>(w, R * row_bytes, R * 34, b);
        for (p, acc) in acc.iter_mut().enumerate().take(R / 2) {
            let b0 = w.add(2 * p * row_bytes + b * 34);
            let (q, dw) = q8_0_halves(b0, b0.add(row_bytes));
            let q = _mm512_xor_si512(q, flip);
            for c in 0..C {
                let sum = _mm512_dpbusd_epi32(neg_offset[c], q, xv[c]);
                acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx[c]), _mm512_cvtepi32_ps(sum), acc[c]);
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for p in 0..R / 2 {
        for c in 0..C {
            [out[2 * p][c], out[2 * p + 1][c]] = pair_sums(acc[p][c]);
        }
    }
    out
}

/// The low and the high 256 bits of `v` added as 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn halves_added(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1))
}

/// `vpshufb` masks (one per 128-bit lane) putting Q6_K scales 4p and 4p + 1 in the low lane's
/// bytes 0..8 and 8..16, scales 4p + 2 and 4p + 3 in the high lane's: value groups 2p and 2p + 1
/// of `avx2::q6k_cols`, side by side.
const Q6K_SCALE_QUADS: [[i8; 32]; 4] = {
    let mut masks = [[0i8; 32]; 4];
    let mut p = 0;
    while p < 4 {
        let mut i = 0;
        while i < 16 {
            masks[p][i] = Q6K_SCALE_PAIRS[2 * p][i];
            masks[p][16 + i] = Q6K_SCALE_PAIRS[2 * p + 1][i];
            i += 1;
        }
        p += 1;
    }
    masks
};

/// One Q6_K row dotted with `C` activation rows (prefill), bit-identical to `avx2::q6k_cols`:
/// value groups g and g + 1 (64 consecutive activations) share a register, so each pair takes one
/// activation load, two `vpmaddubsw`, a subtraction and a `vpdpwssd` where AVX2 did twice that
/// plus two additions; the halves' integer sums are added before the f32 conversion (exact).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn q6k_cols<const C: usize>(w: *const u8, row_bytes: usize, xs: [&ActRow; C]) -> [f32; C] {
    let nb = row_bytes / 210;
    let (low4, low2, m32) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x03), _mm512_set1_epi8(32));
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * 210);
        let scales = _mm256_broadcastsi128_si256(_mm_loadu_si128(blk.add(192) as *const __m128i));
        let mut sumi = [_mm512_setzero_si512(); C];
        for half in 0..2 {
            let ql = blk.add(64 * half);
            // Decode (one column) reads the row once: non-temporal, as the group kernels'
            // streams, so the rows do not push the KV cache out of the last-level cache.
            if C == 1 {
                _mm_prefetch::<STREAM_ONCE>(ql.wrapping_add(PREFETCH) as *const i8);
                _mm_prefetch::<STREAM_ONCE>(ql.wrapping_add(PREFETCH + 64) as *const i8);
            } else {
                _mm_prefetch::<STREAM_REUSED>(ql.wrapping_add(PREFETCH) as *const i8);
                _mm_prefetch::<STREAM_REUSED>(ql.wrapping_add(PREFETCH + 64) as *const i8);
            }
            // Bytes 0..32 and 32..64: the value groups 0 and 1 of this half (their low nibbles)
            // and 2 and 3 (their high nibbles).
            let ql = _mm512_loadu_si512(ql as *const __m512i);
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(128 + 32 * half) as *const __m256i));
            // The 2-bit highs of value group g sit at bits 2g..2g+2 of each qh byte.
            let hi = |shift: __m512i| _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift), low2), 4);
            let q = [
                _mm512_or_si512(_mm512_and_si512(ql, low4), hi(_mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2))),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                    hi(_mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6)),
                ),
            ];
            for (pair, q) in q.into_iter().enumerate() {
                let mask = _mm256_loadu_si256(Q6K_SCALE_QUADS[2 * half + pair].as_ptr() as *const __m256i);
                let sc = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(scales, mask));
                for c in 0..C {
                    let xq = xs[c].q.as_ptr().add(b * 256 + 128 * half + 64 * pair);
                    let xv = _mm512_loadu_si512(xq as *const __m512i);
                    // (q - 32) x in i16 pairs: q x - 32 x.
                    let p = _mm512_sub_epi16(_mm512_maddubs_epi16(q, xv), _mm512_maddubs_epi16(m32, xv));
                    sumi[c] = _mm512_dpwssd_epi32(sumi[c], p, sc);
                }
            }
        }
        let dw = last_f16(blk.add(202));
        for c in 0..C {
            let d = xs[c].d[b] * dw;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(halves_added(sumi[c])), acc[c]);
        }
    }
    hsums(acc)
}

tile_rows!(tile_q6k, q6k_cols, "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma");

/// One Q6_K row dotted with one activation row (decode): [`q6k_cols`] with one column, so bit
/// for bit `avx2::dot_q6k`, with half the instructions per block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
pub unsafe fn dot_q6k(row: &[u8], x: &ActRow) -> f32 {
    q6k_cols::<1>(row.as_ptr(), row.len(), [x])[0]
}
