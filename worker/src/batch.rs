//! Opportunistic batching of the worker's per-message store calls (claim, complete, delete).
//!
//! Each message's run makes its calls one at a time, as the protocol says; a [`Batcher`]
//! turns the calls that *wait at the same moment* into one batch call, the way a database
//! turns concurrent commits into one group commit:
//!
//! ```text
//! run 1 ─claim─┐                     ┌─▶ run 1
//! run 2 ─claim─┼─▶ flusher: task_claim_many([1, 2, 3]) ─┼─▶ run 2
//! run 3 ─claim─┘   (one call in flight; what arrives      └─▶ run 3
//!                   meanwhile forms the next batch)
//! ```
//!
//! One flusher task per batcher, one batch call in flight at a time: an idle worker's call
//! goes out at once, alone (one extra task hop of latency); a loaded worker's calls pile up
//! behind the call in flight and go out together, so the batch grows with the load and the
//! number of store round trips does not. Each call still gets its own answer, and a batch
//! call that fails as a whole answers every call in it with `Unavailable`, which the worker
//! treats as it treats a failed single call: the message reappears after its visibility
//! timeout. The per-item semantics are the single call's (see `task_claim_many` in
//! `punctual_core::store`), so no invariant depends on how calls were grouped.
//!
//! The flusher is spawned on first use, on the runtime of that caller, and ends when the
//! batcher is dropped. Batching is used only where the backend says a batch call is cheaper
//! than single calls (`task_write_batch_max > 1`; deletes always, as SQS's
//! `DeleteMessageBatch`); otherwise the worker keeps making single calls concurrently.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use punctual_core::StoreError;
use punctual_core::error::StoreResult;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// A batch call: the requests in, one answer per request out, in order.
pub(crate) type FlushFn<Req, Resp> =
    Arc<dyn Fn(Vec<Req>) -> Pin<Box<dyn Future<Output = Vec<Resp>> + Send>> + Send + Sync>;

type Pending<Req, Resp> = (Req, oneshot::Sender<Resp>);

/// Groups concurrent calls into batch calls of at most `max` requests, at most `in_flight`
/// batch calls at once.
pub(crate) struct Batcher<Req, Resp> {
    max: usize,
    in_flight: usize,
    flush: FlushFn<Req, Resp>,
    tx: OnceLock<mpsc::UnboundedSender<Pending<Req, Resp>>>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    /// A batcher making batch calls of 1 to `max` requests through `flush`, at most
    /// `in_flight` at once. With `in_flight` = 1 a batch is whatever waited while the
    /// previous call ran (group commit); more lets a backend with slow batch calls (SQS's 10
    /// deletes per call) keep up with many runs.
    pub(crate) fn new(max: usize, in_flight: usize, flush: FlushFn<Req, Resp>) -> Self {
        Self {
            max: max.max(1),
            in_flight: in_flight.max(1),
            flush,
            tx: OnceLock::new(),
        }
    }

    /// Submits one request and waits for its answer; `None` if the flusher is gone (its
    /// runtime shut down) before answering.
    pub(crate) async fn call(&self, req: Req) -> Option<Resp> {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(flusher(rx, self.max, self.in_flight, self.flush.clone()));
            tx
        });
        let (reply, answer) = oneshot::channel();
        tx.send((req, reply)).ok()?;
        answer.await.ok()
    }
}

async fn flusher<Req: Send + 'static, Resp: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<Pending<Req, Resp>>,
    max: usize,
    in_flight: usize,
    flush: FlushFn<Req, Resp>,
) {
    let slots = Arc::new(Semaphore::new(in_flight));
    let mut buf = Vec::with_capacity(max);
    loop {
        // A free slot first: while every slot is busy, requests pile up into the next batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // Waits for one request, then takes every request already waiting, up to `max`.
        if rx.recv_many(&mut buf, max).await == 0 {
            return;
        }
        let (reqs, replies): (Vec<Req>, Vec<oneshot::Sender<Resp>>) = buf.drain(..).unzip();
        let call = flush(reqs);
        tokio::spawn(async move {
            let _slot = slot;
            let resps = call.await;
            // A reply whose caller went away is dropped: the write stands, like a single
            // call whose future was cancelled after it reached the store.
            for (reply, resp) in replies.into_iter().zip(resps) {
                let _ = reply.send(resp);
            }
        });
    }
}

/// Spreads a batch call's result over its requests: each item's own result, or, if the call
/// failed as a whole, `Unavailable` for each, naming the cause.
pub(crate) fn spread<T>(n: usize, got: StoreResult<Vec<StoreResult<T>>>) -> Vec<StoreResult<T>> {
    match got {
        Ok(items) if items.len() == n => items,
        Ok(items) => {
            let message = format!("a batch call answered {} of {n} items", items.len());
            (0..n).map(|_| Err(unavailable(&message))).collect()
        }
        Err(e) => {
            let message = format!("batch call failed: {e}");
            (0..n).map(|_| Err(unavailable(&message))).collect()
        }
    }
}

/// An `Unavailable` error without a source (a batch's one cause cannot be shared).
pub(crate) fn unavailable(message: &str) -> StoreError {
    StoreError::Unavailable {
        message: message.to_string(),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn recording(sizes: Arc<Mutex<Vec<usize>>>) -> FlushFn<u32, u32> {
        Arc::new(move |reqs: Vec<u32>| {
            let sizes = sizes.clone();
            Box::pin(async move {
                sizes.lock().unwrap().push(reqs.len());
                tokio::task::yield_now().await;
                reqs.into_iter().map(|r| r * 2).collect()
            })
        })
    }

    #[tokio::test]
    async fn each_call_gets_its_own_answer_and_waiting_calls_share_a_batch() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let b = Arc::new(Batcher::new(4, 1, recording(sizes.clone())));
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..10u32 {
            let b = b.clone();
            calls.spawn(async move { (i, b.call(i).await) });
        }
        while let Some(r) = calls.join_next().await {
            let (i, got) = r.unwrap();
            assert_eq!(got, Some(i * 2));
        }
        let sizes = sizes.lock().unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), 10);
        assert!(sizes.iter().all(|n| (1..=4).contains(n)), "{sizes:?}");
        assert!(sizes.len() < 10, "concurrent calls were batched: {sizes:?}");
    }

    #[test]
    fn a_failed_batch_fails_every_item() {
        let got: Vec<StoreResult<u32>> = spread(3, Err(unavailable("down")));
        assert_eq!(got.len(), 3);
        assert!(
            got.iter()
                .all(|r| matches!(r, Err(StoreError::Unavailable { .. })))
        );
        let short: Vec<StoreResult<u32>> = spread(2, Ok(vec![Ok(1)]));
        assert!(short.iter().all(|r| r.is_err()));
    }
}
