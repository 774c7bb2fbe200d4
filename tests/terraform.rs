//! The Terraform module (`infra/terraform/*.tf`) must create what the code uses: the test
//! parses the HCL and compares tables, keys, both GSIs, TTL, queues, redrive settings, the
//! event source mapping, the functions' environment and the alarm's metric with the code's own
//! constants (`store/src/aws/names.rs`, the aws backend's and `punctual init`'s defaults,
//! `src/lambda`). A second test proves the check fails on altered copies.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hcl::{Block, Body, Expression};
use punctual::lambda;
use punctual_store::aws::names::*;

const MODULE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/infra/terraform");
/// `punctual init` creates the DLQ with this retention (store/src/aws/init.rs).
const INIT_SOURCE: &str = include_str!("../store/src/aws/init.rs");

/// Every top-level block of the module's `*.tf` files, with the file it came from.
fn load(dir: &Path) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tf"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no .tf file in {}", dir.display()));
    }
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let body: Body = hcl::parse(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        blocks.extend(body.into_blocks());
    }
    Ok(blocks)
}

struct Module {
    blocks: Vec<Block>,
    locals: BTreeMap<String, Expression>,
}

fn labels(b: &Block) -> Vec<&str> {
    b.labels.iter().map(|l| l.as_str()).collect()
}

fn attr<'a>(body: &'a Body, key: &str) -> Option<&'a Expression> {
    body.attributes()
        .find(|a| a.key.as_str() == key)
        .map(|a| &a.expr)
}

fn children<'a>(body: &'a Body, ident: &'a str) -> impl Iterator<Item = &'a Block> + 'a {
    body.blocks()
        .filter(move |b| b.identifier.as_str() == ident)
}

/// A string literal's value, a template's source (`${var.prefix}tasks`), anything else as HCL.
fn text(e: &Expression) -> String {
    match e {
        Expression::String(s) => s.clone(),
        Expression::TemplateExpr(t) => match t.as_ref() {
            hcl::expr::TemplateExpr::QuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

impl Module {
    fn new(blocks: Vec<Block>) -> Self {
        let mut locals = BTreeMap::new();
        for b in blocks.iter().filter(|b| b.identifier.as_str() == "locals") {
            for a in b.body.attributes() {
                locals.insert(a.key.to_string(), a.expr.clone());
            }
        }
        Self { blocks, locals }
    }

    fn block(&self, kind: &str, labels_: &[&str]) -> Result<&Block, String> {
        self.blocks
            .iter()
            .find(|b| b.identifier.as_str() == kind && labels(b) == labels_)
            .ok_or_else(|| format!("no {kind} {labels_:?}"))
    }

    fn resource(&self, ty: &str, name: &str) -> Result<&Body, String> {
        Ok(&self.block("resource", &[ty, name])?.body)
    }

    /// An attribute's text, following one `local.x` indirection.
    fn value(&self, body: &Body, key: &str) -> Option<String> {
        let e = attr(body, key)?;
        let t = text(e);
        match t.strip_prefix("local.") {
            Some(name) => self.locals.get(name).map(text),
            None => Some(t),
        }
    }

    fn variable_default(&self, name: &str) -> Option<String> {
        let b = self.block("variable", &[name]).ok()?;
        attr(&b.body, "default").map(text)
    }
}

/// Records a difference unless `got` is `want`.
fn expect(bad: &mut Vec<String>, what: String, got: Option<String>, want: String) {
    if got.as_deref() != Some(want.as_str()) {
        bad.push(format!(
            "{what}: terraform has {got:?}, the code wants {want:?}"
        ));
    }
}

/// Collects the differences between the module in `dir` and the code.
fn check(dir: &Path) -> Vec<String> {
    let module = match load(dir) {
        Ok(b) => Module::new(b),
        Err(e) => return vec![e],
    };
    let mut bad = Vec::new();
    let named = |suffix: &str| format!("${{var.prefix}}{suffix}");

    expect(
        &mut bad,
        "variable prefix default".into(),
        module.variable_default("prefix"),
        DEFAULT_PREFIX.into(),
    );
    expect(
        &mut bad,
        "variable max_receive_count default".into(),
        module.variable_default("max_receive_count"),
        punctual_store::aws::DEFAULT_MAX_RECEIVE_COUNT.to_string(),
    );

    // ---- tasks table
    match module.resource("aws_dynamodb_table", "tasks") {
        Err(e) => bad.push(e),
        Ok(t) => {
            expect(
                &mut bad,
                "tasks name".into(),
                module.value(t, "name"),
                named(TASKS_TABLE_SUFFIX),
            );
            expect(
                &mut bad,
                "tasks billing".into(),
                module.value(t, "billing_mode"),
                "PAY_PER_REQUEST".into(),
            );
            expect(
                &mut bad,
                "tasks hash_key".into(),
                module.value(t, "hash_key"),
                TASK_ID.into(),
            );
            let types: BTreeMap<String, String> = children(t, "attribute")
                .map(|a| {
                    (
                        module.value(&a.body, "name").unwrap_or_default(),
                        module.value(&a.body, "type").unwrap_or_default(),
                    )
                })
                .collect();
            let want: BTreeMap<String, String> = [TASK_ID, DUE_BUCKET, DUE_KEY, STATUS_PART]
                .iter()
                .map(|a| (a.to_string(), "S".to_string()))
                .collect();
            if types != want {
                bad.push(format!("tasks attributes: {types:?}, want {want:?}"));
            }
            let gsis: BTreeMap<String, &Body> = children(t, "global_secondary_index")
                .map(|g| (module.value(&g.body, "name").unwrap_or_default(), &g.body))
                .collect();
            let names: BTreeSet<&str> = gsis.keys().map(String::as_str).collect();
            if names != BTreeSet::from([GSI_BY_DUE, GSI_BY_STATUS]) {
                bad.push(format!(
                    "tasks GSIs: {names:?}, want {GSI_BY_DUE} and {GSI_BY_STATUS}"
                ));
            }
            if let Some(g) = gsis.get(GSI_BY_DUE) {
                expect(
                    &mut bad,
                    "by_due hash".into(),
                    module.value(g, "hash_key"),
                    DUE_BUCKET.into(),
                );
                expect(
                    &mut bad,
                    "by_due range".into(),
                    module.value(g, "range_key"),
                    DUE_KEY.into(),
                );
                expect(
                    &mut bad,
                    "by_due projection".into(),
                    module.value(g, "projection_type"),
                    "INCLUDE".into(),
                );
                let projected: BTreeSet<String> = match attr(g, "non_key_attributes") {
                    Some(Expression::Array(a)) => a.iter().map(text).collect(),
                    _ => BTreeSet::new(),
                };
                let want: BTreeSet<String> = GSI_PROJECTED.iter().map(|s| s.to_string()).collect();
                if projected != want {
                    bad.push(format!(
                        "by_due non_key_attributes: {projected:?}, want {want:?}"
                    ));
                }
            }
            if let Some(g) = gsis.get(GSI_BY_STATUS) {
                expect(
                    &mut bad,
                    "by_status hash".into(),
                    module.value(g, "hash_key"),
                    STATUS_PART.into(),
                );
                expect(
                    &mut bad,
                    "by_status range".into(),
                    module.value(g, "range_key"),
                    DUE_KEY.into(),
                );
                expect(
                    &mut bad,
                    "by_status projection".into(),
                    module.value(g, "projection_type"),
                    "KEYS_ONLY".into(),
                );
            }
            let ttl = children(t, "ttl").next();
            expect(
                &mut bad,
                "tasks ttl attribute".into(),
                ttl.and_then(|b| module.value(&b.body, "attribute_name")),
                EXPIRES_AT.into(),
            );
            expect(
                &mut bad,
                "tasks ttl enabled".into(),
                ttl.and_then(|b| module.value(&b.body, "enabled")),
                "true".into(),
            );
            expect(
                &mut bad,
                "tasks point-in-time recovery".into(),
                children(t, "point_in_time_recovery")
                    .next()
                    .and_then(|b| module.value(&b.body, "enabled")),
                "true".into(),
            );
        }
    }

    // ---- leases table
    match module.resource("aws_dynamodb_table", "leases") {
        Err(e) => bad.push(e),
        Ok(t) => {
            expect(
                &mut bad,
                "leases name".into(),
                module.value(t, "name"),
                named(LEASES_TABLE_SUFFIX),
            );
            expect(
                &mut bad,
                "leases hash_key".into(),
                module.value(t, "hash_key"),
                LEASE_PK.into(),
            );
            expect(
                &mut bad,
                "leases range_key".into(),
                module.value(t, "range_key"),
                LEASE_SK.into(),
            );
        }
    }

    // ---- queues
    match module.resource("aws_sqs_queue", "dlq") {
        Err(e) => bad.push(e),
        Ok(q) => {
            expect(
                &mut bad,
                "dlq name".into(),
                module.value(q, "name"),
                named(DLQ_SUFFIX),
            );
            expect(
                &mut bad,
                "dlq retention".into(),
                module.value(q, "message_retention_seconds"),
                "var.dlq_retention_seconds".into(),
            );
        }
    }
    let dlq_days = module.variable_default("dlq_retention_seconds");
    match &dlq_days {
        Some(d) if INIT_SOURCE.contains(&format!("MessageRetentionPeriod, \"{d}\"")) => {}
        other => bad.push(format!(
            "dlq_retention_seconds default {other:?} is not the retention `punctual init` sets"
        )),
    }
    let ready_retention = module.variable_default("ready_retention_seconds");
    let shorter = match (&ready_retention, &dlq_days) {
        (Some(r), Some(d)) => r.parse::<u64>().ok() < d.parse::<u64>().ok(),
        _ => false,
    };
    if !shorter {
        bad.push(format!(
            "the DLQ must keep letters longer than the ready queue: {ready_retention:?} vs {dlq_days:?}"
        ));
    }
    match module.resource("aws_sqs_queue", "ready") {
        Err(e) => bad.push(e),
        Ok(q) => {
            expect(
                &mut bad,
                "ready name".into(),
                module.value(q, "name"),
                named(READY_QUEUE_SUFFIX),
            );
            let policy = match attr(q, "redrive_policy") {
                Some(Expression::FuncCall(f)) if f.name.to_string() == "jsonencode" => {
                    match f.args.first() {
                        Some(Expression::Object(o)) => o
                            .iter()
                            .map(|(k, v)| (k.to_string(), text(v)))
                            .collect::<BTreeMap<_, _>>(),
                        _ => BTreeMap::new(),
                    }
                }
                _ => BTreeMap::new(),
            };
            expect(
                &mut bad,
                "ready redrive target".into(),
                policy.get("deadLetterTargetArn").cloned(),
                "aws_sqs_queue.dlq.arn".into(),
            );
            expect(
                &mut bad,
                "ready redrive maxReceiveCount".into(),
                policy.get("maxReceiveCount").cloned(),
                "var.max_receive_count".into(),
            );
        }
    }
    match module.resource("aws_sqs_queue_redrive_allow_policy", "dlq") {
        Err(e) => bad.push(e),
        Ok(p) => {
            let allow = module.value(p, "redrive_allow_policy").unwrap_or_default();
            if !(allow.contains("byQueue") && allow.contains("aws_sqs_queue.ready.arn")) {
                bad.push(format!("redrive allow policy: {allow}"));
            }
        }
    }

    // ---- functions
    match module.resource("aws_lambda_event_source_mapping", "worker") {
        Err(e) => bad.push(e),
        Ok(m) => {
            expect(
                &mut bad,
                "event source".into(),
                module.value(m, "event_source_arn"),
                "aws_sqs_queue.ready.arn".into(),
            );
            let types = match attr(m, "function_response_types") {
                Some(Expression::Array(a)) => a.iter().map(text).collect::<Vec<_>>(),
                _ => Vec::new(),
            };
            if types != ["ReportBatchItemFailures"] {
                bad.push(format!("function_response_types: {types:?}"));
            }
        }
    }
    let locals = module
        .locals
        .values()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    for env in [
        lambda::ENV_PREFIX,
        lambda::ENV_API_KEYS_JSON,
        lambda::ENV_WEBHOOK_SECRET,
        lambda::ENV_RUN_TIMEOUT_MS,
        lambda::ENV_HTTP_TIMEOUT_MS,
        lambda::ENV_POLLER_RUN_FOR_MS,
        lambda::ENV_POLLER_RELEASE_MARGIN_MS,
    ] {
        if !locals.contains(env) {
            bad.push(format!("no function gets {env}"));
        }
    }
    expect(
        &mut bad,
        "variable poller_run_for_ms default".into(),
        module.variable_default("poller_run_for_ms"),
        lambda::poller::DEFAULT_RUN_FOR_MS.to_string(),
    );
    expect(
        &mut bad,
        "variable poller_release_margin_ms default".into(),
        module.variable_default("poller_release_margin_ms"),
        lambda::poller::DEFAULT_RELEASE_MARGIN_MS.to_string(),
    );
    expect(
        &mut bad,
        "variable run_timeout_ms default".into(),
        module.variable_default("run_timeout_ms"),
        punctual_worker::WorkerConfig::default()
            .run_timeout_ms
            .to_string(),
    );
    match module.resource("aws_cloudwatch_metric_alarm", "fire_lag") {
        Err(e) => bad.push(e),
        Ok(a) => {
            expect(
                &mut bad,
                "fire lag namespace".into(),
                module.value(a, "namespace"),
                lambda::worker::METRIC_NAMESPACE.into(),
            );
            expect(
                &mut bad,
                "fire lag metric".into(),
                module.value(a, "metric_name"),
                lambda::worker::METRIC_FIRE_LAG.into(),
            );
        }
    }
    for alarm in ["dlq_depth", "oldest_message_age"] {
        if let Err(e) = module.resource("aws_cloudwatch_metric_alarm", alarm) {
            bad.push(e);
        }
    }
    bad
}

#[test]
fn the_module_matches_the_code() {
    let bad = check(Path::new(MODULE));
    assert!(
        bad.is_empty(),
        "infra/terraform differs from the code:\n{}",
        bad.join("\n")
    );
}

/// The module copied to a temp dir with `from` replaced by `to` in `file` (which must
/// contain it).
fn altered(file: &str, from: &str, to: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(MODULE).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "tf") {
            let mut text = std::fs::read_to_string(&p).unwrap();
            if p.file_name().unwrap() == file {
                assert!(text.contains(from), "{file} has no {from:?}");
                text = text.replacen(from, to, 1);
            }
            std::fs::write(dir.path().join(p.file_name().unwrap()), text).unwrap();
        }
    }
    dir
}

#[test]
fn the_check_fails_on_an_altered_module() {
    let cases = [
        (
            "main.tf",
            "projection_type = \"KEYS_ONLY\"",
            "projection_type = \"ALL\"",
            "by_status projection",
        ),
        (
            "main.tf",
            "name            = \"by_status\"",
            "name            = \"by_state\"",
            "GSIs",
        ),
        (
            "main.tf",
            "\"version\", \"shard\", \"due_ms\"",
            "\"version\", \"shard\"",
            "non_key_attributes",
        ),
        (
            "main.tf",
            "attribute_name = \"expires_at\"",
            "attribute_name = \"ttl\"",
            "ttl attribute",
        ),
        (
            "main.tf",
            "dlq          = \"${var.prefix}dlq\"",
            "dlq          = \"${var.prefix}dead\"",
            "dlq name",
        ),
        (
            "main.tf",
            "maxReceiveCount     = var.max_receive_count",
            "maxReceiveCount     = 5",
            "maxReceiveCount",
        ),
        (
            "variables.tf",
            "default     = 10\n",
            "default     = 3\n",
            "max_receive_count default",
        ),
        (
            "variables.tf",
            "default     = 1209600",
            "default     = 604800",
            "punctual init",
        ),
        (
            "functions.tf",
            "[\"ReportBatchItemFailures\"]",
            "[]",
            "function_response_types",
        ),
        (
            "alarms.tf",
            "metric_name         = \"FireLagMs\"",
            "metric_name         = \"Lag\"",
            "fire lag metric",
        ),
    ];
    for (file, from, to, what) in cases {
        let dir = altered(file, from, to);
        let bad = check(dir.path());
        assert!(
            bad.iter().any(|b| b.contains(what)),
            "changing {from:?} to {to:?} in {file} was not caught as {what:?}: {bad:?}"
        );
    }
    // And a module that does not parse at all.
    let dir = altered(
        "main.tf",
        "resource \"aws_dynamodb_table\" \"tasks\" {",
        "resource {",
    );
    assert!(!check(dir.path()).is_empty());
}
