//! What a streaming decode carries from one chunk to the next.

use infer_core::Tensor;

/// Per-layer left context (conv inputs, attention keys and values) plus the transformer position.
/// Every stateful layer takes one slot per call, in forward order, so the slots line up between
/// calls without the decoder naming each one; a fresh `Carry` is the start of an utterance.
#[derive(Default)]
pub struct Carry {
    slots: Vec<Option<Tensor>>,
    next: usize,
    /// Frames the pre-transformer has seen (its RoPE offset).
    pub position: usize,
}

impl Carry {
    /// Called at the start of each forward pass.
    pub fn begin(&mut self) {
        self.next = 0;
    }

    /// Values held as left context across all layers: bounded, so a chunk's decode costs the same
    /// at any position in the utterance.
    pub fn carried_values(&self) -> usize {
        self.slots.iter().flatten().map(Tensor::elem_count).sum()
    }

    /// The next layer's slot: `None` the first time, what it stored there after that.
    pub fn slot(&mut self) -> &mut Option<Tensor> {
        if self.next == self.slots.len() {
            self.slots.push(None);
        }
        self.next += 1;
        &mut self.slots[self.next - 1]
    }
}
