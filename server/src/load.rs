//! Loading the configured models at start, one progress line each.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result};
use infer_core::checkpoint_info::CheckpointInfo;
use infer_core::{ModelKind, Registry};
use tokio::sync::Semaphore;

use crate::batching::TextService;
use crate::config::{ModelSpec, ServerConfig};
use crate::metrics::Metrics;
use crate::state::{RecognizerService, Served, SpeechService};

/// The loaded models by name, and the scheduler threads to join.
pub type Loaded = (Vec<(String, Served)>, Vec<JoinHandle<()>>);

/// Loads every model of `config`.
pub fn load_models(registry: &Registry, config: &ServerConfig, metrics: &Arc<Metrics>) -> Result<Loaded> {
    let mut served = Vec::new();
    let mut threads = Vec::new();
    for spec in &config.models {
        let name = spec.served_name();
        eprintln!("loading {name} from {} ...", spec.path.display());
        let start = Instant::now();
        let model = load_one(registry, config, spec, &name, metrics, &mut threads)
            .with_context(|| format!("loading model {name} ({})", spec.path.display()))?;
        eprintln!("loaded {name}: {} in {:.1} s", describe(&model), start.elapsed().as_secs_f64());
        served.push((name, model));
    }
    Ok((served, threads))
}

fn load_one(
    registry: &Registry,
    config: &ServerConfig,
    spec: &ModelSpec,
    name: &str,
    metrics: &Arc<Metrics>,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<Served> {
    let ckpt = CheckpointInfo::inspect(&spec.path)?;
    let load = spec.load_config()?;
    let slots = spec.parallel.unwrap_or(config.parallel);
    let claims = |kind| registry.model_plugin(kind, &ckpt.model_type).is_ok();
    if claims(ModelKind::Text) {
        let model = Arc::from(registry.load_model(&spec.path, &load)?);
        let (service, thread) = TextService::start(name.to_string(), model, slots, config.queue, metrics.clone());
        threads.push(thread);
        return Ok(Served::Text(service));
    }
    if claims(ModelKind::SpeechSynthesis) {
        let model = Arc::from(registry.load_speech_model(&spec.path, &load)?);
        return Ok(Served::Speech(SpeechService {
            model,
            permits: Arc::new(Semaphore::new(slots)),
            admission: Arc::new(Semaphore::new(slots + config.queue)),
        }));
    }
    if claims(ModelKind::SpeechRecognition) {
        let model = Arc::from(registry.load_recognizer(&spec.path, &load)?);
        return Ok(Served::Recognizer(RecognizerService {
            model,
            permits: Arc::new(Semaphore::new(slots)),
            admission: Arc::new(Semaphore::new(slots + config.queue)),
        }));
    }
    // No plugin claims it: the text lookup's error lists the known architectures.
    Err(registry
        .model_plugin(ModelKind::Text, &ckpt.model_type)
        .err()
        .map_or_else(|| anyhow::anyhow!("no model plugin serves `{}`", ckpt.model_type), anyhow::Error::from))
}

fn describe(model: &Served) -> String {
    match model {
        Served::Text(t) => {
            let info = t.model.info();
            format!(
                "{} text model ({} layers, context {}), {} batch slots",
                info.architecture.as_str(),
                info.num_layers,
                info.max_position_embeddings,
                t.slots
            )
        }
        Served::Speech(s) => format!(
            "speech synthesis at {} Hz, voices: {}",
            s.model.sample_rate(),
            if s.model.voices().is_empty() { "default".to_string() } else { s.model.voices().join(", ") }
        ),
        Served::Recognizer(r) => {
            format!("speech recognition at {} Hz, {} sessions", r.model.sample_rate(), r.permits.available_permits())
        }
    }
}
