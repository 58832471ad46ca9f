//! The thread pool the kernels split their work over, as the caller provides it: a backend
//! passes its own pool (the candle backend: candle's barrier pool), so kernels and the rest of
//! the backend share one set of threads. Generic, not `dyn`: each call is a direct one.

use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A pool of threads that runs a closure over the items `0..items`.
pub trait Pool: Sync {
    /// The threads a call runs on: the pool's workers and the calling thread.
    fn threads(&self) -> usize;

    /// `f` over `0..items` in ranges handed to the threads (the calling thread included); every
    /// item is passed exactly once, and the call returns once all ranges are done.
    fn execute_chunked<F: Fn(Range<usize>) + Sync>(&self, items: usize, f: F);

    /// [`Pool::execute_chunked`] where `parallel` says the work pays for waking the pool and
    /// there is more than one item; otherwise `f(0..items)` in one call on this thread.
    fn execute_chunked_if<F: Fn(Range<usize>) + Sync>(&self, parallel: bool, items: usize, f: F) {
        if parallel && items > 1 {
            self.execute_chunked(items, f)
        } else if items > 0 {
            f(0..items)
        }
    }
}

impl<P: Pool> Pool for &P {
    fn threads(&self) -> usize {
        (**self).threads()
    }

    fn execute_chunked<F: Fn(Range<usize>) + Sync>(&self, items: usize, f: F) {
        (**self).execute_chunked(items, f)
    }
}

/// A `Vec` of `n` elements, `fill(start, out)` writing every element of `out` (elements
/// `start..start + out.len()`), in pieces of `piece` elements over `pool` (one call on the
/// calling thread below two pieces).
pub fn filled_in_pieces<T: Send>(
    pool: &impl Pool,
    n: usize,
    piece: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync,
) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    let spare = &mut v.spare_capacity_mut()[..n];
    if n < 2 * piece {
        fill(0, spare);
    } else {
        let p = crate::out_ptr::OutPtr(spare.as_mut_ptr());
        pool.execute_chunked(n.div_ceil(piece), |pieces| {
            for i in pieces {
                let start = i * piece;
                // SAFETY: pieces are disjoint and inside the first `n` elements of the capacity.
                let out = unsafe { std::slice::from_raw_parts_mut(p.at(start), piece.min(n - start)) };
                fill(start, out);
            }
        });
    }
    // SAFETY: every piece of `0..n` was written by `fill`.
    unsafe { v.set_len(n) };
    v
}

/// Everything on the calling thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inline;

impl Pool for Inline {
    fn threads(&self) -> usize {
        1
    }

    fn execute_chunked<F: Fn(Range<usize>) + Sync>(&self, items: usize, f: F) {
        if items > 0 {
            f(0..items)
        }
    }
}

/// `n` threads started for each call (scoped), taking one item at a time from a shared
/// cursor: for the kernels' own tests and benches, which have no backend's pool.
#[derive(Clone, Copy, Debug)]
pub struct ScopedThreads(pub usize);

impl ScopedThreads {
    /// One thread per core this process may use.
    pub fn per_core() -> ScopedThreads {
        ScopedThreads(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

impl Pool for ScopedThreads {
    fn threads(&self) -> usize {
        self.0.max(1)
    }

    fn execute_chunked<F: Fn(Range<usize>) + Sync>(&self, items: usize, f: F) {
        let next = AtomicUsize::new(0);
        let run = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= items {
                break;
            }
            f(i..i + 1);
        };
        std::thread::scope(|s| {
            for _ in 1..self.threads().min(items) {
                s.spawn(run);
            }
            run();
        });
    }
}
