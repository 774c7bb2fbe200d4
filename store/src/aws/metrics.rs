//! Counting requests and capacity units: an SDK interceptor for cost tests and operators.
//!
//! Attach one [`RequestCounter`] to both clients ([`Clients::new`](super::Clients::new)). It
//! counts each call once (not per retry attempt), keyed `"Service.Operation"` and, for
//! DynamoDB calls naming one table, `"Service.Operation table-suffix"` too (e.g.
//! `"DynamoDB.UpdateItem tasks"`), and it estimates the read units of each DynamoDB read from
//! the item sizes returned, by DynamoDB's rules (emulators do not report consumed capacity):
//! `Query` ½ × ⌈bytes returned / 4 KB⌉ (at least ½: eventually consistent), `GetItem` and
//! each `BatchGetItem` item ⌈size / 4 KB⌉ (strongly consistent). Write units follow from the
//! counts: ⌈item size / 1 KB⌉ per `PutItem`/`UpdateItem` ([`item_size`](super::item_size)),
//! plus the index writes the protocol implies (a GSI put when `due_bucket` appears, a GSI
//! delete when it goes).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::ConfigBag;
use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
use aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::put_item::PutItemInput;
use aws_sdk_dynamodb::operation::query::{QueryInput, QueryOutput};
use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

use super::item::item_size;

/// Estimated DynamoDB capacity units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    /// Read units.
    pub read: f64,
}

#[derive(Debug, Default)]
struct Inner {
    counts: BTreeMap<String, u64>,
    units: Units,
}

/// Counts SDK calls by operation and estimates capacity units. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    inner: Arc<Mutex<Inner>>,
}

fn table_suffix(table: Option<&str>) -> Option<String> {
    table.map(|t| t.rsplit('-').next().unwrap_or(t).to_owned())
}

impl RequestCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.inner.lock().expect("counter lock").counts.clone()
    }

    /// The estimated units so far.
    pub fn units(&self) -> Units {
        self.inner.lock().expect("counter lock").units
    }

    /// Sets everything back to zero.
    pub fn reset(&self) {
        *self.inner.lock().expect("counter lock") = Inner::default();
    }

    /// The count of one key.
    pub fn get(&self, key: &str) -> u64 {
        self.snapshot().get(key).copied().unwrap_or(0)
    }
}

fn kb_units(bytes: usize, unit: usize) -> f64 {
    bytes.div_ceil(unit).max(1) as f64
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "punctual.RequestCounter"
    }

    // Not `read_before_execution`: a client-level interceptor runs that before the operation's
    // configuration (and its `Metadata`) is applied. Serialization happens once per call.
    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let key = match cfg.load::<Metadata>() {
            Some(m) => format!("{}.{}", m.service(), m.name()),
            None => "unknown".to_owned(),
        };
        let input = context.input();
        let mut table = None;
        if let Some(i) = input.downcast_ref::<PutItemInput>() {
            table = table_suffix(i.table_name());
        } else if let Some(i) = input.downcast_ref::<UpdateItemInput>() {
            table = table_suffix(i.table_name());
        } else if let Some(i) = input.downcast_ref::<GetItemInput>() {
            table = table_suffix(i.table_name());
        } else if let Some(i) = input.downcast_ref::<QueryInput>() {
            table = table_suffix(i.table_name());
        }
        let mut inner = self.inner.lock().expect("counter lock");
        if let Some(t) = table {
            *inner.counts.entry(format!("{key} {t}")).or_default() += 1;
        }
        *inner.counts.entry(key).or_default() += 1;
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Ok(output) = context.output_or_error() else {
            return Ok(());
        };
        let mut inner = self.inner.lock().expect("counter lock");
        if let Some(o) = output.downcast_ref::<QueryOutput>() {
            let bytes: usize = o.items().iter().map(item_size).sum();
            inner.units.read += 0.5 * kb_units(bytes, 4_096);
        } else if let Some(o) = output.downcast_ref::<GetItemOutput>() {
            inner.units.read += kb_units(o.item().map(item_size).unwrap_or(0), 4_096);
        } else if let Some(o) = output.downcast_ref::<BatchGetItemOutput>() {
            let n: f64 = o
                .responses()
                .map(|r| {
                    r.values()
                        .flatten()
                        .map(|i| kb_units(item_size(i), 4_096))
                        .sum()
                })
                .unwrap_or(0.0);
            inner.units.read += n;
        }
        Ok(())
    }
}
