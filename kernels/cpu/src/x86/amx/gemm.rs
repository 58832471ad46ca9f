//! bf16 products (`crate::half_gemm`) on AMX tiles (`tdpbf16ps`: 16 × 16 f32 accumulators, 32 values of k per
//! instruction) where the CPU has AMX-BF16 and the OS lets this process use it ([`available`]).
//!
//! The weight (n, k) is the tiles' A operand, read in place 16 rows at a time; the activations
//! (m, k) are packed once per product into the B operand's pair layout ([`pack`]). Work units
//! are 32 weight rows (two A tiles) × every activation block, two at a time: four accumulator
//! tiles, each weight tile loaded once per two `tdpbf16ps`, the unit's 32 rows of weight kept in
//! L2 while the activations stream past. Units are split across the caller's pool; each
//! thread configures its own tiles. Accumulators hold outᵀ; they are written out transposed.

mod kernel;
mod pack;
mod store;

pub use crate::cpu_features::amx_available as available;
pub use store::OutElem;

use half::bf16;
use kernel::{Tiles, WeightTile, ROWS};

use crate::out_ptr::OutPtr;
use crate::pool::Pool;

/// Weight blocks (of 16 rows) per work unit.
const UNIT_BLOCKS: usize = 2;

/// `out (m, n) = x (m, k) @ wᵀ` for bf16 `x` and `w` (n, k), any shapes, written as f32 or
/// rounded once to bf16. Panics where [`available`] is false.
pub fn product<O: OutElem>(w: &[bf16], x: &[bf16], m: usize, n: usize, k: usize, pool: &impl Pool, out: &mut [O]) {
    assert!(available(), "AMX tiles used where the process may not run them");
    assert!(w.len() >= n * k && x.len() >= m * k && out.len() >= m * n && k > 0);
    let xp = pack::activations(x, m, k, pool);
    // The last, partial block of weight rows, zero-padded to 16 rows and whole k steps.
    let full = n / ROWS;
    let last = (full < n.div_ceil(ROWS)).then(|| pack::weight_rows(w, k, full * ROWS, n - full * ROWS, 0));
    let units = n.div_ceil(ROWS).div_ceil(UNIT_BLOCKS);
    let ptr = OutPtr(out.as_mut_ptr());
    let body = |range: std::ops::Range<usize>| {
        // SAFETY: `available()` held (asserted above).
        let tiles = unsafe { Tiles::configure() };
        for u in range {
            unit(&tiles, w, k, n, m, &xp, last.as_ref(), u, &ptr);
        }
    };
    pool.execute_chunked_if(m * n * k >= crate::half_gemm::PARALLEL_MIN, units, body);
}

/// Output columns of weight blocks `UNIT_BLOCKS · u ..` (fewer at the end), every row.
#[allow(clippy::too_many_arguments)]
fn unit<O: OutElem>(
    tiles: &Tiles,
    w: &[bf16],
    k: usize,
    n: usize,
    m: usize,
    xp: &pack::PackedActivations,
    last: Option<&(Vec<bf16>, usize)>,
    u: usize,
    out: &OutPtr<O>,
) {
    let full = n / ROWS;
    let first = u * UNIT_BLOCKS;
    let count = UNIT_BLOCKS.min(n.div_ceil(ROWS) - first);
    let direct = k / kernel::K_STEP;
    // The k tails of full blocks (zero-padded), kept alive while their tiles point at them.
    let mut tails: [Option<(Vec<bf16>, usize)>; UNIT_BLOCKS] = Default::default();
    let mut a = [WeightTile { ptr: std::ptr::null(), stride: 0, direct: 0, tail: std::ptr::null() }; UNIT_BLOCKS];
    for t in 0..count {
        let b = first + t;
        a[t] = if b < full {
            let tail = (direct < xp.steps).then(|| pack::weight_rows(w, k, b * ROWS, ROWS, direct * kernel::K_STEP));
            let tail_ptr = tail.as_ref().map_or(std::ptr::null(), |(v, _)| v.as_ptr() as *const u8);
            tails[t] = tail;
            WeightTile { ptr: w[b * ROWS * k..].as_ptr() as *const u8, stride: 2 * k, direct, tail: tail_ptr }
        } else {
            let (v, width) = last.expect("the partial block was padded");
            WeightTile { ptr: v.as_ptr() as *const u8, stride: 2 * width, direct: xp.steps, tail: std::ptr::null() }
        };
    }
    let mut c = [[[0f32; ROWS * ROWS]; 2]; 2];
    let mut i = 0;
    while i < xp.blocks {
        let nb = 2.min(xp.blocks - i);
        // SAFETY: tiles are configured on this thread; each weight tile reads its 16 rows over
        // `direct` steps in place (full blocks: rows b·16.. of w, steps below k / 32), its tail
        // from a padded 16 × 32 copy, or all steps from the padded last block; the activation
        // blocks i, i + 1 (< blocks) hold `steps` tiles each.
        unsafe {
            let x2 = [xp.block(i), xp.block((i + 1).min(xp.blocks - 1))];
            match (count, nb) {
                (2, 2) => kernel::block::<2, 2>(tiles, &a, &x2, xp.steps, &mut c),
                (2, _) => kernel::block::<2, 1>(tiles, &a, &[x2[0]], xp.steps, &mut c),
                (_, 2) => kernel::block::<1, 2>(tiles, &[a[0]], &x2, xp.steps, &mut c),
                _ => kernel::block::<1, 1>(tiles, &[a[0]], &[x2[0]], xp.steps, &mut c),
            }
        }
        for (t, ct) in c.iter().enumerate().take(count) {
            for (h, tile) in ct.iter().enumerate().take(nb) {
                // SAFETY: AMX implies AVX-512 F/BW/VL; the tile's corner is inside the m × n
                // output, and columns (first + t)·16.. of this unit are written by this unit only.
                unsafe { store::tile(tile, out.at(0), (i + h) * ROWS, (first + t) * ROWS, m, n) };
            }
        }
        i += nb;
    }
}
