//! Server metrics in the Prometheus text format (GET /metrics): requests, tokens, time to first
//! token, time per output token, queue depth and active slots, timeouts and failed steps.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabel {
    pub model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub path: String,
    pub status: u16,
}

type HistogramFamily = Family<ModelLabel, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabel, Counter>,
    pub prompt_tokens: Family<ModelLabel, Counter>,
    pub completion_tokens: Family<ModelLabel, Counter>,
    pub cancelled: Family<ModelLabel, Counter>,
    pub timeouts: Family<ModelLabel, Counter>,
    pub failed_steps: Family<ModelLabel, Counter>,
    pub ttft: HistogramFamily,
    pub time_per_token: HistogramFamily,
    pub queue_depth: Family<ModelLabel, Gauge>,
    pub active_slots: Family<ModelLabel, Gauge>,
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("infer");
        let requests = Family::<RequestLabel, Counter>::default();
        let prompt_tokens = Family::<ModelLabel, Counter>::default();
        let completion_tokens = Family::<ModelLabel, Counter>::default();
        let cancelled = Family::<ModelLabel, Counter>::default();
        let timeouts = Family::<ModelLabel, Counter>::default();
        let failed_steps = Family::<ModelLabel, Counter>::default();
        let ttft = HistogramFamily::new_with_constructor(latency_histogram);
        let time_per_token = HistogramFamily::new_with_constructor(latency_histogram);
        let queue_depth = Family::<ModelLabel, Gauge>::default();
        let active_slots = Family::<ModelLabel, Gauge>::default();
        registry.register("http_requests", "HTTP requests by path and status", requests.clone());
        registry.register("prompt_tokens", "Prompt tokens processed", prompt_tokens.clone());
        registry.register("completion_tokens", "Tokens generated", completion_tokens.clone());
        registry.register("cancelled_requests", "Generations cancelled by a client disconnect", cancelled.clone());
        registry.register(
            "request_timeouts",
            "Generations ended (or refused from the queue) at request_timeout_secs",
            timeouts.clone(),
        );
        registry.register(
            "failed_steps",
            "Batch steps that panicked or failed; the batch was rebuilt and serving went on",
            failed_steps.clone(),
        );
        registry.register("time_to_first_token_seconds", "Request arrival to first token", ttft.clone());
        registry.register("time_per_output_token_seconds", "Time between consecutive tokens", time_per_token.clone());
        registry.register("queue_depth", "Requests waiting for a batch slot", queue_depth.clone());
        registry.register("active_slots", "Sequences in the running batch", active_slots.clone());
        Metrics {
            registry,
            requests,
            prompt_tokens,
            completion_tokens,
            cancelled,
            timeouts,
            failed_steps,
            ttft,
            time_per_token,
            queue_depth,
            active_slots,
        }
    }
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    pub fn model(name: &str) -> ModelLabel {
        ModelLabel { model: name.to_string() }
    }
}
