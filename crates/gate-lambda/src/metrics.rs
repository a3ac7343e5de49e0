//! The scheduled metrics function ([`run_metrics`]): reads the store signals from the idempotency
//! table's indexes and publishes them with one `PutMetricData` call a minute. Fully generic: it
//! reads no integration's data, only the `Integration` dimension's name.

use std::sync::Arc;

use lambda_runtime::{service_fn, Error, LambdaEvent};

use gate::clock::{Clock, SystemClock};
use gate::signals::{self, StoreSignals};

#[cfg(doc)]
use super::config::IntegrationConfig;
use super::config::MetricsConfig;
use super::init_error::start;
use super::runner::{aws_loader, ScheduledInput};
use super::store::build_metrics_index;

/// Publishes the store signals with one `PutMetricData` call: namespace
/// [`signals::NAMESPACE`], dimension `Integration = integration`, timestamp `now_ms` (epoch ms).
/// Units: seconds for the oldest age, counts for the others.
///
/// # Errors
/// The SDK's error, as text.
async fn publish_store_signals(
    client: &aws_sdk_cloudwatch::Client,
    integration: &str,
    store_signals: &StoreSignals,
    now_ms: i64,
) -> Result<(), Error> {
    use aws_sdk_cloudwatch::primitives::DateTime;
    use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
    let dimension = Dimension::builder()
        .name(signals::DIMENSION)
        .value(integration)
        .build();
    let datum = |name: &str, value: f64, unit: StandardUnit| {
        MetricDatum::builder()
            .metric_name(name)
            .dimensions(dimension.clone())
            .timestamp(DateTime::from_millis(now_ms))
            .value(value)
            .unit(unit)
            .build()
    };
    client
        .put_metric_data()
        .namespace(signals::NAMESPACE)
        .metric_data(datum(
            signals::metric::OLDEST_IN_FLIGHT_AGE,
            store_signals.oldest_in_flight_age_s as f64,
            StandardUnit::Seconds,
        ))
        .metric_data(datum(
            signals::metric::IN_FLIGHT_OLDER_THAN_10M,
            store_signals.in_flight_older_than_10m as f64,
            StandardUnit::Count,
        ))
        .metric_data(datum(
            signals::metric::MULTI_EFFECT_KEYS,
            store_signals.multi_effect_keys as f64,
            StandardUnit::Count,
        ))
        .send()
        .await
        .map_err(|e| {
            Error::from(format!(
                "PutMetricData failed: {}",
                aws_sdk_cloudwatch::error::DisplayErrorContext(&e)
            ))
        })?;
    Ok(())
}

/// One run of the metrics function: reads the store signals and publishes them.
///
/// # Errors
/// A store or CloudWatch error; the next minute's run tries again.
pub async fn handle_metrics(
    store: &dyn gate::store::InFlightIndex,
    cloudwatch: &aws_sdk_cloudwatch::Client,
    integration: &str,
    clock: &dyn Clock,
) -> Result<StoreSignals, Error> {
    let now = clock.now_ms();
    let store_signals = signals::collect_store_signals(store, now)
        .await
        .map_err(|e| Error::from(e.to_string()))?;
    publish_store_signals(cloudwatch, integration, &store_signals, now).await?;
    tracing::info!(?store_signals, "store signals published");
    Ok(store_signals)
}

/// The metrics function's whole life: JSON logs, configuration ([`MetricsConfig`];
/// `INTEGRATION_NAME` defaults to `default_name`, as the stack's consumer's
/// [`IntegrationConfig::DEFAULT_NAME`]; `None`: required), clients built once,
/// then one [`handle_metrics`] per scheduled invocation (input: the schedule's
/// `{"job": "metrics"}`).
///
/// # Errors
/// A failed start (reported first, [`super::report_init_error`]), or the runtime's own errors.
pub async fn run_metrics(default_name: Option<&str>) -> Result<(), Error> {
    crate::logging::init();
    let (index, cloudwatch, integration) = start(async {
        let config = MetricsConfig::from_env(|k| std::env::var(k).ok(), default_name)?;
        let aws = aws_loader().load().await;
        // The metrics function reads only the idempotency table's indexes (`InFlightIndex`):
        // DynamoDB's GSIs, or PostgreSQL's partial indexes with `STORE=postgres`.
        let index = build_metrics_index(&config, &aws).await?;
        Ok((
            index,
            aws_sdk_cloudwatch::Client::new(&aws),
            config.integration,
        ))
    })
    .await?;
    let integration: Arc<str> = integration.into();
    // `run_concurrent`: one run at a time unless `AWS_LAMBDA_MAX_CONCURRENCY` says otherwise
    // (`super::concurrency`); a run reads and publishes only its own figures.
    lambda_runtime::run_concurrent(service_fn(move |_event: LambdaEvent<ScheduledInput>| {
        let (index, cloudwatch, integration) =
            (index.clone(), cloudwatch.clone(), integration.clone());
        async move { handle_metrics(index.as_ref(), &cloudwatch, &integration, &SystemClock).await }
    }))
    .await
}
