//! [`ReadyQueue`] over the `queue` and `dlq` tables, with SQS semantics.

use std::time::Duration;

use async_trait::async_trait;
use punctual_core::error::StoreResult;
use punctual_core::store::{
    DeadLetter, DispatchMessage, DlqList, Page, QueueDeadLetter, QueueDepth, QueueReceive,
    QueueSend, QueueVisibility, ReceivedMessage,
};
use punctual_core::{ReadyQueue, StoreError};
use rusqlite::{Connection, OptionalExtension, params};

use super::EmbeddedStore;
use super::db::DbResult;

/// Reason recorded for messages moved to the DLQ by the redrive backstop.
pub const MAX_RECEIVE_REASON: &str = "maxReceiveCount exceeded";

/// Most messages per receive (and per delete) worth asking for. SQS stops at 10; here a
/// receive is one write job whose cost is mostly per message (an index move each), so larger
/// receives only save the per-job overhead, and a worker with hundreds of free slots fills
/// them in one trip through the writer instead of dozens.
const RECEIVE_BATCH_MAX: usize = 1_000;

/// While long polling, how often to look again for messages sent by *other* processes (sends
/// in this process wake the poll at once).
const RECHECK: Duration = Duration::from_millis(50);

/// The visible messages, oldest first.
pub(super) const RECEIVE_SQL: &str = "SELECT id, task_id, version, shard, due_ms, receive_count
     FROM queue WHERE visible_at_ms <= ?1 ORDER BY visible_at_ms, id LIMIT ?2";

/// Whether a receive would find anything.
pub(super) const ANY_VISIBLE_SQL: &str = "SELECT 1 FROM queue WHERE visible_at_ms <= ?1 LIMIT 1";

/// A receipt: the message id and which delivery of it.
fn receipt(id: i64, receive_count: u32) -> String {
    format!("{id}:{receive_count}")
}

/// Parses a receipt; `None` for one this store never handed out.
fn parse_receipt(receipt: &str) -> Option<(i64, u32)> {
    let (id, count) = receipt.split_once(':')?;
    Some((id.parse().ok()?, count.parse().ok()?))
}

fn parse_letter_id(id: &str, field: &str) -> StoreResult<i64> {
    id.parse()
        .map_err(|_| StoreError::invalid(field, format!("{id:?} is not a dead-letter id")))
}

fn insert_letter(
    conn: &Connection,
    m: &DispatchMessage,
    reason: &str,
    now_ms: i64,
    receive_count: u32,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO dlq (task_id, version, shard, due_ms, reason, dead_ms, receive_count)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        m.task_id,
        m.version as i64,
        m.shard,
        m.due_ms,
        reason,
        now_ms,
        receive_count
    ])?;
    Ok(())
}

/// One receive attempt: takes visible rows oldest first until `max` are delivered or none is
/// left; rows past `max_receive_count` go to the DLQ on the way.
fn receive(
    conn: &Connection,
    max: usize,
    visibility_ms: i64,
    now_ms: i64,
    max_receive_count: u32,
) -> DbResult<Vec<ReceivedMessage>> {
    let mut out = Vec::with_capacity(max);
    let mut select = conn.prepare_cached(RECEIVE_SQL)?;
    let mut deliver = conn.prepare_cached(
        "UPDATE queue SET receive_count = ?2, visible_at_ms = ?3, receipt = ?4 WHERE id = ?1",
    )?;
    let mut delete = conn.prepare_cached("DELETE FROM queue WHERE id = ?1")?;
    while out.len() < max {
        let rows = select
            .query_map(params![now_ms, (max - out.len()) as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    DispatchMessage {
                        task_id: r.get(1)?,
                        version: r.get::<_, i64>(2)? as u64,
                        shard: r.get(3)?,
                        due_ms: r.get(4)?,
                    },
                    r.get::<_, u32>(5)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        if rows.is_empty() {
            break;
        }
        // Every row seen is either hidden or removed below, so the loop ends.
        for (id, message, count) in rows {
            let count = count + 1;
            if count > max_receive_count {
                insert_letter(conn, &message, MAX_RECEIVE_REASON, now_ms, count - 1)?;
                delete.execute([id])?;
                continue;
            }
            let r = receipt(id, count);
            deliver.execute(params![id, count, now_ms + visibility_ms, r])?;
            out.push(ReceivedMessage {
                message,
                receipt: r,
                receive_count: count,
            });
        }
    }
    Ok(out)
}

impl EmbeddedStore {
    /// Whether any message is visible at `now_ms`, read without the write lock.
    async fn queue_any_visible(&self, now_ms: i64) -> StoreResult<bool> {
        self.readers
            .run(move |conn| {
                let mut stmt = conn.prepare_cached(ANY_VISIBLE_SQL)?;
                Ok(stmt.exists([now_ms])?)
            })
            .await
    }
}

/// The select of a dead letter that [`letter_from_row`] reads.
macro_rules! letter_columns {
    () => {
        "SELECT id, task_id, version, shard, due_ms, reason, dead_ms FROM dlq"
    };
}

fn letter_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DeadLetter> {
    Ok(DeadLetter {
        id: r.get::<_, i64>(0)?.to_string(),
        message: DispatchMessage {
            task_id: r.get(1)?,
            version: r.get::<_, i64>(2)? as u64,
            shard: r.get(3)?,
            due_ms: r.get(4)?,
        },
        reason: r.get(5)?,
        dead_ms: r.get(6)?,
    })
}

#[async_trait]
impl ReadyQueue for EmbeddedStore {
    fn max_receive_count(&self) -> u32 {
        self.max_receive_count
    }

    fn receive_batch_max(&self) -> usize {
        RECEIVE_BATCH_MAX
    }

    async fn queue_send(&self, p: QueueSend) -> StoreResult<()> {
        if p.messages.is_empty() {
            return Ok(());
        }
        self.writer
            .run_batch(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "INSERT INTO queue (task_id, version, shard, due_ms, sent_ms, visible_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                )?;
                for m in &p.messages {
                    stmt.execute(params![
                        m.task_id,
                        m.version as i64,
                        m.shard,
                        m.due_ms,
                        p.now_ms
                    ])?;
                }
                Ok(())
            })
            .await?;
        self.queue_notify.notify_waiters();
        Ok(())
    }

    async fn queue_receive(&self, p: QueueReceive) -> StoreResult<Vec<ReceivedMessage>> {
        if p.max == 0 {
            return Ok(Vec::new());
        }
        let start = tokio::time::Instant::now();
        let wait = Duration::from_millis(p.wait_ms.max(0) as u64);
        // After a timer wake-up (not a send in this process), look first with a read: idle
        // workers re-checking every 50 ms should not take the file's write lock each time.
        let mut probe_first = false;
        loop {
            // Registered before looking, so a send that commits after the look still wakes
            // this poll.
            let notified = self.queue_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            // The caller's now, moved on by the real time this long poll has waited.
            let now_ms = p.now_ms + start.elapsed().as_millis() as i64;
            let look = !probe_first || self.queue_any_visible(now_ms).await?;
            if look {
                let (max, vis, mrc) = (p.max, p.visibility_ms, self.max_receive_count);
                let got = self
                    .writer
                    .run(move |conn| receive(conn, max, vis, now_ms, mrc))
                    .await?;
                if !got.is_empty() {
                    return Ok(got);
                }
            }
            let waited = start.elapsed();
            if waited >= wait {
                return Ok(Vec::new());
            }
            let nap = RECHECK.min(wait - waited);
            probe_first = tokio::select! {
                _ = notified => false,
                _ = tokio::time::sleep(nap) => true,
            };
        }
    }

    async fn queue_delete(&self, receipts: &[String]) -> StoreResult<()> {
        // Unknown, malformed and stale receipts (of an earlier delivery) match no row.
        let keys: Vec<(i64, u32)> = receipts.iter().filter_map(|r| parse_receipt(r)).collect();
        if keys.is_empty() {
            return Ok(());
        }
        self.writer
            .run(move |conn| {
                let mut stmt =
                    conn.prepare_cached("DELETE FROM queue WHERE id = ?1 AND receive_count = ?2")?;
                for (id, count) in &keys {
                    stmt.execute(params![id, count])?;
                }
                Ok(())
            })
            .await
    }

    async fn queue_change_visibility(&self, p: QueueVisibility) -> StoreResult<()> {
        // Like a delete: a receipt of an earlier delivery no longer moves the message.
        let Some((id, count)) = parse_receipt(&p.receipt) else {
            return Ok(());
        };
        self.writer
            .run(move |conn| {
                conn.prepare_cached(
                    "UPDATE queue SET visible_at_ms = ?3 WHERE id = ?1 AND receive_count = ?2",
                )?
                .execute(params![id, count, p.now_ms + p.visibility_ms])?;
                Ok(())
            })
            .await
    }

    async fn queue_dead_letter(&self, p: QueueDeadLetter) -> StoreResult<()> {
        self.writer
            .run(move |conn| {
                // The letter is written even if the receipt is stale: the worker decided the
                // task is dead (its terminal write is done), and the DLQ is where operators
                // look for dead tasks. A redelivered copy is then dropped by its claim.
                let receive_count = match parse_receipt(&p.receipt) {
                    Some((id, count)) => {
                        conn.prepare_cached(
                            "DELETE FROM queue WHERE id = ?1 AND receive_count = ?2",
                        )?
                        .execute(params![id, count])?;
                        count
                    }
                    None => 0,
                };
                insert_letter(conn, &p.message, &p.reason, p.now_ms, receive_count)?;
                Ok(())
            })
            .await
    }

    async fn dlq_list(&self, p: DlqList) -> StoreResult<Page<DeadLetter>> {
        let after = match &p.after {
            Some(a) => parse_letter_id(a, "after")?,
            None => 0,
        };
        if p.limit == 0 {
            return Ok(Page {
                items: Vec::new(),
                next: None,
            });
        }
        self.readers
            .run(move |conn| {
                let mut stmt = conn.prepare_cached(concat!(
                    letter_columns!(),
                    " WHERE id > ?1 ORDER BY id LIMIT ?2"
                ))?;
                let mut items = stmt
                    .query_map(params![after, p.limit as i64 + 1], letter_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let next = if items.len() > p.limit {
                    items.truncate(p.limit);
                    items.last().map(|l| l.id.clone())
                } else {
                    None
                };
                Ok(Page { items, next })
            })
            .await
    }

    async fn dlq_get(&self, id: &str) -> StoreResult<Option<DeadLetter>> {
        // A string that is no letter id of this DLQ names no letter: `None`, not an error.
        let Ok(id) = parse_letter_id(id, "id") else {
            return Ok(None);
        };
        self.readers
            .run(move |conn| {
                let mut stmt = conn.prepare_cached(concat!(letter_columns!(), " WHERE id = ?1"))?;
                Ok(stmt.query_row([id], letter_from_row).optional()?)
            })
            .await
    }

    async fn dlq_delete(&self, ids: &[String]) -> StoreResult<()> {
        let ids = ids
            .iter()
            .map(|id| parse_letter_id(id, "ids"))
            .collect::<StoreResult<Vec<_>>>()?;
        if ids.is_empty() {
            return Ok(());
        }
        self.writer
            .run(move |conn| {
                let mut stmt = conn.prepare_cached("DELETE FROM dlq WHERE id = ?1")?;
                for id in &ids {
                    stmt.execute([id])?;
                }
                Ok(())
            })
            .await
    }

    async fn queue_depth(&self, now_ms: i64) -> StoreResult<QueueDepth> {
        self.readers
            .run(move |conn| {
                // One snapshot for the three counts. Counting walks the queue's index: the
                // queue holds what is in flight, not what is stored, so this stays small.
                let tx = conn.unchecked_transaction()?;
                let count = |sql: &str, arg: Option<i64>| -> rusqlite::Result<u64> {
                    let mut stmt = tx.prepare_cached(sql)?;
                    let n: i64 = match arg {
                        Some(a) => stmt.query_row([a], |r| r.get(0))?,
                        None => stmt.query_row([], |r| r.get(0))?,
                    };
                    Ok(n as u64)
                };
                let depth = QueueDepth {
                    ready: count(
                        "SELECT count(*) FROM queue WHERE visible_at_ms <= ?1",
                        Some(now_ms),
                    )?,
                    in_flight: count(
                        "SELECT count(*) FROM queue WHERE visible_at_ms > ?1",
                        Some(now_ms),
                    )?,
                    dead: count("SELECT count(*) FROM dlq", None)?,
                };
                tx.commit()?;
                Ok(depth)
            })
            .await
    }
}
