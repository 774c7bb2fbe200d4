//! [`ReadyQueue`] over two SQS standard queues: `{prefix}ready` with a `RedrivePolicy` to
//! `{prefix}dlq`.
//!
//! | call | requests |
//! |---|---|
//! | `queue_send` | `SendMessageBatch`, 10 messages per call |
//! | `queue_receive` | `ReceiveMessage` (10 per call, long polling up to 20 s) |
//! | `queue_delete` | `DeleteMessageBatch`, 10 per call; unknown receipts are ignored |
//! | `queue_change_visibility` | `ChangeMessageVisibility` (whole seconds, rounded up) |
//! | `queue_dead_letter` | `SendMessage` to the DLQ with `reason`/`dead_ms` attributes, then `DeleteMessage` |
//! | `dlq_list`, `dlq_get`, `dlq_delete` | receive the DLQ (see below) |
//! | `queue_depth` | `GetQueueAttributes` on both queues |
//!
//! The redrive backstop is SQS's own: a message received more than `maxReceiveCount` times
//! moves to the DLQ on its next receive, without a reason attribute (listed as
//! [`REDRIVE_REASON`]). Visibility and delays are SQS's, in real time, whole seconds: the
//! `now_ms` of each call is not used (SQS keeps the clock).
//!
//! **Listing the DLQ.** SQS has no way to read a queue without receiving it. `dlq_list`
//! receives every letter (at most [`DLQ_LIST_MAX`]) with a short visibility
//! ([`DLQ_PEEK_VISIBILITY_SECS`]), sorts them by (arrival, id), and makes them visible again at
//! once (`ChangeMessageVisibilityBatch` to 0). While a listing runs, the letters are hidden
//! from another listing for at most a few seconds; each listing raises the letters' receive
//! count (harmless: the DLQ has no redrive policy). `dlq_delete` receives the same way and
//! deletes the letters whose message id it was given; `dlq_get` (one letter by id, for
//! replay-one and purge) receives the same way and keeps the one asked for: SQS has no read
//! by message id, so it costs one bounded walk (at most [`DLQ_LIST_MAX`] letters). Fine for an operator's console over a
//! DLQ of thousands; for a huge DLQ, drain it with a consumer instead.

use std::collections::HashSet;

use async_trait::async_trait;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use punctual_core::error::StoreResult;
use punctual_core::store::{
    DeadLetter, DispatchMessage, DlqList, Page, QueueDeadLetter, QueueDepth, QueueReceive,
    QueueSend, QueueVisibility, ReceivedMessage,
};
use punctual_core::{ReadyQueue, StoreError};

use super::names::{MSG_DEAD_MS, MSG_REASON};
use super::{AwsStore, build_err, map_sdk, sdk_code};

/// Reason shown for letters moved by the queue's redrive policy (they carry none).
pub const REDRIVE_REASON: &str = "maxReceiveCount exceeded";
/// Most letters one DLQ listing looks at.
pub const DLQ_LIST_MAX: usize = 1_000;
/// How long a DLQ listing hides the letters it is reading, seconds.
pub const DLQ_PEEK_VISIBILITY_SECS: i32 = 5;

/// SQS's most messages per batch call.
const BATCH: usize = 10;

/// Milliseconds to SQS's whole seconds, rounded up, within `0..=max`.
fn secs(ms: i64, max: i64) -> i32 {
    ((ms.max(0) as u64).div_ceil(1_000)).min(max as u64) as i32
}

/// Receipt errors that mean "this delivery is no longer current": ignored like the embedded
/// store ignores stale receipts.
fn stale_receipt(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ReceiptHandleIsInvalid"
                | "InvalidParameterValue"
                | "MessageNotInflight"
                | "AWS.SimpleQueueService.MessageNotInflight"
                | "AWS.SimpleQueueService.ReceiptHandleIsInvalid"
        )
    )
}

fn parse_body(m: &Message) -> StoreResult<DispatchMessage> {
    let body = m.body().unwrap_or_default();
    serde_json::from_str(body).map_err(|e| StoreError::Unavailable {
        message: format!("malformed message body {body:?}: {e}"),
        source: None,
    })
}

fn attr_str(m: &Message, name: &str) -> Option<String> {
    m.message_attributes()
        .and_then(|a| a.get(name))
        .and_then(|v| v.string_value().map(str::to_owned))
}

fn sys_attr(m: &Message, name: MessageSystemAttributeName) -> Option<&str> {
    m.attributes()
        .and_then(|a| a.get(&name))
        .map(String::as_str)
}

fn letter(m: &Message) -> StoreResult<DeadLetter> {
    let dead_ms = attr_str(m, MSG_DEAD_MS)
        .and_then(|v| v.parse().ok())
        .or_else(|| {
            sys_attr(m, MessageSystemAttributeName::SentTimestamp)?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Ok(DeadLetter {
        id: m.message_id().unwrap_or_default().to_owned(),
        message: parse_body(m)?,
        reason: attr_str(m, MSG_REASON).unwrap_or_else(|| REDRIVE_REASON.to_owned()),
        dead_ms,
    })
}

fn string_attr(v: impl Into<String>) -> StoreResult<MessageAttributeValue> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .map_err(build_err)
}

impl AwsStore {
    fn sqs(&self) -> &aws_sdk_sqs::Client {
        &self.clients.sqs
    }

    /// One `ReceiveMessage`.
    async fn receive_once(
        &self,
        url: &str,
        max: usize,
        visibility_secs: i32,
        wait_secs: i32,
    ) -> StoreResult<Vec<Message>> {
        let out = self
            .sqs()
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max.clamp(1, BATCH) as i32)
            .visibility_timeout(visibility_secs)
            .wait_time_seconds(wait_secs)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| map_sdk("ReceiveMessage", e))?;
        Ok(out.messages.unwrap_or_default())
    }

    /// Deletes receipts from `url`, 10 per call, ignoring stale ones.
    async fn delete_batch(&self, url: &str, receipts: &[String]) -> StoreResult<()> {
        for chunk in receipts.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(r)
                        .build()
                        .map_err(build_err)
                })
                .collect::<StoreResult<Vec<_>>>()?;
            let out = self
                .sqs()
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| map_sdk("DeleteMessageBatch", e))?;
            for f in out.failed {
                if !stale_receipt(Some(f.code.as_str())) {
                    return Err(StoreError::Unavailable {
                        message: format!(
                            "DeleteMessageBatch entry failed: {} {:?}",
                            f.code, f.message
                        ),
                        source: None,
                    });
                }
            }
        }
        Ok(())
    }

    /// Receives every letter (up to [`DLQ_LIST_MAX`]), hidden for a few seconds.
    async fn dlq_peek(&self) -> StoreResult<Vec<Message>> {
        let mut all: Vec<Message> = Vec::new();
        let mut seen = HashSet::new();
        while all.len() < DLQ_LIST_MAX {
            let got = self
                .receive_once(&self.dlq_url, BATCH, DLQ_PEEK_VISIBILITY_SECS, 0)
                .await?;
            if got.is_empty() {
                break;
            }
            for m in got {
                if seen.insert(m.message_id().unwrap_or_default().to_owned()) {
                    all.push(m);
                }
            }
        }
        Ok(all)
    }

    /// Makes peeked letters visible again.
    async fn dlq_unhide(&self, msgs: &[&Message]) -> StoreResult<()> {
        for chunk in msgs.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle().unwrap_or_default())
                        .visibility_timeout(0)
                        .build()
                        .map_err(build_err)
                })
                .collect::<StoreResult<Vec<_>>>()?;
            self.sqs()
                .change_message_visibility_batch()
                .queue_url(&self.dlq_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| map_sdk("ChangeMessageVisibilityBatch", e))?;
        }
        Ok(())
    }

    async fn depth_of(&self, url: &str) -> StoreResult<(u64, u64)> {
        let out = self
            .sqs()
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| map_sdk("GetQueueAttributes", e))?;
        let attrs = out.attributes.unwrap_or_default();
        let n = |k: QueueAttributeName| -> u64 {
            attrs.get(&k).and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        Ok((
            n(QueueAttributeName::ApproximateNumberOfMessages),
            n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                + n(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        ))
    }
}

#[async_trait]
impl ReadyQueue for AwsStore {
    fn max_receive_count(&self) -> u32 {
        self.opts.max_receive_count
    }

    async fn queue_send(&self, p: QueueSend) -> StoreResult<()> {
        for chunk in p.messages.chunks(BATCH) {
            let mut entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let body = serde_json::to_string(m)
                        .map_err(|e| StoreError::invalid("message", e.to_string()))?;
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .build()
                        .map_err(build_err)
                })
                .collect::<StoreResult<Vec<_>>>()?;
            // Retry the entries SQS refused (throttled) a few times before giving up.
            for attempt in 0..3 {
                let out = self
                    .sqs()
                    .send_message_batch()
                    .queue_url(&self.ready_url)
                    .set_entries(Some(entries.clone()))
                    .send()
                    .await
                    .map_err(|e| map_sdk("SendMessageBatch", e))?;
                if out.failed.is_empty() {
                    break;
                }
                let failed: HashSet<String> = out.failed.iter().map(|f| f.id.clone()).collect();
                if attempt == 2 {
                    return Err(StoreError::Unavailable {
                        message: format!(
                            "SendMessageBatch: {} messages refused: {:?}",
                            failed.len(),
                            out.failed.first().map(|f| (&f.code, &f.message))
                        ),
                        source: None,
                    });
                }
                entries.retain(|e| failed.contains(e.id()));
            }
        }
        Ok(())
    }

    async fn queue_receive(&self, p: QueueReceive) -> StoreResult<Vec<ReceivedMessage>> {
        let visibility = secs(p.visibility_ms, 43_200);
        let mut wait = secs(p.wait_ms, 20);
        let mut out = Vec::new();
        while out.len() < p.max.max(1) {
            let got = self
                .receive_once(&self.ready_url, p.max - out.len(), visibility, wait)
                .await?;
            let n = got.len();
            for m in got {
                let receive_count =
                    sys_attr(&m, MessageSystemAttributeName::ApproximateReceiveCount)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(1);
                out.push(ReceivedMessage {
                    message: parse_body(&m)?,
                    receipt: m.receipt_handle().unwrap_or_default().to_owned(),
                    receive_count,
                });
            }
            // A short batch means the queue is (nearly) empty: stop; never wait twice.
            if n < BATCH {
                break;
            }
            wait = 0;
        }
        Ok(out)
    }

    async fn queue_delete(&self, receipts: &[String]) -> StoreResult<()> {
        self.delete_batch(&self.ready_url, receipts).await
    }

    async fn queue_change_visibility(&self, p: QueueVisibility) -> StoreResult<()> {
        let r = self
            .sqs()
            .change_message_visibility()
            .queue_url(&self.ready_url)
            .receipt_handle(&p.receipt)
            .visibility_timeout(secs(p.visibility_ms, 43_200))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if stale_receipt(sdk_code(&e)) => Ok(()),
            Err(e) => Err(map_sdk("ChangeMessageVisibility", e)),
        }
    }

    async fn queue_dead_letter(&self, p: QueueDeadLetter) -> StoreResult<()> {
        let body = serde_json::to_string(&p.message)
            .map_err(|e| StoreError::invalid("message", e.to_string()))?;
        self.sqs()
            .send_message()
            .queue_url(&self.dlq_url)
            .message_body(body)
            .message_attributes(MSG_REASON, string_attr(&p.reason)?)
            .message_attributes(MSG_DEAD_MS, string_attr(p.now_ms.to_string())?)
            .send()
            .await
            .map_err(|e| map_sdk("SendMessage dlq", e))?;
        self.delete_batch(&self.ready_url, std::slice::from_ref(&p.receipt))
            .await
    }

    async fn dlq_list(&self, p: DlqList) -> StoreResult<Page<DeadLetter>> {
        let peeked = self.dlq_peek().await?;
        let refs: Vec<&Message> = peeked.iter().collect();
        self.dlq_unhide(&refs).await?;
        let mut letters = peeked.iter().map(letter).collect::<StoreResult<Vec<_>>>()?;
        letters.sort_by(|a, b| (a.dead_ms, &a.id).cmp(&(b.dead_ms, &b.id)));
        let start = match &p.after {
            Some(after) => {
                let (ms, id) = after
                    .split_once('|')
                    .and_then(|(ms, id)| Some((ms.parse::<i64>().ok()?, id)))
                    .ok_or_else(|| StoreError::invalid("after", "not a cursor of this DLQ"))?;
                letters
                    .iter()
                    .position(|l| (l.dead_ms, l.id.as_str()) > (ms, id))
                    .unwrap_or(letters.len())
            }
            None => 0,
        };
        let limit = p.limit.max(1);
        let items: Vec<DeadLetter> = letters.into_iter().skip(start).collect();
        let more = items.len() > limit;
        let items: Vec<DeadLetter> = items.into_iter().take(limit).collect();
        let next = if more {
            items.last().map(|l| format!("{}|{}", l.dead_ms, l.id))
        } else {
            None
        };
        Ok(Page { items, next })
    }

    async fn dlq_get(&self, id: &str) -> StoreResult<Option<DeadLetter>> {
        // SQS cannot read one message by id: receive the DLQ as a listing does (at most
        // DLQ_LIST_MAX letters, hidden a few seconds), keep the one asked for, and make them
        // all visible again. One walk, bounded, instead of the caller paging through lists.
        let peeked = self.dlq_peek().await?;
        let refs: Vec<&Message> = peeked.iter().collect();
        self.dlq_unhide(&refs).await?;
        peeked
            .iter()
            .find(|m| m.message_id() == Some(id))
            .map(letter)
            .transpose()
    }

    async fn dlq_delete(&self, ids: &[String]) -> StoreResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let peeked = self.dlq_peek().await?;
        let (gone, keep): (Vec<&Message>, Vec<&Message>) = peeked
            .iter()
            .partition(|m| wanted.contains(m.message_id().unwrap_or_default()));
        let receipts: Vec<String> = gone
            .iter()
            .map(|m| m.receipt_handle().unwrap_or_default().to_owned())
            .collect();
        self.delete_batch(&self.dlq_url, &receipts).await?;
        self.dlq_unhide(&keep).await
    }

    async fn queue_depth(&self, _now_ms: i64) -> StoreResult<QueueDepth> {
        let (ready, in_flight) = self.depth_of(&self.ready_url).await?;
        let (dead, dead_hidden) = self.depth_of(&self.dlq_url).await?;
        Ok(QueueDepth {
            ready,
            in_flight,
            dead: dead + dead_hidden,
        })
    }
}
