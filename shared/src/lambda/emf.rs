//! The EMF recorder every function installs ([`init_metrics`]): the counters of `crate::signals`
//! written as CloudWatch embedded metric format documents to stdout after every invocation.

use lambda_runtime::Error;

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
