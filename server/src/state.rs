//! What every handler shares: the served models by name, limits, the API key and metrics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use infer_core::audio::{SpeechRecognizer, SpeechSynthesizer};
use infer_core::embed::TextEmbedder;
use tokio::sync::Semaphore;

use crate::batching::TextService;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// A speech synthesizer, the permits that bound how many syntheses run at once, and the
/// admissions that bound how many may run or wait (past them: 429).
pub struct SpeechService {
    pub model: Arc<dyn SpeechSynthesizer>,
    pub permits: Arc<Semaphore>,
    pub admission: Arc<Semaphore>,
}

/// A speech recognizer, with the same bounds as [`SpeechService`] (a transcription or a live
/// session holds a permit while it runs).
pub struct RecognizerService {
    pub model: Arc<dyn SpeechRecognizer>,
    pub permits: Arc<Semaphore>,
    pub admission: Arc<Semaphore>,
}

/// A text embedder, with the same bounds as [`SpeechService`] (a request holds a permit while its
/// batch is embedded).
pub struct EmbedderService {
    pub model: Arc<dyn TextEmbedder>,
    pub permits: Arc<Semaphore>,
    pub admission: Arc<Semaphore>,
}

pub enum Served {
    Text(TextService),
    Speech(SpeechService),
    Recognizer(RecognizerService),
    Embedder(EmbedderService),
}

impl Served {
    pub fn kind(&self) -> &'static str {
        match self {
            Served::Text(_) => "text generation",
            Served::Speech(_) => "speech synthesis",
            Served::Recognizer(_) => "speech recognition",
            Served::Embedder(_) => "text embedding",
        }
    }
}

pub struct AppState {
    pub models: BTreeMap<String, Served>,
    pub config: ServerConfig,
    pub metrics: Arc<Metrics>,
    /// Unix time the models were loaded (`created` in /v1/models).
    pub created: u64,
}

impl AppState {
    /// The model served under `name` (its name or alias), exactly.
    pub fn model(&self, name: &str) -> Result<&Served, ApiError> {
        self.models.get(name).ok_or_else(|| ApiError::model_not_found(name, &self.names()))
    }

    /// The model a request names, and the name it is served under. A server of one model takes
    /// any name, or none, for it (as llama-server does: clients send `gpt-4o` or whatever their
    /// setup says); with several, the name must be one of theirs.
    pub fn resolve(&self, name: Option<&str>) -> Result<(&str, &Served), ApiError> {
        if let Some((served, model)) = name.and_then(|n| self.models.get_key_value(n)) {
            return Ok((served.as_str(), model));
        }
        if self.models.len() == 1 {
            let (served, model) = self.models.iter().next().expect("one model");
            return Ok((served.as_str(), model));
        }
        match name {
            Some(n) => Err(ApiError::model_not_found(n, &self.names())),
            None => Err(ApiError::param(
                "model",
                format!("`model` is required: this server serves {}", self.names().join(", ")),
            )),
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    /// The text model a request names ([`AppState::resolve`]) and its served name.
    pub fn text(&self, name: Option<&str>, endpoint: &str) -> Result<(&str, &TextService), ApiError> {
        match self.resolve(name)? {
            (served, Served::Text(t)) => Ok((served, t)),
            (served, other) => Err(wrong_kind(served, other, endpoint, "text generation")),
        }
    }

    pub fn speech(&self, name: &str) -> Result<&SpeechService, ApiError> {
        match self.resolve(Some(name))? {
            (_, Served::Speech(s)) => Ok(s),
            (served, other) => Err(wrong_kind(served, other, "/v1/audio/speech", "speech synthesis")),
        }
    }

    /// The embedder a request names ([`AppState::resolve`]) and its served name.
    pub fn embedder(&self, name: Option<&str>) -> Result<(&str, &EmbedderService), ApiError> {
        match self.resolve(name)? {
            (served, Served::Embedder(e)) => Ok((served, e)),
            (served, other) => Err(wrong_kind(served, other, "/v1/embeddings", "text embedding")),
        }
    }

    pub fn recognizer(&self, name: &str, endpoint: &str) -> Result<&RecognizerService, ApiError> {
        match self.resolve(Some(name))? {
            (_, Served::Recognizer(r)) => Ok(r),
            (served, other) => Err(wrong_kind(served, other, endpoint, "speech recognition")),
        }
    }
}

fn wrong_kind(name: &str, served: &Served, endpoint: &str, wanted: &str) -> ApiError {
    ApiError::param("model", format!("`{name}` is a {} model; {endpoint} needs a {wanted} model", served.kind()))
}

/// Whether a text model's scheduler thread still runs, as GET /health reports it. The scheduler
/// beats at every loop turn, counts the batches it rebuilt after a failed step, and marks itself
/// dead when its thread ends (a panic outside a step, or a batch it could not rebuild).
#[derive(Debug)]
pub struct Liveness {
    alive: AtomicBool,
    /// Unix milliseconds of the last loop turn (an idle scheduler waits for work: it stays old).
    heartbeat_ms: AtomicU64,
    restarts: AtomicU64,
    death: Mutex<Option<String>>,
}

impl Default for Liveness {
    fn default() -> Self {
        let l = Liveness {
            alive: AtomicBool::new(true),
            heartbeat_ms: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            death: Mutex::new(None),
        };
        l.beat();
        l
    }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_millis() as u64
}

impl Liveness {
    pub fn beat(&self) {
        self.heartbeat_ms.store(unix_ms(), Ordering::Relaxed);
    }

    /// A failed step was survived by rebuilding the batch.
    pub fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn died(&self, why: impl Into<String>) {
        *self.death.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.into());
        self.alive.store(false, Ordering::SeqCst);
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// What /health shows of one scheduler.
    pub fn report(&self) -> serde_json::Value {
        let age = unix_ms().saturating_sub(self.heartbeat_ms.load(Ordering::Relaxed));
        let mut v = serde_json::json!({
            "alive": self.is_alive(),
            "restarts": self.restarts(),
            "last_heartbeat_ms_ago": age,
        });
        if let Some(why) = self.death.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            v["error"] = why.clone().into();
        }
        v
    }
}
