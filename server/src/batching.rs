//! Continuous batching for one text model: a scheduler thread owns the model's
//! [`SequenceBatch`] with `slots` places. Between steps it drops sequences whose client went
//! away, admits waiting requests into free places, then runs one step (one forward for every
//! sequence) and hands each sequence its token. Requests wait in a bounded queue; a full queue is
//! answered 429 at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use infer_core::{FinishReason, GenerateConfig, SeqEvent, SeqId, SequenceBatch, TextModel};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::metrics::{Metrics, ModelLabel};

/// What a request receives from the scheduler, in order: tokens, then `Done` or `Failed`.
#[derive(Debug)]
pub enum JobEvent {
    Token(String),
    Done { reason: FinishReason, prompt_tokens: usize, completion_tokens: usize },
    Failed(ApiError),
}

pub struct Job {
    pub prompt: Vec<u32>,
    pub cfg: GenerateConfig,
    pub events: mpsc::UnboundedSender<JobEvent>,
    pub arrived: Instant,
}

/// The handle request handlers hold.
pub struct TextService {
    pub name: String,
    pub model: Arc<dyn TextModel>,
    pub slots: usize,
    queue: mpsc::Sender<Job>,
}

impl TextService {
    /// Starts the scheduler thread; it ends once every handle is dropped and the batch drained.
    pub fn start(
        name: String,
        model: Arc<dyn TextModel>,
        slots: usize,
        queue: usize,
        metrics: Arc<Metrics>,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let scheduler = Scheduler { model: model.clone(), rx, slots, metrics, label: Metrics::model(&name) };
        let thread = std::thread::Builder::new()
            .name(format!("batch-{name}"))
            .spawn(move || scheduler.run())
            .expect("spawning the scheduler thread");
        (TextService { name, model, slots, queue: tx }, thread)
    }

    /// Queues a generation; its events arrive on the returned receiver. Dropping the receiver
    /// cancels it at the next step boundary.
    pub fn submit(&self, prompt: Vec<u32>, cfg: GenerateConfig) -> Result<mpsc::UnboundedReceiver<JobEvent>, ApiError> {
        let (events, rx) = mpsc::unbounded_channel();
        let job = Job { prompt, cfg, events, arrived: Instant::now() };
        match self.queue.try_send(job) {
            Ok(()) => Ok(rx),
            Err(mpsc::error::TrySendError::Full(_)) => Err(ApiError::queue_full(1)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(ApiError::unavailable("the server is shutting down")),
        }
    }

    /// Positions a sequence may hold (0: unbounded).
    pub fn context_limit(&self) -> usize {
        self.model.info().max_position_embeddings
    }
}

struct Scheduler {
    model: Arc<dyn TextModel>,
    rx: mpsc::Receiver<Job>,
    slots: usize,
    metrics: Arc<Metrics>,
    label: ModelLabel,
}

/// A request in the batch.
struct Live {
    events: mpsc::UnboundedSender<JobEvent>,
    arrived: Instant,
    last_token: Option<Instant>,
}

impl Scheduler {
    fn run(mut self) {
        let model = self.model.clone();
        let mut batch = match model.sequence_batch() {
            Ok(b) => b,
            Err(e) => return self.refuse_all(&e.to_string()),
        };
        let mut live: HashMap<SeqId, Live> = HashMap::new();
        loop {
            self.drop_departed(batch.as_mut(), &mut live);
            if !self.admit(batch.as_mut(), &mut live) {
                return;
            }
            self.publish(&live);
            if live.is_empty() {
                continue;
            }
            for event in batch.step() {
                self.dispatch(event, &mut live);
            }
            // Before the scheduler may block waiting for work, the gauges show what is left.
            self.drop_departed(batch.as_mut(), &mut live);
            self.publish(&live);
        }
    }

    fn publish(&self, live: &HashMap<SeqId, Live>) {
        self.metrics.queue_depth.get_or_create(&self.label).set(self.rx.len() as i64);
        self.metrics.active_slots.get_or_create(&self.label).set(live.len() as i64);
    }

    /// Fills free places from the queue, waiting for one when the batch is empty. `false` once
    /// the queue is closed (shutdown) and nothing is left to run.
    fn admit(&mut self, batch: &mut dyn SequenceBatch, live: &mut HashMap<SeqId, Live>) -> bool {
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
            match batch.add(job.prompt, &job.cfg) {
                Ok(seq) => {
                    live.insert(seq, Live { events: job.events, arrived: job.arrived, last_token: None });
                }
                Err(e) => {
                    let _ = job.events.send(JobEvent::Failed(ApiError::from_core(&e)));
                }
            }
        }
        true
    }

    /// Frees the places of requests whose client disconnected.
    fn drop_departed(&self, batch: &mut dyn SequenceBatch, live: &mut HashMap<SeqId, Live>) {
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

    fn dispatch(&self, event: SeqEvent, live: &mut HashMap<SeqId, Live>) {
        match event {
            SeqEvent::Token { seq, token } => {
                let Some(l) = live.get_mut(&seq) else { return };
                let now = Instant::now();
                match l.last_token {
                    None => self.metrics.ttft.get_or_create(&self.label).observe((now - l.arrived).as_secs_f64()),
                    Some(t) => self.metrics.time_per_token.get_or_create(&self.label).observe((now - t).as_secs_f64()),
                }
                l.last_token = Some(now);
                // A send fails only when the client left: the next boundary removes it.
                let _ = l.events.send(JobEvent::Token(token.text));
            }
            SeqEvent::Finished { seq, reason, prompt_tokens, completion_tokens } => {
                self.metrics.prompt_tokens.get_or_create(&self.label).inc_by(prompt_tokens as u64);
                self.metrics.completion_tokens.get_or_create(&self.label).inc_by(completion_tokens as u64);
                if let Some(l) = live.remove(&seq) {
                    let _ = l.events.send(JobEvent::Done { reason, prompt_tokens, completion_tokens });
                }
            }
            SeqEvent::Failed { seq, error } => {
                tracing::error!("generation failed: {error}");
                if let Some(l) = live.remove(&seq) {
                    let _ = l.events.send(JobEvent::Failed(ApiError::internal(format!("the model failed: {error}"))));
                }
            }
        }
    }

    /// The model cannot batch: every request is answered with the reason.
    fn refuse_all(mut self, why: &str) {
        tracing::error!("model {} cannot serve: {why}", self.label.model);
        while let Some(job) = self.rx.blocking_recv() {
            let _ = job.events.send(JobEvent::Failed(ApiError::internal(why.to_string())));
        }
    }
}
