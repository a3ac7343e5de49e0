//! The counters of `gate::signals` as CloudWatch embedded metric format (EMF) documents, one per
//! invocation and tagged with its request id ([`Emf`]), and the reconciler's one per sweep
//! ([`emit_sweep`]).
//!
//! Each document is built from the invocation's own counts and written as one line with one
//! `write` to stdout, where Lambda's log pipeline turns it into CloudWatch metrics without an API
//! call. No process-wide registry sits in between: in a Lambda Managed Instances environment
//! several invocations run at once in one process (`AWS_LAMBDA_MAX_CONCURRENCY`), and a shared
//! registry flushed after each invocation would write one invocation's counts under another's
//! request id.
//!
//! The format: AWS CloudWatch User Guide, "Specification: Embedded metric format": a root member
//! `_aws` with `Timestamp` (epoch **milliseconds**) and `CloudWatchMetrics` (namespace, dimension
//! sets, metric definitions), and the dimension values, metric values and properties as root
//! members.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Map, Value};

use gate::reconciler::ReconcileReport;
use gate::signals::{self, Counts};

/// The property naming the invocation a document belongs to (the Lambda request id).
pub const REQUEST_ID_PROPERTY: &str = "RequestId";

/// The metric counting the first invocation of an execution environment (1 once per process).
pub const COLD_START_METRIC: &str = "ColdStart";

/// The EMF unit of every counter the gate writes.
const COUNT: &str = "Count";

/// One EMF document: namespace [`signals::NAMESPACE`], one dimension set (`dimensions`, in this
/// order), the metrics `(name, value)` (unit `Count`), the property [`REQUEST_ID_PROPERTY`] =
/// `request_id`, timestamp `timestamp_ms` (epoch **milliseconds**).
pub fn document(
    dimensions: &[(&str, &str)],
    request_id: &str,
    metrics: &[(&str, u64)],
    timestamp_ms: i64,
) -> Value {
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": signals::NAMESPACE,
                "Dimensions": [dimensions.iter().map(|(name, _)| *name).collect::<Vec<_>>()],
                "Metrics": metrics
                    .iter()
                    .map(|(name, _)| json!({ "Name": name, "Unit": COUNT }))
                    .collect::<Vec<_>>(),
            }],
        }),
    );
    for (name, value) in dimensions {
        root.insert((*name).into(), Value::from(*value));
    }
    root.insert(REQUEST_ID_PROPERTY.into(), Value::from(request_id));
    for (name, value) in metrics {
        root.insert((*name).into(), Value::from(*value));
    }
    Value::Object(root)
}

/// Writes `doc` to `out` as one line, in one `write_all` (stdout's lock is taken once for it, so
/// the lines of concurrent invocations never interleave).
///
/// # Errors
/// The writer's.
pub fn write_line(doc: &Value, mut out: impl Write) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(doc).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// The EMF writer of one function: the dimension `Integration = integration` and whether the
/// environment's first invocation was counted yet. Shared by the invocations of the process; it
/// holds no counts (each invocation writes its own).
#[derive(Debug)]
pub struct Emf {
    integration: String,
    cold_start_pending: AtomicBool,
}

impl Emf {
    /// The writer for the `Integration` dimension `integration`.
    pub fn new(integration: &str) -> Self {
        Self {
            integration: integration.to_string(),
            cold_start_pending: AtomicBool::new(true),
        }
    }

    /// The `Integration` dimension's value.
    pub fn integration(&self) -> &str {
        &self.integration
    }

    /// The document of `counts` for the invocation `request_id` at `timestamp_ms` (epoch ms):
    /// every counter of [`Counts::counters`], zeros explicit (the alarms' metric math divides
    /// by them), and [`signals::metric::DISTINCT_EFFECT_IDS`] when an effect was seen.
    pub fn counts_document(&self, request_id: &str, counts: &Counts, timestamp_ms: i64) -> Value {
        let mut metrics: Vec<(&str, u64)> = counts.counters().to_vec();
        if counts.max_distinct_effect_ids > 0 {
            metrics.push((
                signals::metric::DISTINCT_EFFECT_IDS,
                counts.max_distinct_effect_ids,
            ));
        }
        document(
            &[(signals::DIMENSION, &self.integration)],
            request_id,
            &metrics,
            timestamp_ms,
        )
    }

    /// Writes the document of `counts` ([`Emf::counts_document`]) to `out`, now. A failed write
    /// is logged, not retried.
    pub fn write_counts(&self, request_id: &str, counts: &Counts, out: impl Write) {
        let doc = self.counts_document(request_id, counts, now_ms());
        self.write(&doc, out);
    }

    /// Writes [`COLD_START_METRIC`] = 1 for `request_id` to `out` if this is the first call in
    /// the process (the environment's first invocation); later calls write nothing.
    pub fn write_cold_start(&self, request_id: &str, out: impl Write) {
        if self.cold_start_pending.swap(false, Ordering::AcqRel) {
            let doc = document(
                &[(signals::DIMENSION, &self.integration)],
                request_id,
                &[(COLD_START_METRIC, 1)],
                now_ms(),
            );
            self.write(&doc, out);
        }
    }

    /// Writes `doc` to `out` ([`write_line`]); a failed write is logged.
    pub fn write(&self, doc: &Value, out: impl Write) {
        if let Err(e) = write_line(doc, out) {
            tracing::warn!(error = %e, "an EMF document was not written");
        }
    }
}

/// Writes the counters of one reconciler sweep ([`Counts::of_reconcile`]) for the invocation
/// `request_id` to `out` (stdout in Lambda) at once, instead of at the end of the invocation: a
/// scheduled run sweeps every 15 s of its minute, and a run killed at its function timeout
/// would otherwise lose the counts of every sweep before. The alarms and the dashboard read
/// these counters with the `Sum` statistic (and `DistinctEffectIds` with `Maximum`), so several
/// documents a run add up to the same figures. A failed write is logged, not retried.
pub fn emit_sweep(report: &ReconcileReport, emf: &Emf, request_id: &str, out: impl Write) {
    emf.write_counts(request_id, &Counts::of_reconcile(report), out);
}

/// The time of a document, epoch milliseconds.
fn now_ms() -> i64 {
    use gate::clock::{Clock, SystemClock};
    SystemClock.now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_names_its_metrics_dimensions_and_request() {
        let doc = document(
            &[("Integration", "jobs"), ("Reason", "stale_timestamp")],
            "req-1",
            &[("WebhooksRejected", 1)],
            1_780_293_600_000,
        );
        assert_eq!(
            doc,
            json!({
                "_aws": {
                    "Timestamp": 1_780_293_600_000_i64,
                    "CloudWatchMetrics": [{
                        "Namespace": "ExactlyOnceGate",
                        "Dimensions": [["Integration", "Reason"]],
                        "Metrics": [{"Name": "WebhooksRejected", "Unit": "Count"}],
                    }],
                },
                "Integration": "jobs",
                "Reason": "stale_timestamp",
                "RequestId": "req-1",
                "WebhooksRejected": 1,
            })
        );
        let mut out = Vec::new();
        write_line(&doc, &mut out).unwrap();
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(out.last(), Some(&b'\n'));
    }

    #[test]
    fn the_cold_start_is_written_once_per_process() {
        let emf = Emf::new("jobs");
        let mut out = Vec::new();
        emf.write_cold_start("first", &mut out);
        emf.write_cold_start("second", &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert_eq!(lines[0]["ColdStart"], 1);
        assert_eq!(lines[0]["RequestId"], "first");
    }
}
