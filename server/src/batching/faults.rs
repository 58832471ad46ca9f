//! Test-only fault hooks, off unless the server process has `INFER_FAULT_HOOKS=1` in its
//! environment. A request whose `user` field names a fault makes the scheduler misbehave the way
//! a model bug would, so tests can check that one bad request fails alone:
//!
//! - `infer-fault:panic`: the step that runs it panics (after the model advanced every cache, so
//!   the batch's state is as broken as a real panic would leave it);
//! - `infer-fault:error`: the step fails for the whole batch, as the engine answers a failed
//!   forward (every sequence removed, each reported failed);
//! - `infer-fault:abort-scheduler`: the scheduler thread itself panics outside any step and
//!   ends (the model stays unservable: /health answers 503).

use std::sync::OnceLock;

use infer_core::{SeqEvent, SeqId, SequenceBatch};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Panic,
    Error,
    AbortScheduler,
}

/// Whether the hooks are on (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("INFER_FAULT_HOOKS").is_ok_and(|v| v == "1"))
}

impl Fault {
    /// The fault a request's `user` field asks for, when the hooks are on.
    pub fn from_user(user: Option<&str>) -> Option<Fault> {
        if !enabled() {
            return None;
        }
        match user? {
            "infer-fault:panic" => Some(Fault::Panic),
            "infer-fault:error" => Some(Fault::Error),
            "infer-fault:abort-scheduler" => Some(Fault::AbortScheduler),
            _ => None,
        }
    }

    /// Runs the step as the fault would have it.
    pub(super) fn inject(self, batch: &mut dyn SequenceBatch, seqs: impl Iterator<Item = SeqId>) -> Vec<SeqEvent> {
        match self {
            Fault::Panic => {
                let _ = batch.step();
                panic!("injected fault (infer-fault:panic): a panic inside the step");
            }
            Fault::Error => seqs
                .map(|seq| {
                    batch.remove(seq);
                    SeqEvent::Failed {
                        seq,
                        error: infer_core::Error::Located("injected fault: the step failed".into()),
                    }
                })
                .collect(),
            Fault::AbortScheduler => batch.step(),
        }
    }
}

/// The fault the next step runs with: a panic before an error.
pub(super) fn in_step(faults: impl Iterator<Item = Option<Fault>>) -> Option<Fault> {
    let mut found = None;
    for f in faults.flatten() {
        match f {
            Fault::Panic => return Some(f),
            Fault::Error => found = Some(f),
            Fault::AbortScheduler => {}
        }
    }
    found
}

/// Ends the scheduler thread when a sequence asks for it.
pub(super) fn before_step(mut faults: impl Iterator<Item = Option<Fault>>) {
    if faults.any(|f| f == Some(Fault::AbortScheduler)) {
        panic!("injected fault (infer-fault:abort-scheduler): the scheduler thread ends");
    }
}
