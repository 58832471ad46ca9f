//! The AMX tile kernel: NA blocks of 16 weight rows × NB blocks of 16 activation rows, the
//! whole k accumulated in tile registers, one `tdpbf16ps` per (weight block, activation block,
//! 32 values of k).
//!
//! Register plan (8 tiles, each 16 rows × 64 bytes): C\[a\]\[b\] in tmm(2a + b) (tmm0..3),
//! weight rows in tmm4/5 (the "A" operand: row-major, so read in place), activations in tmm6/7
//! (the "B" operand: pairs of k interleaved per activation row, packed by `super::pack`).
//! C therefore holds outᵀ: row j (weight row) × column i (activation row).
//!
//! Tile registers are state the compiler knows nothing about: they live across the `asm!`
//! blocks of one [`block`] call, and nothing else in the process uses them (Rust code here is
//! not compiled with AMX enabled, so LLVM never allocates them).

use std::arch::asm;

/// Bytes in one tile row, and k values (bf16) per tile row.
pub const ROW_BYTES: usize = 64;
pub const K_STEP: usize = 32;
/// Rows per tile (weight rows per A tile, activation rows per B tile).
pub const ROWS: usize = 16;
/// Bytes of one packed tile.
pub const TILE_BYTES: usize = ROWS * ROW_BYTES;

/// The 64-byte operand of `ldtilecfg` (palette 1): every tile 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

/// This thread's tile unit, configured; released (`tilerelease`) on drop, so the kernel's
/// large tile state is not saved on every context switch after the product.
pub struct Tiles(());

impl Tiles {
    /// Configures the calling thread's tiles.
    ///
    /// # Safety
    /// [`crate::cpu_features::amx_available`] must have returned true in this process.
    pub unsafe fn configure() -> Tiles {
        let mut cfg = TileConfig { palette: 1, start_row: 0, reserved: [0; 14], colsb: [0; 16], rows: [0; 16] };
        for t in 0..8 {
            cfg.colsb[t] = ROW_BYTES as u16;
            cfg.rows[t] = ROWS as u8;
        }
        // SAFETY: the caller guarantees AMX may run here; the operand is a valid palette-1
        // configuration (8 tiles within the palette's 16 rows × 64 bytes).
        unsafe { asm!("ldtilecfg [{}]", in(reg) &cfg, options(nostack, readonly, preserves_flags)) };
        Tiles(())
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: a `Tiles` exists only after `configure`, i.e. where AMX may run.
        unsafe { asm!("tilerelease", options(nostack, nomem, preserves_flags)) };
    }
}

/// 16 weight rows as an A operand: k steps `0..direct` read in place (`ptr` + 64 · step, rows
/// `stride` bytes apart), the steps after that (one at most: the k tail, zero-padded) from
/// `tail` (rows 64 bytes apart).
#[derive(Clone, Copy)]
pub struct WeightTile {
    pub ptr: *const u8,
    pub stride: usize,
    pub direct: usize,
    pub tail: *const u8,
}

macro_rules! tile_load {
    ($tmm:literal, $ptr:expr, $stride:expr) => {
        asm!(concat!("tileloadd ", $tmm, ", [{p} + {s}*1]"), p = in(reg) $ptr, s = in(reg) $stride,
            options(nostack, readonly, preserves_flags))
    };
}

macro_rules! tile_dot {
    ($c:literal, $a:literal, $b:literal) => {
        asm!(concat!("tdpbf16ps ", $c, ", ", $a, ", ", $b), options(nostack, nomem, preserves_flags))
    };
}

macro_rules! tile_store {
    ($tmm:literal, $ptr:expr) => {
        asm!(concat!("tilestored [{p} + {s}*1], ", $tmm), p = in(reg) $ptr, s = in(reg) ROW_BYTES,
            options(nostack, preserves_flags))
    };
}

/// `c[a][b] = Σ_steps A(w[a]) · B(x[b])` over `steps` k steps (a < NA ≤ 2, b < NB ≤ 2; the
/// other entries of `c` are left alone): c\[a\]\[b\] is row-major 16 × 16, element (r, l) = weight row r of block a · activation row l of block b.
/// `x[b]` points at a packed activation block (step s at + s · [`TILE_BYTES`]).
///
/// # Safety
/// `_tiles` proves this thread configured its tiles; every `w[a]` step below `direct` reads 16
/// rows of 64 bytes from `ptr`, its tail 1 KB, and each `x[b]` `steps` KB, all in bounds.
#[inline]
pub unsafe fn block<const NA: usize, const NB: usize>(
    _tiles: &Tiles,
    w: &[WeightTile; NA],
    x: &[*const u8; NB],
    steps: usize,
    c: &mut [[[f32; ROWS * ROWS]; 2]; 2],
) {
    // SAFETY (all asm below): the tiles are configured (the caller's `Tiles`); loads read the
    // in-bounds operands the caller vouches for, stores write the 1 KB arrays of `c`.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem, preserves_flags)
        );
        for s in 0..steps {
            let a = |t: usize| {
                let wt = &w[t];
                if s < wt.direct {
                    (wt.ptr.add(s * ROW_BYTES), wt.stride)
                } else {
                    (wt.tail, ROW_BYTES)
                }
            };
            let (p, st) = a(0);
            tile_load!("tmm4", p, st);
            if NA == 2 {
                let (p, st) = a(1);
                tile_load!("tmm5", p, st);
            }
            tile_load!("tmm6", x[0].add(s * TILE_BYTES), ROW_BYTES);
            tile_dot!("tmm0", "tmm4", "tmm6");
            if NA == 2 {
                tile_dot!("tmm2", "tmm5", "tmm6");
            }
            if NB == 2 {
                tile_load!("tmm7", x[NB - 1].add(s * TILE_BYTES), ROW_BYTES);
                tile_dot!("tmm1", "tmm4", "tmm7");
                if NA == 2 {
                    tile_dot!("tmm3", "tmm5", "tmm7");
                }
            }
        }
        tile_store!("tmm0", c[0][0].as_mut_ptr());
        if NB == 2 {
            tile_store!("tmm1", c[0][NB - 1].as_mut_ptr());
        }
        if NA == 2 {
            tile_store!("tmm2", c[NA - 1][0].as_mut_ptr());
            if NB == 2 {
                tile_store!("tmm3", c[NA - 1][NB - 1].as_mut_ptr());
            }
        }
    }
}
