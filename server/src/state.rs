//! What every handler shares: the served models by name, limits, the API key and metrics.

use std::collections::BTreeMap;
use std::sync::Arc;

use infer_core::audio::{SpeechRecognizer, SpeechSynthesizer};
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

pub enum Served {
    Text(TextService),
    Speech(SpeechService),
    Recognizer(RecognizerService),
}

impl Served {
    pub fn kind(&self) -> &'static str {
        match self {
            Served::Text(_) => "text generation",
            Served::Speech(_) => "speech synthesis",
            Served::Recognizer(_) => "speech recognition",
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
    pub fn model(&self, name: &str) -> Result<&Served, ApiError> {
        self.models.get(name).ok_or_else(|| ApiError::model_not_found(name, &self.names()))
    }

    pub fn names(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    pub fn text(&self, name: &str, endpoint: &str) -> Result<&TextService, ApiError> {
        match self.model(name)? {
            Served::Text(t) => Ok(t),
            other => Err(wrong_kind(name, other, endpoint, "text generation")),
        }
    }

    pub fn speech(&self, name: &str) -> Result<&SpeechService, ApiError> {
        match self.model(name)? {
            Served::Speech(s) => Ok(s),
            other => Err(wrong_kind(name, other, "/v1/audio/speech", "speech synthesis")),
        }
    }

    pub fn recognizer(&self, name: &str, endpoint: &str) -> Result<&RecognizerService, ApiError> {
        match self.model(name)? {
            Served::Recognizer(r) => Ok(r),
            other => Err(wrong_kind(name, other, endpoint, "speech recognition")),
        }
    }
}

fn wrong_kind(name: &str, served: &Served, endpoint: &str, wanted: &str) -> ApiError {
    ApiError::param("model", format!("`{name}` is a {} model; {endpoint} needs a {wanted} model", served.kind()))
}
