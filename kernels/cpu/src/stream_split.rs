//! Splitting a weight stream over the thread pool: one contiguous share per thread, walked
//! front to back, and a thread done with its own share takes pieces from the back of the
//! others'.
//!
//! A decode product reads each weight once, so its speed is the memory stream's. Handing out
//! small chunks from a shared cursor ([`Pool::execute_chunked`]) cuts that stream into pieces
//! that start cold (the read-ahead begins again at each) and whose read-ahead runs past their
//! end into rows another thread then reads; one contiguous share per thread keeps one long
//! stream each. Stealing from the back keeps what the cursor was for: a thread that starts late
//! has its share done by the others (one descheduled still holds up the piece it claimed: up to
//! half its share, as pieces are halves; capping them at 1 MB made Gemma decode 5% slower).
//! Gemma 3 270M decode on two Zen 5 threads: the layers' products 2.6-2.9 -> 1.6-1.8 ms a token
//! (alternating runs; see docs/backends/candle.md).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::pool::Pool;

/// The fewest weight bytes a decode product's thread claims at a time: callers pass `step` as
/// this many bytes' worth of their items.
pub const MIN_PIECE_BYTES: usize = 8 << 10;

/// `f` over `0..items` in pieces, on the pool: each thread walks its own contiguous share from
/// the front, then takes pieces from the back of the shares with the most left. A piece is half
/// of what its share has left, at least `step` items: few claims (each one a locked instruction,
/// which waits for the reads in flight; 8 KB pieces throughout ran 15% slower than these), small
/// ones at the end where they even out the threads. Every item is passed to `f` exactly once.
/// Runs inline on one thread (or nested in a pool task).
pub fn for_each_share<F: Fn(Range<usize>) + Sync>(pool: &impl Pool, items: usize, step: usize, f: F) {
    let threads = pool.threads();
    let step = step.max(1);
    if items == 0 {
        return;
    }
    if threads == 1 || items <= step {
        return f(0..items);
    }
    if items > u32::MAX as usize {
        // Past what a share's word holds: plain pieces from the cursor.
        let end = |p: usize| p.checked_mul(step).map_or(items, |e| e.min(items));
        return pool.execute_chunked(items.div_ceil(step), |r| f(end(r.start)..end(r.end)));
    }
    let shares = shares(items, threads);
    // The pool's cursor hands each thread one share index (all of them, in turn, when it runs
    // the closure inline).
    pool.execute_chunked(threads, |own| work(&shares, own, step, &f));
}

/// `threads` shares of `0..items` (at most `u32::MAX` items), as equal as can be.
fn shares(items: usize, threads: usize) -> Vec<Share> {
    let bound = |t: usize| (items as u64 * t as u64 / threads as u64) as usize;
    (0..threads).map(|t| Share::new(bound(t), bound(t + 1))).collect()
}

/// One thread's part: the shares `own` from the front, then help with what is left of all.
fn work(shares: &[Share], own: Range<usize>, step: usize, f: &impl Fn(Range<usize>)) {
    for s in own {
        while let Some(r) = shares[s].take_front(step) {
            f(r);
        }
    }
    while let Some(r) = steal(shares, step) {
        f(r);
    }
}

/// A piece from the back of the share with the most items left, if any are.
fn steal(shares: &[Share], step: usize) -> Option<Range<usize>> {
    loop {
        // One read of each: a victim drained since it was chosen is simply skipped (a share
        // seen empty stays empty, so this ends).
        let (victim, left) = shares.iter().map(|s| (s, s.left())).max_by_key(|&(_, left)| left)?;
        if left == 0 {
            return None;
        }
        if let Some(r) = victim.take_back(step) {
            return Some(r);
        }
    }
}

/// The items left of one share, `front..back`, packed in one word so that its owner (from the
/// front) and helpers (from the back) claim disjoint pieces with one compare-and-swap. Each on
/// cache lines of its own: owners claiming pieces of neighbouring shares in one line would pass
/// it between cores at every claim (8 KB pieces ran 30% slower so).
#[repr(align(128))]
struct Share(AtomicU64);

impl Share {
    fn new(front: usize, back: usize) -> Self {
        Share(AtomicU64::new(pack(front, back)))
    }

    fn left(&self) -> usize {
        let (front, back) = unpack(self.0.load(Ordering::Relaxed));
        back.saturating_sub(front)
    }

    fn take_front(&self, step: usize) -> Option<Range<usize>> {
        self.take(|front, back| {
            let end = front + piece(back - front, step);
            (front..end, pack(end, back))
        })
    }

    fn take_back(&self, step: usize) -> Option<Range<usize>> {
        self.take(|front, back| {
            let start = back - piece(back - front, step);
            (start..back, pack(front, start))
        })
    }

    /// Claims the piece `cut(front, back)` names (called with `front < back`), leaving the word
    /// it returns.
    fn take(&self, cut: impl Fn(usize, usize) -> (Range<usize>, u64)) -> Option<Range<usize>> {
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            let (front, back) = unpack(word);
            if front >= back {
                return None;
            }
            let (piece, rest) = cut(front, back);
            match self.0.compare_exchange_weak(word, rest, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(piece),
                Err(now) => word = now,
            }
        }
    }
}

/// How many of `left` (> 0) items one claim takes: half, at least `step`, at most all.
fn piece(left: usize, step: usize) -> usize {
    (left / 2).max(step).min(left)
}

fn pack(front: usize, back: usize) -> u64 {
    (front as u64) | ((back as u64) << 32)
}

fn unpack(word: u64) -> (usize, usize) {
    ((word & 0xffff_ffff) as usize, (word >> 32) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Inline, ScopedThreads};
    use std::sync::atomic::AtomicU32;

    fn visits(items: usize) -> Vec<AtomicU32> {
        (0..items).map(|_| AtomicU32::new(0)).collect()
    }

    fn visit(seen: &[AtomicU32], r: Range<usize>) {
        assert!(!r.is_empty());
        r.for_each(|i| {
            seen[i].fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Through the pool: every item exactly once, whatever the step and count (including counts
    /// that do not divide among the threads, and steps larger than a share).
    #[test]
    fn every_item_once() {
        for items in [0, 1, 2, 3, 7, 64, 65, 1000, 4097] {
            for step in [1, 3, 16, 5000] {
                let seen = visits(items);
                for pool in [ScopedThreads(1), ScopedThreads(3)] {
                    let seen = visits(items);
                    for_each_share(&pool, items, step, |r| visit(&seen, r));
                    assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "{items} items, step {step}");
                }
                for_each_share(&Inline, items, step, |r| visit(&seen, r));
                assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "{items} items, step {step}");
            }
        }
    }

    /// The claiming protocol under real contention, whatever the pool's size on this machine:
    /// threads that each own a share, start at once and then steal, some owning none (they
    /// start late, as a worker woken late does); every item exactly once.
    #[test]
    fn concurrent_owners_and_thieves_cover_every_item_once() {
        for (items, threads, step) in [(100_003, 4, 1), (100_003, 3, 7), (65, 5, 2), (4096, 2, 64), (9, 8, 1)] {
            for _ in 0..20 {
                let shares = shares(items, threads);
                let seen = visits(items);
                std::thread::scope(|s| {
                    for t in 0..threads + 2 {
                        let (shares, seen) = (&shares, &seen);
                        // Threads past `threads` own nothing: pure thieves.
                        let own = if t < threads { t..t + 1 } else { 0..0 };
                        s.spawn(move || work(shares, own, step, &|r| visit(seen, r)));
                    }
                });
                assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "{items} items, {threads} shares");
            }
        }
    }

    /// Owner and helper cut one share from both ends without overlap, down to the last item;
    /// pieces are half of what is left.
    #[test]
    fn front_and_back_meet() {
        let s = Share::new(10, 17);
        assert_eq!(s.take_front(1), Some(10..13));
        assert_eq!(s.take_back(1), Some(15..17));
        assert_eq!(s.take_front(1), Some(13..14));
        assert_eq!(s.take_back(3), Some(14..15));
        assert_eq!(s.take_front(1), None);
        assert_eq!(s.take_back(1), None);
        assert_eq!(s.left(), 0);
    }
}
