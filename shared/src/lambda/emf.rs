//! The EMF recorder every function installs ([`init_metrics`]): the counters of `crate::signals`
//! written as CloudWatch embedded metric format documents to stdout after every invocation, and
//! the reconciler's after every sweep too ([`emit_sweep`]).

use lambda_runtime::Error;

use crate::reconciler::ReconcileReport;
use crate::signals;

/// Installs the EMF recorder: namespace [`signals::NAMESPACE`], dimension
/// `Integration = integration`, explicit zeros, a `ColdStart` metric and the request id as a
/// property. The documents are flushed to stdout after every invocation, where Lambda's log
/// pipeline turns them into CloudWatch metrics without an API call.
///
/// # Errors
/// If a recorder is already installed.
pub fn init_metrics(
    integration: &str,
) -> Result<&'static metrics_cloudwatch_embedded::Collector, Error> {
    metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(signals::NAMESPACE)
        .with_dimension(signals::DIMENSION, integration.to_string())
        .emit_zeros(true)
        .lambda_cold_start_metric("ColdStart")
        .with_lambda_request_id("RequestId")
        .init()
        .map_err(|e| Error::from(format!("cannot install the EMF recorder: {e}")))
}

/// Emits the counters of one reconciler sweep ([`signals::Counts::of_reconcile`]) and writes
/// them out at once to `out` (stdout in Lambda) as EMF documents, instead of at the end of the
/// invocation: a scheduled run sweeps every 15 s of its minute, and a run killed at its function
/// timeout would otherwise lose the counts of every sweep before. The alarms and the dashboard
/// read these counters with the `Sum` statistic (and `DistinctEffectIds` with `Maximum`), so
/// several documents a run add up to the same figures; the invocation's own flush after the run
/// writes the counters left (zeros, with `emit_zeros`). A failed write is logged, not retried.
pub fn emit_sweep(
    report: &ReconcileReport,
    collector: &metrics_cloudwatch_embedded::Collector,
    out: impl std::io::Write,
) {
    signals::Counts::of_reconcile(report).emit();
    if let Err(e) = collector.flush(out) {
        tracing::warn!(error = %e, "the sweep's EMF document was not written; the run's flush writes its counts");
    }
}
