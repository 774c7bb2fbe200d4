//! The API and console function: [`crate::app`], the router of `punctual serve`, under
//! `lambda_http`.
//!
//! `lambda_http` turns a Function URL or HTTP API (payload format 2.0), REST API (1.0) event
//! into an `http::Request`, runs the router, and turns the response back into the event's
//! response shape. Nothing here is Lambda-specific beyond that: the routes, the auth, the
//! problem+json errors and the console are the served ones.
//!
//! Keys: a Lambda has no data directory to generate and keep an admin key in, so the function
//! refuses to start without keys ([`keys_from_env`]); prefer `PUNCTUAL_API_KEYS_JSON` with
//! SHA-256 digests, so the function's configuration never holds a key in clear.
//!
//! `/metrics` answers per instance: each Lambda instance has its own counters, so scrape the
//! CloudWatch metrics (see `infra/terraform`) rather than this endpoint.

use std::sync::Arc;

use anyhow::Context as _;
use punctual_core::{Backend, SystemClock};

use super::{ENV_API_KEYS, ENV_API_KEYS_JSON, LambdaEnv};

/// The router `punctual serve` serves, over `backend`.
pub fn router(backend: Backend, api: punctual_api::ApiConfig) -> axum::Router {
    let activity = Arc::new(punctual_api::metrics::Activity::new());
    let mut state =
        punctual_api::ApiState::new(backend, Arc::new(SystemClock), api).with_activity(activity);
    if let Some(handle) = crate::telemetry::prometheus() {
        state = state.with_metrics(handle);
    }
    crate::app(state)
}

/// The API keys from `PUNCTUAL_API_KEYS` (`role:key,...`) and `PUNCTUAL_API_KEYS_JSON` (a
/// JSON key file, digests allowed), both if both are set. None is an error.
pub fn keys_from_env(env: &LambdaEnv) -> anyhow::Result<punctual_api::KeyRing> {
    let mut ring = punctual_api::KeyRing::new();
    if let Some(v) = env.get(ENV_API_KEYS) {
        ring.extend(
            punctual_api::KeyRing::from_env_value(v)
                .map_err(|e| anyhow::anyhow!("{ENV_API_KEYS}: {e}"))?,
        );
    }
    if let Some(v) = env.get(ENV_API_KEYS_JSON) {
        ring.extend(
            punctual_api::KeyRing::from_json(v)
                .map_err(|e| anyhow::anyhow!("{ENV_API_KEYS_JSON}: {e}"))?,
        );
    }
    if ring.is_empty() {
        anyhow::bail!(
            "no API key: set {ENV_API_KEYS} or {ENV_API_KEYS_JSON} (a Lambda cannot generate and keep one)"
        );
    }
    Ok(ring)
}

/// Runs one raw Lambda HTTP event (the JSON the runtime API delivers) through the same
/// adapter [`lambda_http::run`] uses, and returns the JSON response the runtime would send
/// back. For tests and local debugging without a runtime.
pub async fn invoke_json(
    router: axum::Router,
    event: &str,
    context: lambda_http::Context,
) -> anyhow::Result<serde_json::Value> {
    use lambda_http::Service as _;
    let request: lambda_http::request::LambdaRequest =
        serde_json::from_str(event).context("not a Lambda HTTP event")?;
    let mut adapter = lambda_http::Adapter::from(router);
    let response = adapter
        .call(lambda_http::LambdaEvent::new(request, context))
        .await
        .map_err(|e| anyhow::anyhow!("router failed: {e:?}"))?;
    serde_json::to_value(&response).context("cannot serialize the response")
}

/// The `punctual-lambda-api` entrypoint.
pub async fn main() -> Result<(), lambda_runtime::Error> {
    super::init_tracing();
    let env = LambdaEnv::from_process();
    let keys = keys_from_env(&env)?;
    let backend = crate::open_aws(&env.prefix()).await?;
    let app = router(
        backend,
        punctual_api::ApiConfig {
            keys,
            ..punctual_api::ApiConfig::default()
        },
    );
    lambda_http::run(app).await
}
