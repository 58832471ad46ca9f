//! Continuous batching for one text model: a scheduler thread owns the model's
//! [`SequenceBatch`] with `slots` places. Between steps it drops sequences whose client went
//! away or whose deadline passed, admits waiting requests into free places, then runs one step
//! (one forward for every sequence) and hands each sequence its token. Requests wait in a
//! bounded queue; a full queue is answered 429 at once.
//!
//! A step that panics or fails as a whole does not take the server down: the scheduler rebuilds
//! the batch, blames the sequence admitted last, and resumes the others from their tokens so far
//! ([`recovery`]).

mod faults;
mod recovery;

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use infer_core::{FinishReason, GenerateConfig, SeqEvent, SeqId, SequenceBatch, TextModel, TokenLogprobs};
use tokio::sync::{mpsc, Semaphore};

pub use faults::Fault;

use crate::error::ApiError;
use crate::metrics::{Metrics, ModelLabel};
use crate::state::Liveness;

/// What a request receives from the scheduler, in order: tokens, then `Done` or `Failed`.
#[derive(Debug)]
pub enum JobEvent {
    /// Text, and with it the generated id and its log-probabilities when the request asked for
    /// them (text owed from a held-back stop-string prefix comes without).
    Token {
        text: String,
        logprobs: Option<(u32, TokenLogprobs)>,
    },
    Done {
        reason: FinishReason,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    Failed(ApiError),
}

pub struct Job {
    pub prompt: Vec<u32>,
    pub cfg: GenerateConfig,
    pub events: mpsc::UnboundedSender<JobEvent>,
    pub arrived: Instant,
    /// Past it the request is ended with what it has (or refused, if it never started).
    pub deadline: Option<Instant>,
    pub fault: Option<Fault>,
}

/// How a text model is served.
pub struct TextServiceConfig {
    pub slots: usize,
    pub queue: usize,
    /// The model's rotating-cache length (0: none, the context is bounded by the model).
    pub context_len: usize,
    /// Wall-clock limit of a request from its arrival (`None`: none).
    pub request_timeout: Option<Duration>,
    /// Permits for chat-template renders and tokenizations, shared by all text models.
    pub prepare: Arc<Semaphore>,
}

/// The handle request handlers hold.
pub struct TextService {
    pub name: String,
    pub model: Arc<dyn TextModel>,
    pub slots: usize,
    pub liveness: Arc<Liveness>,
    pub prepare: Arc<Semaphore>,
    context_len: usize,
    request_timeout: Option<Duration>,
    queue: mpsc::Sender<Job>,
}

impl TextService {
    /// Starts the scheduler thread; it ends once every handle is dropped and the batch drained.
    pub fn start(
        name: String,
        model: Arc<dyn TextModel>,
        config: TextServiceConfig,
        metrics: Arc<Metrics>,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let liveness = Arc::new(Liveness::default());
        let scheduler = Scheduler {
            model: model.clone(),
            rx,
            slots: config.slots,
            metrics,
            label: Metrics::model(&name),
            liveness: liveness.clone(),
            probation: VecDeque::new(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("batch-{name}"))
            .spawn(move || scheduler.run())
            .expect("spawning the scheduler thread");
        let service = TextService {
            name,
            model,
            slots: config.slots,
            liveness,
            prepare: config.prepare,
            context_len: config.context_len,
            request_timeout: config.request_timeout,
            queue: tx,
        };
        (service, thread)
    }

    /// When a request that arrived at `arrived` must be over.
    pub fn deadline(&self, arrived: Instant) -> Option<Instant> {
        self.request_timeout.map(|t| arrived + t)
    }

    /// Queues a generation; its events arrive on the returned receiver. Dropping the receiver
    /// cancels it at the next step boundary.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        cfg: GenerateConfig,
        arrived: Instant,
        fault: Option<Fault>,
    ) -> Result<mpsc::UnboundedReceiver<JobEvent>, ApiError> {
        let (events, rx) = mpsc::unbounded_channel();
        let job = Job { prompt, cfg, events, arrived, deadline: self.deadline(arrived), fault };
        match self.queue.try_send(job) {
            Ok(()) => Ok(rx),
            Err(mpsc::error::TrySendError::Full(_)) => Err(ApiError::queue_full(1)),
            Err(mpsc::error::TrySendError::Closed(_)) if self.liveness.is_alive() => {
                Err(ApiError::unavailable("the server is shutting down"))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(self.stopped()),
        }
    }

    /// The answer to a request whose scheduler ended under it: 503 once the scheduler is dead (a
    /// job may enter the queue while the thread is still unwinding), else 500.
    pub fn stopped(&self) -> ApiError {
        if self.liveness.is_alive() {
            return ApiError::internal("the scheduler stopped");
        }
        ApiError::unavailable(format!("the scheduler of `{}` stopped: the server needs a restart", self.name))
    }

    /// Positions a sequence may hold (0: unbounded: a rotating cache, or a model without a
    /// trained context).
    pub fn context_limit(&self) -> usize {
        if self.context_len > 0 {
            0
        } else {
            self.model.info().max_position_embeddings
        }
    }
}

struct Scheduler {
    model: Arc<dyn TextModel>,
    rx: mpsc::Receiver<Job>,
    slots: usize,
    metrics: Arc<Metrics>,
    label: ModelLabel,
    liveness: Arc<Liveness>,
    /// Sequences taken out of a failed batch, re-admitted one per step so that a failure blames
    /// one of them alone.
    probation: VecDeque<Live>,
}

/// A request in the batch: what it asked for and what it has received, enough to resume it in a
/// new batch.
struct Live {
    events: mpsc::UnboundedSender<JobEvent>,
    arrived: Instant,
    deadline: Option<Instant>,
    last_token: Option<Instant>,
    prompt: Vec<u32>,
    cfg: GenerateConfig,
    /// Token ids generated so far.
    generated: Vec<u32>,
    /// Bytes of generated text sent.
    emitted: usize,
    /// Text owed to the client: what the old batch held back when this sequence was resumed.
    carry: String,
    fault: Option<Fault>,
    /// Admitted (or re-admitted) since the last step that ran through: a failing step blames it.
    fresh: bool,
    /// Failed steps this sequence was in since its last good one.
    strikes: u32,
}

impl Live {
    fn new(job: Job) -> Self {
        Live {
            events: job.events,
            arrived: job.arrived,
            deadline: job.deadline,
            last_token: None,
            prompt: job.prompt,
            cfg: job.cfg,
            generated: Vec::new(),
            emitted: 0,
            carry: String::new(),
            fault: job.fault,
            fresh: true,
            strikes: 0,
        }
    }

    fn send_text(&mut self, text: String) {
        self.send_token(text, None);
    }

    fn send_token(&mut self, text: String, logprobs: Option<(u32, TokenLogprobs)>) {
        self.emitted += text.len();
        // A send fails only when the client left: the next boundary removes it.
        let _ = self.events.send(JobEvent::Token { text, logprobs });
    }

    fn done(self, reason: FinishReason) {
        let (prompt_tokens, completion_tokens) = (self.prompt.len(), self.generated.len());
        let _ = self.events.send(JobEvent::Done { reason, prompt_tokens, completion_tokens });
    }

    fn fail(self, error: ApiError) {
        let _ = self.events.send(JobEvent::Failed(error));
    }

    fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }
}

type Batch<'m> = Box<dyn SequenceBatch + 'm>;

/// Marks the scheduler dead when its thread unwinds (a panic outside the guarded step).
struct DeathWatch(Arc<Liveness>);

impl Drop for DeathWatch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.died("the scheduler thread panicked");
        }
    }
}

impl Scheduler {
    fn run(mut self) {
        let model = self.model.clone();
        let mut batch = match recovery::new_batch(model.as_ref()) {
            Ok(b) => b,
            Err(e) => return self.refuse_all(&e),
        };
        let mut live: HashMap<SeqId, Live> = HashMap::new();
        // Declared after `live`, so an unwinding thread marks itself dead before its requests'
        // channels close: whoever sees the failure then sees it on /health too.
        let _watch = DeathWatch(self.liveness.clone());
        loop {
            self.liveness.beat();
            self.end_departed_and_expired(batch.as_mut(), &mut live);
            if !self.admit(batch.as_mut(), &mut live) {
                return;
            }
            self.publish(&live);
            if live.is_empty() {
                continue;
            }
            faults::before_step(live.values().map(|l| l.fault));
            match self.guarded_step(batch.as_mut(), &live) {
                Ok(events) => {
                    for event in events {
                        self.dispatch(event, &mut live);
                    }
                    for l in live.values_mut() {
                        l.fresh = false;
                        l.strikes = 0;
                    }
                }
                Err(why) => {
                    if let Err(e) = self.recover(model.as_ref(), &mut batch, &mut live, &why) {
                        for (_, l) in live.drain() {
                            l.fail(ApiError::internal(format!("the model failed: {why}")));
                        }
                        return self.refuse_all(&e);
                    }
                }
            }
            // Before the scheduler may block waiting for work, the gauges show what is left.
            self.end_departed_and_expired(batch.as_mut(), &mut live);
            self.publish(&live);
            if live.is_empty() {
                // The burst is over: glibc would keep the freed caches, prompts and per-request
                // buffers resident for the rest of the run. Once per drain, so the cost
                // (a walk of the heap) never lands inside a step.
                infer_core::process_memory::release_free_heap();
            }
        }
    }

    fn publish(&self, live: &HashMap<SeqId, Live>) {
        let waiting = self.rx.len() + self.probation.len();
        self.metrics.queue_depth.get_or_create(&self.label).set(waiting as i64);
        self.metrics.active_slots.get_or_create(&self.label).set(live.len() as i64);
    }

    /// One step, with a panic or a failure of the whole batch returned as `Err` (its message).
    fn guarded_step(
        &self,
        batch: &mut dyn SequenceBatch,
        live: &HashMap<SeqId, Live>,
    ) -> Result<Vec<SeqEvent>, String> {
        let before = batch.len();
        let fault = faults::in_step(live.values().map(|l| l.fault));
        let events = catch_unwind(AssertUnwindSafe(|| match fault {
            Some(f) => f.inject(batch, live.keys().copied()),
            None => batch.step(),
        }))
        .map_err(|p| format!("panic in the model's step: {}", recovery::panic_message(&*p)))?;
        // The engine answers a failed forward by failing every sequence (their caches are in an
        // unknown state): that is the batch's failure, not theirs.
        let failed: Vec<&infer_core::Error> = events
            .iter()
            .filter_map(|e| match e {
                SeqEvent::Failed { error, .. } => Some(error),
                _ => None,
            })
            .collect();
        if before > 0 && failed.len() == before {
            return Err(failed[0].to_string());
        }
        Ok(events)
    }

    /// Fills free places: first sequences on probation, one per step and nothing beside it, then
    /// the queue, waiting for a job when the batch is empty. `false` once the queue is closed
    /// (shutdown) and nothing is left to run.
    fn admit(&mut self, batch: &mut dyn SequenceBatch, live: &mut HashMap<SeqId, Live>) -> bool {
        if let Some(l) = self.probation.pop_front() {
            if let Some((seq, l)) = self.resume(batch, l) {
                live.insert(seq, Live { fresh: true, ..l });
                return true;
            }
        }
        if !self.probation.is_empty() {
            return true;
        }
        while live.len() < self.slots {
            let job = if live.is_empty() {
                match self.rx.blocking_recv() {
                    Some(job) => job,
                    None => return false,
                }
            } else {
                match self.rx.try_recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            // Gone while it waited.
            if job.events.is_closed() {
                self.metrics.cancelled.get_or_create(&self.label).inc();
                continue;
            }
            if job.deadline.is_some_and(|d| Instant::now() >= d) {
                self.metrics.timeouts.get_or_create(&self.label).inc();
                let waited = job.arrived.elapsed().as_secs_f64();
                let _ = job.events.send(JobEvent::Failed(ApiError::timeout(format!(
                    "the request waited {waited:.1} s for a batch slot, past request_timeout_secs: retry later"
                ))));
                continue;
            }
            match batch.add(job.prompt.clone(), &job.cfg) {
                Ok(seq) => {
                    live.insert(seq, Live::new(job));
                }
                Err(e) => {
                    let _ = job.events.send(JobEvent::Failed(ApiError::from_core(&e)));
                }
            }
        }
        true
    }

    /// Frees the places of requests whose client disconnected, and ends those past their
    /// deadline with the text they have (finish reason `length`, and a line on stderr).
    fn end_departed_and_expired(&mut self, batch: &mut dyn SequenceBatch, live: &mut HashMap<SeqId, Live>) {
        let now = Instant::now();
        let expired: Vec<SeqId> = live.iter().filter(|(_, l)| l.expired(now)).map(|(&s, _)| s).collect();
        for seq in expired {
            batch.remove(seq);
            if let Some(l) = live.remove(&seq) {
                self.time_out(l);
            }
        }
        let mut on_probation = std::mem::take(&mut self.probation);
        on_probation.retain(|l| !l.events.is_closed());
        for l in on_probation {
            if l.expired(now) {
                self.time_out(l);
            } else {
                self.probation.push_back(l);
            }
        }
        live.retain(|&seq, l| {
            if l.events.is_closed() {
                batch.remove(seq);
                self.metrics.cancelled.get_or_create(&self.label).inc();
                false
            } else {
                true
            }
        });
    }

    fn time_out(&self, mut l: Live) {
        self.metrics.timeouts.get_or_create(&self.label).inc();
        eprintln!(
            "request timeout: a {} generation ran {:.1} s (request_timeout_secs) and ends with its {} tokens so far \
             (finish_reason \"length\")",
            self.label.model,
            l.arrived.elapsed().as_secs_f64(),
            l.generated.len()
        );
        // What the engine held back, the carry of a resumed sequence included.
        let owed = recovery::held_text(self.model.tokenizer(), &l.generated, l.emitted);
        l.carry.clear();
        if !owed.is_empty() {
            l.send_text(owed);
        }
        l.done(FinishReason::Length);
    }

    fn dispatch(&self, event: SeqEvent, live: &mut HashMap<SeqId, Live>) {
        match event {
            SeqEvent::Token { seq, token, logprobs } => {
                let Some(l) = live.get_mut(&seq) else { return };
                let now = Instant::now();
                match l.last_token {
                    None => self.metrics.ttft.get_or_create(&self.label).observe((now - l.arrived).as_secs_f64()),
                    Some(t) => self.metrics.time_per_token.get_or_create(&self.label).observe((now - t).as_secs_f64()),
                }
                l.last_token = Some(now);
                l.generated.push(token.id);
                let text = std::mem::take(&mut l.carry) + &token.text;
                l.send_token(text, logprobs.map(|lp| (token.id, lp)));
            }
            SeqEvent::Finished { seq, reason, .. } => {
                if let Some(mut l) = live.remove(&seq) {
                    self.metrics.prompt_tokens.get_or_create(&self.label).inc_by(l.prompt.len() as u64);
                    self.metrics.completion_tokens.get_or_create(&self.label).inc_by(l.generated.len() as u64);
                    if !l.carry.is_empty() {
                        let owed = std::mem::take(&mut l.carry);
                        l.send_text(owed);
                    }
                    l.done(reason);
                }
            }
            SeqEvent::Failed { seq, error } => {
                tracing::error!("generation failed: {error}");
                if let Some(l) = live.remove(&seq) {
                    l.fail(ApiError::internal(format!("the model failed: {error}")));
                }
            }
        }
    }

    /// The model cannot batch (or its batch cannot be rebuilt): every request is answered with
    /// the reason.
    fn refuse_all(mut self, why: &str) {
        tracing::error!("model {} cannot serve: {why}", self.label.model);
        self.liveness.died(format!("the model cannot serve: {why}"));
        for l in std::mem::take(&mut self.probation) {
            l.fail(ApiError::internal(why.to_string()));
        }
        while let Some(job) = self.rx.blocking_recv() {
            let _ = job.events.send(JobEvent::Failed(ApiError::internal(why.to_string())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infer_core::LoadConfig;
    use infer_tests::{fixture, Setup};

    fn service(slots: usize, timeout: Option<Duration>) -> (TextService, JoinHandle<()>) {
        let registry = Setup::CandleBuiltIn.registry().unwrap();
        let model: Arc<dyn TextModel> =
            Arc::from(registry.load_model(&fixture("qwen3/gqa"), &LoadConfig::default()).unwrap());
        let config = TextServiceConfig {
            slots,
            queue: 4,
            context_len: 0,
            request_timeout: timeout,
            prepare: Arc::new(Semaphore::new(1)),
        };
        TextService::start("tiny".into(), model, config, Arc::new(Metrics::default()))
    }

    fn collect(mut rx: mpsc::UnboundedReceiver<JobEvent>) -> (Vec<String>, Option<JobEvent>) {
        let mut tokens = Vec::new();
        while let Some(e) = rx.blocking_recv() {
            match e {
                JobEvent::Token { text, .. } => tokens.push(text),
                end => return (tokens, Some(end)),
            }
        }
        (tokens, None)
    }

    #[test]
    fn a_request_past_its_deadline_in_the_queue_is_answered_not_run() {
        let (service, thread) = service(1, Some(Duration::from_secs(30)));
        let cfg = GenerateConfig { max_tokens: 8, ignore_eos: true, ..GenerateConfig::greedy(8) };
        let long_ago = Instant::now() - Duration::from_secs(60);
        let rx = service.submit(vec![1, 2, 3], cfg.clone(), long_ago, None).unwrap();
        let (tokens, end) = collect(rx);
        assert!(tokens.is_empty(), "it ran: {tokens:?}");
        match end {
            Some(JobEvent::Failed(e)) => assert_eq!((e.status.as_u16(), e.code), (504, Some("timeout")), "{e}"),
            other => panic!("{other:?}"),
        }
        // The next one runs.
        let (tokens, end) = collect(service.submit(vec![1, 2, 3], cfg, Instant::now(), None).unwrap());
        assert_eq!(tokens.len(), 8);
        assert!(matches!(end, Some(JobEvent::Done { reason: FinishReason::Length, completion_tokens: 8, .. })));
        drop(service);
        thread.join().unwrap();
    }
}
