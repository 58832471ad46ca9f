//! GGML block-quantized weights multiplied as they are stored in the file (Q8_0, Q5_0, Q4_K,
//! Q6_K): no repacking, activations quantized to 8 bits once per call, weight rows split across
//! the caller's thread pool. Decode reads each weight byte once per token, which is what bounds
//! its speed.
//!
//! This module is the family's dispatch: it picks each product's kernels from
//! [`crate::cpu_features::isa`] (the portable ones in [`crate::generic::ggml`], the SIMD ones in
//! `x86/avx2` and `x86/avx512`) and walks the matrix with them.

pub mod act;
pub mod formats;
pub mod quantize_q4k;
pub mod quantize_q8_0;

use crate::cpu_features::{isa, Isa};
use crate::pool::Pool;
use crate::stream_split;
#[cfg(target_arch = "x86_64")]
use crate::x86::avx2::{ggml as avx2, ggml_panel as avx2_panel};
#[cfg(target_arch = "x86_64")]
use crate::x86::avx512::ggml as avx512;

use act::{ActRow, QuantizedActs};
pub use formats::Format;

/// Bytes of one row of `cols` values in `format`.
#[inline]
pub fn row_bytes(format: Format, cols: usize) -> usize {
    cols / format.block_values() * format.block_bytes()
}

/// Below this many weight values a product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 15;

type DotFn = fn(&[u8], &ActRow) -> f32;
/// Weight rows per work item.
const GROUP: usize = 4;
/// GROUP consecutive rows (`row_bytes` each) dotted with one activation row.
type GroupDotFn = fn(&[u8], usize, &ActRow) -> [f32; GROUP];
/// Activation rows per prefill tile.
const TILE_COLS: usize = 2;
/// GROUP weight rows × C activation rows.
type TileOf<const C: usize> = fn(&[u8], usize, &[ActRow; C]) -> [[f32; C]; GROUP];
/// GROUP weight rows × TILE_COLS activation rows.
type TileFn = TileOf<TILE_COLS>;
/// Activation rows per wide tile: where 32 vector registers hold the accumulators (AVX-512), a
/// row's unpacked weights serve this many activation rows.
const WIDE_COLS: usize = 4;
/// GROUP weight rows × WIDE_COLS activation rows.
type WideTileFn = TileOf<WIDE_COLS>;

/// GROUP unpacked weight rows (a panel, see `avx2_panel`) × C activation rows, each with the
/// per-pair values the panel's `prepare` made for it.
type PanelTileOf<const C: usize> = fn(&[u8], usize, &[ActRow; C], &[&[i16]; C]) -> [[f32; C]; GROUP];
/// Activation rows per panel tile: one weight row's unpacked blocks serve this many.
const PANEL_COLS: usize = 4;

/// Prefill over weights unpacked once per group (see `avx2_panel`): `unpack` writes GROUP rows
/// (`row_bytes` each) into a panel of `block_bytes` per block, `prepare` forms per-pair values of
/// the quantized activations once per product, the tiles multiply panel rows.
#[derive(Clone, Copy)]
struct PanelKernel {
    unpack: fn(&[u8], usize, &mut [u8]),
    prepare: fn(&[i8]) -> Vec<i16>,
    tile: PanelTileOf<PANEL_COLS>,
    single: PanelTileOf<1>,
    block_bytes: usize,
}
/// Activation rows from which unpacking a group first pays for itself (it costs about one
/// pass of a fused tile).
const PANEL_MIN_ROWS: usize = 4;

/// `x @ wᵀ` for the GGML matrix `w` (`rows × cols` values in `format`, `blocks` its rows'
/// blocks back to back) and `x` of `m` rows of `cols` values: `m × rows` values, row-major.
/// `cols` must be whole blocks and `blocks` exactly `rows` rows of them.
pub fn matmul(
    format: Format,
    blocks: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    m: usize,
    pool: &impl Pool,
) -> Vec<f32> {
    let (n, k) = (rows, cols);
    assert!(cols.is_multiple_of(format.block_values()) && blocks.len() == rows * row_bytes(format, cols));
    let acts = QuantizedActs::new(format.act(), &x[..m * k], k);
    let xs: Vec<ActRow> = (0..m).map(|i| acts.row(i)).collect();
    let (dot, dot_group) = (kernel(format), group_kernel(format));
    let (rb, data) = (row_bytes(format, cols), blocks);
    let row = |j: usize| &data[j * rb..(j + 1) * rb];
    let tile = tile_kernel(format);
    let wide = wide_tile_kernel(format);
    let panel_kernel = panel_kernel(format).filter(|_| m >= PANEL_MIN_ROWS);
    let panel_row = k / format.block_values() * panel_kernel.map_or(0, |p| p.block_bytes);
    let pair_values = panel_kernel.map_or(Vec::new(), |p| (p.prepare)(&acts.q));
    let pairs: Vec<&[i16]> = pair_values.chunks_exact(k / 2).collect();
    let mut out = vec![0f32; m * n];
    let out_ptr = OutPtr(out.as_mut_ptr());
    // Work items are groups of GROUP weight rows, dotted with every activation row while
    // they are in cache (TILE_COLS activation rows at a time where a tile kernel exists).
    let body = |groups: std::ops::Range<usize>| {
        let mut panel = vec![0u8; GROUP * panel_row];
        for g in groups {
            let (j0, j1) = (g * GROUP, ((g + 1) * GROUP).min(n));
            let mut i0 = 0;
            if j1 - j0 == GROUP {
                let w = &data[j0 * rb..j1 * rb];
                // SAFETY (all run_tiles calls): this worker owns rows j0..j1 of every
                // output row.
                if let Some(p) = panel_kernel {
                    (p.unpack)(w, rb, &mut panel);
                    let panel = &panel;
                    unsafe {
                        run_tiles(m, &mut i0, &out_ptr, n, j0, |i| {
                            (p.tile)(panel, panel_row, window(&xs, i), window(&pairs, i))
                        })
                    };
                    unsafe {
                        run_tiles(m, &mut i0, &out_ptr, n, j0, |i| {
                            (p.single)(panel, panel_row, window(&xs, i), window(&pairs, i))
                        })
                    };
                }
                if let Some(wide) = wide {
                    unsafe { run_tiles(m, &mut i0, &out_ptr, n, j0, |i| wide(w, rb, window(&xs, i))) };
                }
                if let Some(tile) = tile {
                    unsafe { run_tiles(m, &mut i0, &out_ptr, n, j0, |i| tile(w, rb, window(&xs, i))) };
                }
            }
            for (i, x) in xs.iter().enumerate().skip(i0) {
                // SAFETY (both writes): (i, j) is written only by the worker that owns row
                // j's group; i < m, j < n.
                if j1 - j0 == GROUP {
                    let v = dot_group(&data[j0 * rb..j1 * rb], rb, x);
                    for (r, v) in v.into_iter().enumerate() {
                        unsafe { *out_ptr.at(i * n + j0 + r) = v };
                    }
                } else {
                    for j in j0..j1 {
                        unsafe { *out_ptr.at(i * n + j) = dot(row(j), x) };
                    }
                }
            }
        }
    };
    let groups = n.div_ceil(GROUP);
    if n * k < PARALLEL_MIN {
        body(0..groups);
    } else if m == 1 {
        // Decode reads each weight once: one long stream per thread.
        stream_split::for_each_share(pool, groups, (stream_split::MIN_PIECE_BYTES / (GROUP * rb)).max(1), body);
    } else {
        pool.execute_chunked(groups, body);
    }
    out
}

struct OutPtr(*mut f32);
// SAFETY: workers write disjoint elements (one output column per weight row).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    #[inline]
    fn at(&self, i: usize) -> *mut f32 {
        // SAFETY: callers stay within the output buffer.
        unsafe { self.0.add(i) }
    }
}

/// Tiles of `C` activation rows from `*i0` on, as long as `C` of the `rows` remain: `tile(i)`
/// gives the GROUP weight rows (output columns `j0..j0 + GROUP`) × activation rows `i..i + C`;
/// advances `*i0` past them.
///
/// # Safety
/// `out` holds `rows` rows of `n` values, `j0 + GROUP <= n`, and no other thread writes those
/// columns.
unsafe fn run_tiles<const C: usize>(
    rows: usize,
    i0: &mut usize,
    out: &OutPtr,
    n: usize,
    j0: usize,
    mut tile: impl FnMut(usize) -> [[f32; C]; GROUP],
) {
    while *i0 + C <= rows {
        for (r, v) in tile(*i0).into_iter().enumerate() {
            for (c, v) in v.into_iter().enumerate() {
                *out.at((*i0 + c) * n + j0 + r) = v;
            }
        }
        *i0 += C;
    }
}

/// The `C` items of `v` from `i` on.
#[inline]
fn window<T, const C: usize>(v: &[T], i: usize) -> &[T; C] {
    v[i..i + C].try_into().expect("C rows")
}

/// The fastest dot product this CPU has for `format`.
fn kernel(format: Format) -> DotFn {
    kernel_for(format, isa())
}

/// The dot product for `format` written for `isa` (which must not exceed the CPU's).
fn kernel_for(format: Format, isa: Isa) -> DotFn {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY (all): `isa()` checked the features each kernel is compiled for at run time;
        // the AVX-512 Q5_0 kernel also needs an even block count, checked here.
        if isa >= Isa::Avx512 && format == Format::Q8_0 {
            return |w, x| unsafe { avx512::dot_q8_0_rows::<1>(w.as_ptr(), w.len(), x)[0] };
        }
        if isa >= Isa::Avx512 && format == Format::Q6K {
            return |w, x| unsafe { avx512::dot_q6k(w, x) };
        }
        if isa >= Isa::Avx512 && format == Format::Q5_0 {
            return |w, x| {
                if (w.len() / 22) % 2 == 0 {
                    unsafe { avx512::dot_q5_0_rows::<1>(w.as_ptr(), w.len(), x)[0] }
                } else {
                    unsafe { avx2::dot_q5_0(w, x) }
                }
            };
        }
        if isa >= Isa::Avx2 {
            return match format {
                Format::Q8_0 => |w, x| unsafe { avx2::dot_q8_0(w, x) },
                Format::Q5_0 => |w, x| unsafe { avx2::dot_q5_0(w, x) },
                Format::Q4K => |w, x| unsafe { avx2::dot_q4k(w, x) },
                Format::Q6K => |w, x| unsafe { avx2::dot_q6k(w, x) },
            };
        }
    }
    let _ = isa;
    match format {
        Format::Q8_0 => |w, x| Format::Q8_0.dot_scalar(w, x),
        Format::Q5_0 => |w, x| Format::Q5_0.dot_scalar(w, x),
        Format::Q4K => |w, x| Format::Q4K.dot_scalar(w, x),
        Format::Q6K => |w, x| Format::Q6K.dot_scalar(w, x),
    }
}

/// The multi-row kernel for `format`, or GROUP calls of the one-row kernel.
fn group_kernel(format: Format) -> GroupDotFn {
    group_kernel_for(format, isa())
}

fn group_kernel_for(format: Format, isa: Isa) -> GroupDotFn {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY (all): as in `kernel`; the slice holds GROUP rows of `rb` bytes.
        if isa >= Isa::Avx512 && format == Format::Q8_0 {
            return |w, rb, x| unsafe { avx512::dot_q8_0_rows::<GROUP>(w.as_ptr(), rb, x) };
        }
        if q5_0_lanes(isa) && format == Format::Q5_0 {
            return |w, rb, x| unsafe { avx512::dot_q5_0_row_pairs::<GROUP>(w.as_ptr(), rb, x) };
        }
        if isa >= Isa::Avx512 && format == Format::Q4K {
            return |w, rb, x| unsafe { avx512::dot_q4k_row_pairs::<GROUP>(w.as_ptr(), rb, x) };
        }
        if isa >= Isa::Avx2 {
            match format {
                Format::Q8_0 => return |w, rb, x| unsafe { avx2::dot_q8_0_rows::<GROUP>(w.as_ptr(), rb, x) },
                Format::Q5_0 => return |w, rb, x| unsafe { avx2::dot_q5_0_rows::<GROUP>(w.as_ptr(), rb, x) },
                _ => {}
            }
        }
    }
    let _ = isa;
    // The scalar grouping is only reached with `isa()` itself, so the one-row kernels match.
    match format {
        Format::Q8_0 => |w, rb, x| one_by_one(kernel(Format::Q8_0), w, rb, x),
        Format::Q5_0 => |w, rb, x| one_by_one(kernel(Format::Q5_0), w, rb, x),
        Format::Q4K => |w, rb, x| one_by_one(kernel(Format::Q4K), w, rb, x),
        Format::Q6K => |w, rb, x| one_by_one(kernel(Format::Q6K), w, rb, x),
    }
}

/// The prefill tile kernel for `format` (AVX2: bit-identical to the one-row kernels of every
/// instruction set).
fn tile_kernel(format: Format) -> Option<TileFn> {
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 && format == Format::Q8_0 {
        // SAFETY: as in `kernel`; the slice holds GROUP (even) rows.
        return Some(|w, rb, x| unsafe { avx512::tile_q8_0_pairs::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) });
    }
    #[cfg(target_arch = "x86_64")]
    if q5_0_lanes(isa()) && format == Format::Q5_0 {
        // SAFETY: as in `kernel`; the slice holds GROUP (even) rows.
        return Some(|w, rb, x| unsafe { avx512::tile_q5_0_pairs::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) });
    }
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 && format == Format::Q6K {
        // SAFETY: as in `kernel`; the slice holds GROUP rows.
        return Some(|w, rb, x| unsafe { avx512::tile_q6k::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) });
    }
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 && format == Format::Q4K {
        // SAFETY: as in `kernel`; the slice holds GROUP (even) rows.
        return Some(|w, rb, x| unsafe { avx512::tile_q4k_pairs::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) });
    }
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx2 {
        // SAFETY (both): `isa()` checked avx2, fma and f16c; the slice holds GROUP rows.
        match format {
            Format::Q8_0 => return Some(|w, rb, x| unsafe { avx2::tile_q8_0::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) }),
            Format::Q5_0 => return Some(|w, rb, x| unsafe { avx2::tile_q5_0::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) }),
            Format::Q4K => return Some(|w, rb, x| unsafe { avx2::tile_q4k::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) }),
            Format::Q6K => return Some(|w, rb, x| unsafe { avx2::tile_q6k::<GROUP, TILE_COLS>(w.as_ptr(), rb, x) }),
        }
    }
    let _ = format;
    None
}

/// The unpack-once prefill for `format`, where one exists: Q5_0 on AVX2-only CPUs (the AVX-512
/// kernels have registers enough to unpack on the fly, and their own lane order). Measured,
/// Qwen2.5-Coder 0.5B 128-token prefill: see docs/backends/candle.md.
fn panel_kernel(format: Format) -> Option<PanelKernel> {
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx2 && format == Format::Q5_0 {
        return Some(PanelKernel {
            // SAFETY (all): `isa()` checked avx2, fma and f16c; `w` holds GROUP rows, `panel`
            // GROUP panel rows (its size is checked) and each pair slice k / 2 values.
            unpack: |w, rb, panel| unsafe { avx2_panel::unpack_q5_0(w.as_ptr(), rb, w.len() / rb, panel) },
            prepare: |q| unsafe { avx2_panel::q5_0_pair_offsets(q) },
            tile: |p, prb, x, o| unsafe { avx2_panel::tile_q5_0::<GROUP, PANEL_COLS>(p.as_ptr(), prb, x, o) },
            single: |p, prb, x, o| unsafe { avx2_panel::tile_q5_0::<GROUP, 1>(p.as_ptr(), prb, x, o) },
            block_bytes: avx2_panel::Q5_0_PANEL_BLOCK,
        });
    }
    let _ = format;
    None
}

/// The wide tile for `format`, where one exists (AVX-512 CPUs, whose 32 vector registers hold
/// the accumulators): Q5_0, Q4_K and Q8_0 (two weight rows per register; Q5_0 any block count)
/// and Q6_K (two value groups per register, `vpdpwssd`). Measured,
/// 1-thread prefill (Xeon box, the earlier layouts): Q5_0 Gemma 3 270M +25%, Qwen2.5 0.5B +10%;
/// the k-quants Qwen +8% (once their scales were vectorized; before, the 4-wide k-quant tiles
/// gained nothing). The current layouts on Zen 4: docs/backends/candle.md.
/// On AVX2-only CPUs the k-quant tiles run 4 wide too (one weight row at a time, so the
/// accumulators of 4 activation rows fit in 16 registers): 5-10% fewer CPU samples in the Q4_K
/// and Q6_K tiles of a Qwen2.5 0.5B prefill (AMD Zen 3). The AVX2 Q8_0 tile would run out of
/// registers at 4 wide; Q5_0 there takes the panel path instead.
fn wide_tile_kernel(format: Format) -> Option<WideTileFn> {
    #[cfg(target_arch = "x86_64")]
    if q5_0_lanes(isa()) && format == Format::Q5_0 {
        // SAFETY: as in `kernel`; the slice holds GROUP (even) rows.
        return Some(|w, rb, x| unsafe { avx512::tile_q5_0_pairs::<GROUP, WIDE_COLS>(w.as_ptr(), rb, x) });
    }
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx2 {
        // SAFETY (both): as in `kernel`; the slice holds GROUP rows.
        match format {
            Format::Q4K => return Some(|w, rb, x| unsafe { avx2::tile_q4k::<GROUP, WIDE_COLS>(w.as_ptr(), rb, x) }),
            Format::Q6K => return Some(|w, rb, x| unsafe { avx2::tile_q6k::<GROUP, WIDE_COLS>(w.as_ptr(), rb, x) }),
            _ => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if isa() >= Isa::Avx512 {
        // SAFETY (both): as in `kernel`; the slice holds GROUP rows.
        match format {
            Format::Q4K => {
                return Some(|w, rb, x| unsafe { avx512::tile_q4k_pairs::<GROUP, WIDE_COLS>(w.as_ptr(), rb, x) })
            }
            Format::Q6K => return Some(|w, rb, x| unsafe { avx512::tile_q6k::<GROUP, WIDE_COLS>(w.as_ptr(), rb, x) }),
            Format::Q8_0 => {
                return Some(|w, rb, x| unsafe { avx512::tile_q8_0_pairs::<GROUP, WIDE_COLS>(w.as_ptr(), rb, x) })
            }
            _ => {}
        }
    }
    let _ = format;
    None
}

fn one_by_one(dot: DotFn, w: &[u8], row_bytes: usize, x: &ActRow) -> [f32; GROUP] {
    std::array::from_fn(|r| dot(&w[r * row_bytes..(r + 1) * row_bytes], x))
}

/// Whether the AVX-512 Q5_0 row-pair kernels run: they place each block's fifth bits with BMI2's
/// `pdep` (scalar shifts instead made the decode kernel 13% slower), and a virtual machine may
/// expose AVX-512 without BMI2; Q5_0 then takes the AVX2 kernels.
fn q5_0_lanes(isa: Isa) -> bool {
    isa >= Isa::Avx512 && crate::cpu_features::features().bmi2
}

#[cfg(test)]
mod tests;
