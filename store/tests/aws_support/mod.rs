//! Shared setup of the aws tests: they run under `scripts/moto`, which starts an emulator and
//! exports `AWS_ENDPOINT_URL`. Without it they fail (never skip): see [`sdk_config`].

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use punctual_core::error::StoreResult;
use punctual_core::store::*;
use punctual_core::{Backend, ReadyQueue};
use punctual_store::aws::{AwsOptions, AwsStore, Clients, InitOptions, RequestCounter};

/// The SDK configuration for the emulator; panics with how to run the tests if there is none.
pub async fn sdk_config() -> aws_config::SdkConfig {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok_and(|v| v.starts_with("http://127.0.0.1")),
        "the aws tests need an emulator: run them as `scripts/moto cargo test -p punctual-store \
         --features aws --test <name>` (AWS_ENDPOINT_URL must point at 127.0.0.1)"
    );
    punctual_store::aws::load_sdk_config().await
}

/// A prefix no other test or case uses.
pub fn unique_prefix(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "t{}-{tag}-{}-",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates a fresh deployment under a unique prefix and opens it.
pub async fn fresh_store(
    sdk: &aws_config::SdkConfig,
    tag: &str,
    shard_count: u32,
    now_ms: i64,
    max_receive_count: u32,
    counter: Option<RequestCounter>,
) -> Arc<AwsStore> {
    let clients = Clients::new(sdk, counter);
    let aws = AwsOptions {
        prefix: unique_prefix(tag),
        max_receive_count,
        ..AwsOptions::default()
    };
    punctual_store::aws::init(
        &clients,
        &InitOptions {
            aws: aws.clone(),
            shard_count,
            now_ms,
        },
    )
    .await
    .expect("init");
    AwsStore::open(clients, aws).await.expect("open")
}

/// How long the adapter hides a received message in real time; it releases it earlier, when
/// the suite's clock passes the visibility the suite asked for.
const REAL_HIDE_MS: i64 = 120_000;

/// Maps the conformance suite's explicit clock onto SQS's real one.
///
/// The suite passes `now_ms` to every queue call and expects visibility timeouts measured on
/// that clock (hidden at `t + v - 1`, visible at `t + v`), while SQS hides messages in real
/// seconds and ignores `now_ms`. This adapter receives through the aws backend with a long
/// real visibility and remembers each delivery's deadline on the suite's clock; a later call
/// whose `now_ms` has passed a deadline first makes that delivery visible again through the
/// backend's own `queue_change_visibility(0)`. Everything else (receive counts, the redrive
/// to the DLQ, batching, deletes, the DLQ listing, long polling) is SQS's, unchanged.
pub struct SuiteClockQueue {
    inner: Arc<AwsStore>,
    deadlines: Mutex<HashMap<String, i64>>,
}

impl SuiteClockQueue {
    /// Wraps `inner`.
    pub fn new(inner: Arc<AwsStore>) -> Self {
        Self {
            inner,
            deadlines: Mutex::new(HashMap::new()),
        }
    }

    async fn release_due(&self, now_ms: i64) -> StoreResult<()> {
        let due: Vec<String> = {
            let mut d = self.deadlines.lock().unwrap();
            let due: Vec<String> = d
                .iter()
                .filter(|(_, t)| **t <= now_ms)
                .map(|(r, _)| r.clone())
                .collect();
            for r in &due {
                d.remove(r);
            }
            due
        };
        for receipt in &due {
            self.inner
                .queue_change_visibility(QueueVisibility {
                    receipt: receipt.clone(),
                    visibility_ms: 0,
                    now_ms,
                })
                .await?;
        }
        if !due.is_empty() {
            // The emulator compares visibility in whole milliseconds, strictly.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

#[async_trait]
impl ReadyQueue for SuiteClockQueue {
    fn max_receive_count(&self) -> u32 {
        self.inner.max_receive_count()
    }
    async fn queue_send(&self, p: QueueSend) -> StoreResult<()> {
        self.inner.queue_send(p).await
    }
    async fn queue_receive(&self, p: QueueReceive) -> StoreResult<Vec<ReceivedMessage>> {
        self.release_due(p.now_ms).await?;
        let got = self
            .inner
            .queue_receive(QueueReceive {
                visibility_ms: REAL_HIDE_MS,
                ..p.clone()
            })
            .await?;
        let mut d = self.deadlines.lock().unwrap();
        for m in &got {
            d.insert(m.receipt.clone(), p.now_ms + p.visibility_ms);
        }
        Ok(got)
    }
    async fn queue_delete(&self, receipts: &[String]) -> StoreResult<()> {
        {
            let mut d = self.deadlines.lock().unwrap();
            for r in receipts {
                d.remove(r);
            }
        }
        self.inner.queue_delete(receipts).await
    }
    async fn queue_change_visibility(&self, p: QueueVisibility) -> StoreResult<()> {
        self.inner
            .queue_change_visibility(QueueVisibility {
                visibility_ms: REAL_HIDE_MS,
                ..p.clone()
            })
            .await?;
        self.deadlines
            .lock()
            .unwrap()
            .insert(p.receipt.clone(), p.now_ms + p.visibility_ms);
        Ok(())
    }
    async fn queue_dead_letter(&self, p: QueueDeadLetter) -> StoreResult<()> {
        self.deadlines.lock().unwrap().remove(&p.receipt);
        self.inner.queue_dead_letter(p).await
    }
    async fn dlq_list(&self, p: DlqList) -> StoreResult<Page<DeadLetter>> {
        self.inner.dlq_list(p).await
    }
    async fn dlq_delete(&self, ids: &[String]) -> StoreResult<()> {
        self.inner.dlq_delete(ids).await
    }
    async fn dlq_get(&self, id: &str) -> StoreResult<Option<DeadLetter>> {
        self.inner.dlq_get(id).await
    }
    async fn queue_depth(&self, now_ms: i64) -> StoreResult<QueueDepth> {
        self.inner.queue_depth(now_ms).await
    }
}

/// The aws store as a backend whose queue follows the suite's clock.
pub fn suite_backend(store: Arc<AwsStore>) -> Backend {
    Backend {
        tasks: store.clone(),
        queue: Arc::new(SuiteClockQueue::new(store.clone())),
        leases: store,
    }
}
