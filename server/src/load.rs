//! Loading the configured models at start, one progress line each, then the text models' KV
//! budget ([`kv_budget`]) before their schedulers start.

mod kv_budget;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use infer_core::{DType, ModelKind, Registry, TextModel};
use tokio::sync::Semaphore;

use crate::batching::{TextService, TextServiceConfig};
use crate::config::{ModelSpec, ServerConfig};
use crate::metrics::Metrics;
use crate::state::{EmbedderService, RecognizerService, Served, SpeechService};

/// The loaded models by name, and the scheduler threads to join.
pub type Loaded = (Vec<(String, Served)>, Vec<JoinHandle<()>>);

/// A loaded model before its service starts: text models wait for the KV budget.
enum Pending {
    Text { model: Arc<dyn TextModel>, slots: usize, context_len: usize, kv_dtype: DType },
    Ready(Served),
}

/// Loads every model of `config`.
pub fn load_models(registry: &Registry, config: &ServerConfig, metrics: &Arc<Metrics>) -> Result<Loaded> {
    let mut pending = Vec::new();
    for spec in &config.models {
        let name = spec.served_name();
        eprintln!("loading {name} from {} ...", spec.path.display());
        let start = Instant::now();
        let model = load_one(registry, config, spec)
            .with_context(|| format!("loading model {name} ({})", spec.path.display()))?;
        pending.push((name, model, start.elapsed()));
    }
    fit_kv_budget(config, &mut pending)?;
    let prepare = Arc::new(Semaphore::new(prepare_permits(config.prepare_tasks)));
    let request_timeout = (config.request_timeout_secs > 0).then(|| Duration::from_secs(config.request_timeout_secs));
    let mut served = Vec::new();
    let mut threads = Vec::new();
    for (name, model, took) in pending {
        let model = match model {
            Pending::Ready(s) => s,
            Pending::Text { model, slots, context_len, .. } => {
                let service = TextServiceConfig {
                    slots,
                    queue: config.queue,
                    context_len,
                    request_timeout,
                    prepare: prepare.clone(),
                };
                let (service, thread) = TextService::start(name.clone(), model, service, metrics.clone());
                threads.push(thread);
                Served::Text(service)
            }
        };
        eprintln!("loaded {name}: {} in {:.1} s", describe(&model), took.as_secs_f64());
        served.push((name, model));
    }
    Ok((served, threads))
}

/// Chat-template renders and tokenizations that may run at once (0: one per core).
fn prepare_permits(prepare_tasks: usize) -> usize {
    match prepare_tasks {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Lowers the text models' slots to the KV budget (one stderr line when it does); an error when
/// one slot each does not fit.
fn fit_kv_budget(config: &ServerConfig, pending: &mut [(String, Pending, Duration)]) -> Result<()> {
    let Some(budget) = kv_budget::budget_bytes(config.kv_budget_mib) else { return Ok(()) };
    let source = if config.kv_budget_mib > 0 { "kv_budget_mib" } else { "half the available memory" };
    let mut needs: Vec<kv_budget::KvNeed> = pending
        .iter()
        .filter_map(|(name, p, _)| match p {
            Pending::Text { model, slots, context_len, kv_dtype } => Some(kv_budget::KvNeed {
                name: name.clone(),
                per_slot: kv_budget::per_slot_bytes(&model.info(), *context_len, *kv_dtype, config.max_tokens_limit),
                slots: *slots,
            }),
            Pending::Ready(_) => None,
        })
        .collect();
    if let Some(line) = kv_budget::fit(&mut needs, budget, source)? {
        eprintln!("{line}");
    }
    let mut fitted = needs.into_iter();
    for (_, p, _) in pending.iter_mut() {
        if let Pending::Text { slots, .. } = p {
            *slots = fitted.next().expect("one need per text model").slots;
        }
    }
    Ok(())
}

fn load_one(registry: &Registry, config: &ServerConfig, spec: &ModelSpec) -> Result<Pending> {
    let ckpt = registry.inspect(&spec.path)?;
    let load = spec.load_config()?;
    let slots = spec.parallel.unwrap_or(config.parallel);
    let claims = |kind| registry.model_plugin(kind, &ckpt.model_type).is_ok();
    // A sentence-transformers folder (its modules.json names the pooling) of an architecture an
    // embedding plugin claims is served as an embedder, not as the decoder it is built on.
    if spec.path.join("modules.json").is_file() && claims(ModelKind::TextEmbedding) {
        let model = Arc::from(registry.load_embedder(&spec.path, &load)?);
        return Ok(Pending::Ready(Served::Embedder(EmbedderService {
            model,
            permits: Arc::new(Semaphore::new(slots)),
            admission: Arc::new(Semaphore::new(slots + config.queue)),
        })));
    }
    if claims(ModelKind::Text) {
        let model: Arc<dyn TextModel> = Arc::from(registry.load_model(&spec.path, &load)?);
        // The cache stores the compute dtype unless told otherwise.
        let kv_dtype = load.kv_dtype.or_else(|| DType::parse_float(model.info().dtype.as_str())).unwrap_or(DType::F32);
        return Ok(Pending::Text { model, slots, context_len: spec.context_len, kv_dtype });
    }
    if claims(ModelKind::SpeechSynthesis) {
        let model = Arc::from(registry.load_speech_model(&spec.path, &load)?);
        return Ok(Pending::Ready(Served::Speech(SpeechService {
            model,
            permits: Arc::new(Semaphore::new(slots)),
            admission: Arc::new(Semaphore::new(slots + config.queue)),
        })));
    }
    if claims(ModelKind::SpeechRecognition) {
        let model = Arc::from(registry.load_recognizer(&spec.path, &load)?);
        return Ok(Pending::Ready(Served::Recognizer(RecognizerService {
            model,
            permits: Arc::new(Semaphore::new(slots)),
            admission: Arc::new(Semaphore::new(slots + config.queue)),
        })));
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
        Served::Embedder(e) => format!(
            "{} text embedding, {} dimensions, {} at once",
            e.model.architecture(),
            e.model.dimension(),
            e.permits.available_permits()
        ),
    }
}
