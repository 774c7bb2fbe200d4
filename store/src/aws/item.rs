//! Task ↔ DynamoDB item. Scalars the conditions test are their own attributes; the target,
//! payload and backoff are JSON strings (opaque to DynamoDB, counted in the item size).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use punctual_core::StoreError;
use punctual_core::error::StoreResult;
use punctual_core::task::{Task, TaskStatus};

use super::names::*;
use super::{num, s};

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

fn bad(field: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable {
        message: format!("malformed item attribute {field}: {why}"),
        source: None,
    }
}

pub(crate) fn get_s<'a>(item: &'a Item, field: &str) -> StoreResult<&'a str> {
    match item.get(field) {
        Some(AttributeValue::S(v)) => Ok(v),
        other => Err(bad(field, format!("expected a string, got {other:?}"))),
    }
}

pub(crate) fn opt_s(item: &Item, field: &str) -> Option<String> {
    match item.get(field) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

pub(crate) fn get_n<T: std::str::FromStr>(item: &Item, field: &str) -> StoreResult<T> {
    match item.get(field) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map_err(|_| bad(field, format!("not a number: {v}"))),
        other => Err(bad(field, format!("expected a number, got {other:?}"))),
    }
}

pub(crate) fn opt_n<T: std::str::FromStr>(item: &Item, field: &str) -> StoreResult<Option<T>> {
    match item.get(field) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(_) => get_n(item, field).map(Some),
    }
}

fn json<T: serde::de::DeserializeOwned>(item: &Item, field: &str) -> StoreResult<T> {
    serde_json::from_str(get_s(item, field)?).map_err(|e| bad(field, e))
}

pub(crate) fn to_json(v: &impl serde::Serialize, field: &str) -> StoreResult<AttributeValue> {
    serde_json::to_string(v)
        .map(AttributeValue::S)
        .map_err(|e| StoreError::invalid(field, e.to_string()))
}

/// The item of a new task.
pub(crate) fn task_to_item(t: &Task) -> StoreResult<Item> {
    let mut item = Item::new();
    item.insert(TASK_ID.into(), s(&t.task_id));
    item.insert(SHARD.into(), num(t.shard));
    item.insert(DUE_MS.into(), num(t.due_ms));
    item.insert(DUE_KEY.into(), s(t.due_key()));
    if let Some(b) = &t.due_bucket {
        item.insert(DUE_BUCKET.into(), s(b));
    }
    item.insert(STATUS.into(), s(t.status.as_str()));
    item.insert(VERSION.into(), num(t.version));
    item.insert(ATTEMPT.into(), num(t.attempt));
    item.insert(MAX_ATTEMPTS.into(), num(t.max_attempts));
    item.insert(BACKOFF.into(), to_json(&t.backoff, "backoff")?);
    item.insert(TARGET.into(), to_json(&t.target, "target")?);
    item.insert(PAYLOAD.into(), to_json(&t.payload, "payload")?);
    if let Some(r) = t.running_until {
        item.insert(RUNNING_UNTIL.into(), num(r));
    }
    if let Some(e) = &t.last_error {
        item.insert(LAST_ERROR.into(), s(e));
    }
    item.insert(CREATED_MS.into(), num(t.created_ms));
    item.insert(UPDATED_MS.into(), num(t.updated_ms));
    Ok(item)
}

/// The task an item holds.
pub(crate) fn task_from_item(item: &Item) -> StoreResult<Task> {
    let status = get_s(item, STATUS)?;
    let status = TaskStatus::parse(status).ok_or_else(|| bad(STATUS, status))?;
    Ok(Task {
        task_id: get_s(item, TASK_ID)?.to_owned(),
        shard: get_n(item, SHARD)?,
        due_ms: get_n(item, DUE_MS)?,
        status,
        version: get_n(item, VERSION)?,
        attempt: get_n(item, ATTEMPT)?,
        max_attempts: get_n(item, MAX_ATTEMPTS)?,
        backoff: json(item, BACKOFF)?,
        target: json(item, TARGET)?,
        payload: json(item, PAYLOAD)?,
        due_bucket: opt_s(item, DUE_BUCKET),
        running_until: opt_n(item, RUNNING_UNTIL)?,
        last_error: opt_s(item, LAST_ERROR),
        created_ms: get_n(item, CREATED_MS)?,
        updated_ms: get_n(item, UPDATED_MS)?,
    })
}

/// The size DynamoDB bills an item at: the UTF-8 length of each attribute name plus its value
/// (strings: UTF-8 length; numbers: about 1 byte per two significant digits + 1; booleans and
/// nulls: 1 byte). One write unit covers 1 KB, one read unit 4 KB.
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, v)| {
            name.len()
                + match v {
                    AttributeValue::S(s) => s.len(),
                    AttributeValue::N(n) => {
                        let digits = n.trim_start_matches('-').replace('.', "");
                        let significant = digits.trim_start_matches('0').len().max(1);
                        significant.div_ceil(2) + 1
                    }
                    AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
                    AttributeValue::B(b) => b.as_ref().len(),
                    _ => 0,
                }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_core::testkit::task;

    #[test]
    fn item_round_trips() {
        let new = task()
            .id("item-1")
            .http("http://x/y")
            .payload(serde_json::json!({"a": [1, 2]}))
            .build();
        let mut t = Task::from_new(new, 16, punctual_core::testkit::T0);
        t.last_error = Some("boom".into());
        t.running_until = Some(5);
        let item = task_to_item(&t).unwrap();
        assert_eq!(task_from_item(&item).unwrap(), t);
        assert!(item_size(&item) < 1_024, "a small task fits one write unit");
    }
}
