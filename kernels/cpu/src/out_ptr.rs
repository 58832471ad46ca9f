//! The one way kernels hand parts of a single output buffer to the thread pool's workers.

/// A raw pointer to an output buffer (f32 unless said) that may cross to the pool's threads.
/// Every user writes only a part of the buffer that no other work item writes (its rows,
/// columns or block).
pub struct OutPtr<T = f32>(pub *mut T);

// SAFETY: callers hand disjoint parts of one buffer to the threads and join them before the
// buffer is read or freed.
unsafe impl<T> Send for OutPtr<T> {}
unsafe impl<T> Sync for OutPtr<T> {}

impl<T> OutPtr<T> {
    /// The address `offset` elements in. A method, so closures capture the whole (Sync) wrapper
    /// rather than its pointer field.
    pub fn at(&self, offset: usize) -> *mut T {
        self.0.wrapping_add(offset)
    }
}
