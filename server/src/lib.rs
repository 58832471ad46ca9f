//! infer-server: `infer serve`, an OpenAI-compatible HTTP server (axum/tokio) over the infer
//! registry. Text models are served by a continuous-batching scheduler ([`batching`]); speech
//! synthesizers by a bounded pool of blocking tasks.

mod assistant_output;
mod auth;
pub mod batching;
mod body_deadline;
mod chat_tools;
pub mod config;
mod connection;
pub mod error;
mod extract;
mod ids;
mod load;
pub mod logprobs;
pub mod metrics;
pub mod openai;
mod routes;
pub mod state;
mod structured_output;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use infer_core::Registry;

pub use config::{ModelSpec, ServerConfig};

/// Loads the models of `config`, serves them until SIGINT or SIGTERM, then drains in-flight
/// requests and returns.
pub fn serve(registry: &Registry, config: ServerConfig) -> Result<()> {
    serve_with(registry, config, || {})
}

/// [`serve`], calling `on_loaded` once every model is loaded and before the first request: the
/// place for process-wide settings that should not apply to the loads themselves (the CLI tunes
/// the allocator there; applied before, a GGUF load's scratch would stay on the heap).
pub fn serve_with(registry: &Registry, config: ServerConfig, on_loaded: impl FnOnce()) -> Result<()> {
    config.validate()?;
    let metrics = Arc::new(metrics::Metrics::default());
    let (models, threads) = load::load_models(registry, &config, &metrics)?;
    on_loaded();
    let state = Arc::new(state::AppState {
        models: models.into_iter().collect(),
        config: config.clone(),
        metrics,
        created: ids::unix_now(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    runtime.block_on(async move {
        let addr = format!("{}:{}", config.host, config.port);
        let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("binding {addr}"))?;
        let local = listener.local_addr()?;
        let auth = if config.api_key.is_some() { " (API key required)" } else { "" };
        let router = routes::router(state)?;
        if config.api_key.is_none() && !local.ip().is_loopback() {
            eprintln!(
                "warning: listening on {} without an API key: anyone who can reach it can use the models \
                 (set --api-key; without one only loopback Host names and allowed_hosts are served)",
                local.ip()
            );
        }
        // After the warning: whoever waits for this line has the warning too.
        eprintln!("listening on http://{local}{auth}");
        let deadlines = connection::Deadlines {
            header: Duration::from_secs(config.header_timeout_secs),
            idle: Duration::from_secs(config.idle_timeout_secs),
        };
        connection::serve(listener, router, deadlines, shutdown_signal()).await;
        anyhow::Ok(())
    })?;
    // The router (and every scheduler handle with it) is gone: schedulers finish and exit.
    drop(runtime);
    for t in threads {
        let _ = t.join();
    }
    eprintln!("stopped");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM; the server then stops accepting and waits for open requests.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("shutting down: finishing in-flight requests");
}
