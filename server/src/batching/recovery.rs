//! After a step panicked or failed as a whole: a new batch, the blame on the sequence admitted
//! last, and the others resumed: their prompt and tokens so far recomputed as they were (a
//! prefill, then one decode step per token), so they go on with the tokens they would have had.
//!
//! The rules: a failed step blames its one fresh admission (admitted since the last step that ran
//! through), which gets the error. Several fresh ones go on probation: re-admitted one per step, so
//! the next failure has one to blame. A failure with no fresh admission puts everyone on
//! probation. A sequence in two failed steps without a good one between fails: the failure follows
//! it, and the server must go on.

use std::any::Any;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use infer_core::text::tokenizer::StreamDecoder;
use infer_core::{SeqId, SequenceBatch, TextModel, Tokenizer};

use super::{Batch, Live, Scheduler};
use crate::error::ApiError;

pub(super) fn new_batch(model: &dyn TextModel) -> Result<Batch<'_>, String> {
    catch_unwind(AssertUnwindSafe(|| model.sequence_batch()))
        .map_err(|p| format!("panic making the batch: {}", panic_message(&*p)))?
        .map_err(|e| e.to_string())
}

pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// The text of `generated` past the `emitted` bytes the client has: what the engine held back
/// (the possible start of a stop string) and would have sent later.
pub(super) fn held_text(tokenizer: &dyn Tokenizer, generated: &[u32], emitted: usize) -> String {
    let mut decoder = StreamDecoder::new();
    let mut full = String::new();
    for &id in generated {
        if let Ok(t) = decoder.push(tokenizer, id) {
            full.push_str(&t);
        }
    }
    full.get(emitted..).unwrap_or_default().to_string()
}

impl Scheduler {
    /// Replaces the broken batch and sorts its sequences into failed, resumed and on probation.
    /// `Err` when no new batch can be made.
    pub(super) fn recover<'m>(
        &mut self,
        model: &'m dyn TextModel,
        batch: &mut Batch<'m>,
        live: &mut HashMap<SeqId, Live>,
        why: &str,
    ) -> Result<(), String> {
        self.metrics.failed_steps.get_or_create(&self.label).inc();
        self.liveness.restarted();
        let fresh_batch = new_batch(model)?;
        let old = std::mem::replace(batch, fresh_batch);
        // Its caches may be half written; dropping them must not take the thread down either.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(old)));
        let mut seqs: Vec<(SeqId, Live)> = live.drain().collect();
        // Admission order, so resumed sequences keep theirs.
        seqs.sort_by_key(|(seq, _)| *seq);
        let fresh = seqs.iter().filter(|(_, l)| l.fresh).count();
        let (mut failed, mut resumed, mut waiting) = (0, 0, 0);
        for (_, mut l) in seqs {
            if l.fresh && fresh == 1 {
                failed += 1;
                l.fail(ApiError::internal(format!("the model failed on this request: {why}")));
                continue;
            }
            // Only a failure nobody fresh can be blamed for counts against the others.
            if !l.fresh && fresh == 0 {
                l.strikes += 1;
                if l.strikes >= 2 {
                    failed += 1;
                    l.fail(ApiError::internal(format!("the model failed twice while running this request: {why}")));
                    continue;
                }
            }
            if l.fresh || fresh == 0 {
                waiting += 1;
                self.probation.push_back(l);
            } else if let Some((seq, l)) = self.resume(batch.as_mut(), l) {
                resumed += 1;
                live.insert(seq, l);
            }
        }
        tracing::error!(
            "model {}: a step failed ({why}); batch rebuilt: {failed} failed, {resumed} resumed, {waiting} re-admitted one at a time",
            self.label.model
        );
        Ok(())
    }

    /// Adds `l` to `batch` again. A batch that replays (the engine's) recomputes its tokens as
    /// they were computed, so it goes on exactly as it would have; otherwise its prompt and
    /// tokens so far become the new prompt (a prefill rounds differently from the decode steps
    /// it replaces, so greedy text can part at a near tie), the tokens left its budget. `None`
    /// (and `l` answered) when the batch refuses it.
    pub(super) fn resume(&self, batch: &mut dyn SequenceBatch, mut l: Live) -> Option<(SeqId, Live)> {
        match batch.resume(l.prompt.clone(), &l.generated, &l.cfg) {
            Ok(seq) => {
                l.carry.clear();
                return Some((seq, l));
            }
            Err(infer_core::Error::Unsupported(_)) => {}
            Err(e) => {
                l.fail(ApiError::internal(format!("the request could not be resumed after a failed step: {e}")));
                return None;
            }
        }
        let mut ids = l.prompt.clone();
        ids.extend_from_slice(&l.generated);
        let mut cfg = l.cfg.clone();
        cfg.max_tokens = cfg.max_tokens.saturating_sub(l.generated.len()).max(1);
        l.carry = held_text(self.model.tokenizer(), &l.generated, l.emitted);
        match batch.add(ids, &cfg) {
            Ok(seq) => Some((seq, l)),
            Err(e) => {
                l.fail(ApiError::internal(format!("the request could not be resumed after a failed step: {e}")));
                None
            }
        }
    }
}
