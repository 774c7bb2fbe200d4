//! What the API logs: client errors at debug, server errors at error with their cause.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use crate::support::{Mode, req, setup_flaky};

/// Records this crate's events as (level, fields).
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(Level, String)>>>);

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target().starts_with("punctual_api") {
            let mut fields = String::new();
            event.record(&mut Fields(&mut fields));
            self.0
                .lock()
                .unwrap()
                .push((*event.metadata().level(), fields));
        }
    }
}

impl Recorder {
    fn take(&self) -> Vec<(Level, String)> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn client_errors_are_not_logged_as_errors_and_server_errors_are_with_their_cause() {
    let recorder = Recorder::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
    // Another test's thread may have registered a callsite while this subscriber was being
    // installed, caching "never" for it (seen about once in ten runs): recompute every
    // callsite's interest now that this subscriber exists.
    tracing::callsite::rebuild_interest_cache();
    let (env, flaky) = setup_flaky();

    env.post("/v1/tasks", json!({"delay": "1s"}))
        .await
        .problem(422);
    env.get("/v1/tasks/ghost").await.problem(404);
    env.get("/v1/tasks?limit=0").await.problem(400);
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    env.post("/v1/tasks", req("t-1", "2m")).await.problem(409);
    let events = recorder.take();
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(
        events.iter().all(|(level, _)| *level == Level::DEBUG),
        "{events:?}"
    );

    flaky.set(Mode::Unavailable);
    env.get("/v1/tasks/t-1").await.problem(503);
    let events = recorder.take();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, Level::ERROR);
    assert!(
        events[0].1.contains("disk on fire"),
        "the cause is logged: {events:?}"
    );
}
