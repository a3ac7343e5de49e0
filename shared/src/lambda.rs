//! The Lambda wiring (feature `aws`): configuration to clients, the `lambda_runtime` handlers,
//! JSON logs. `functions/consumer/src/main.rs` only calls [`run_consumer`],
//! `functions/reconciler/src/main.rs` only [`run_reconciler`].

use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, Error, LambdaEvent};

use crate::clock::{Clock, SystemClock};
use crate::config::FunctionConfig;
use crate::dynamo::DynamoStore;
use crate::gate::{Gate, Invocation};
use crate::signals::{self, Counts, StoreSignals};
use crate::sqs_manual::SqsManualQueue;
use crate::terminal::HttpTerminal;

/// Deadlines below this (epoch ms of 2001-09-09) are durations, not instants.
const EPOCH_MS_FLOOR: i64 = 1_000_000_000_000;

/// The invocation's deadline in epoch ms from the runtime API's `Lambda-Runtime-Deadline-Ms`
/// (`deadline`), read at `now_ms`. Lambda sends an epoch-ms instant; `cargo lambda watch` (1.9)
/// sends the timeout as a duration (e.g. `600000`), which is taken as `now + deadline`.
pub fn deadline_ms(deadline: u64, now_ms: i64) -> i64 {
    let deadline = i64::try_from(deadline).unwrap_or(i64::MAX);
    if deadline < EPOCH_MS_FLOOR {
        now_ms.saturating_add(deadline)
    } else {
        deadline
    }
}

/// The invocation of a Lambda context: the request id (lease owner) and the deadline (epoch ms).
pub fn invocation(context: &lambda_runtime::Context) -> Invocation {
    Invocation {
        request_id: context.request_id.clone(),
        deadline_ms: deadline_ms(context.deadline, SystemClock.now_ms()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_an_instant_or_a_duration() {
        let now = 1_780_293_600_000;
        assert_eq!(deadline_ms(1_780_293_630_000, now), 1_780_293_630_000);
        assert_eq!(deadline_ms(600_000, now), now + 600_000);
    }
}

/// Handles one SQS event: the partial batch response (`batchItemFailures`). Never returns an
/// error for a record's failure; an error here would make SQS retry the whole batch.
///
/// # Errors
/// None in practice; the signature is `lambda_runtime`'s.
pub async fn handle_sqs(
    gate: &Gate,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, Error> {
    let invocation = invocation(&event.context);
    let report = gate.handle_batch(event.payload, &invocation).await;
    Counts::of_batch(&report).emit();
    Ok(report.response)
}

/// The reconciler's scheduled input: the EventBridge Scheduler (`ScheduleV2`) target delivers
/// only its `Input`, which the template sets to `{"job": "reconcile"}`. Any other fields are
/// ignored; a missing `job` is accepted (manual invocations).
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
pub struct ScheduledInput {
    /// The job name, `reconcile`.
    #[serde(default)]
    pub job: Option<String>,
}

/// Runs one reconciler pass for a scheduled invocation and returns its report.
///
/// # Errors
/// None in practice; failures are counted in the report and retried by the next run.
pub async fn handle_reconcile(
    gate: &Gate,
    config: &crate::reconciler::ReconcilerConfig,
    event: LambdaEvent<ScheduledInput>,
) -> Result<crate::reconciler::ReconcileReport, Error> {
    let invocation = invocation(&event.context);
    let report = gate.reconcile(config, &invocation).await;
    Counts::of_reconcile(&report).emit();
    Ok(report)
}

/// The SDK configuration every function starts from: the latest behaviour version, and
/// throttling and transient service errors retried by the SDK (standard mode, at most 4
/// attempts), not by hand.
fn aws_loader() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(4))
}

/// Builds the gate from `config` with the AWS clients (DynamoDB, SQS) and the terminal client
/// (its token read from Secrets Manager when `config.token_secret_arn` is set),
/// once per cold start. `AWS_ENDPOINT_URL` is honoured by the SDK (local runs against moto).
///
/// # Errors
/// If the terminal client cannot be built, or the token cannot be read from Secrets Manager.
pub async fn build_consumer(config: FunctionConfig) -> Result<Gate, Error> {
    // Operation timeouts keep a call well inside the lease.
    let aws = aws_loader()
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(std::time::Duration::from_secs(2))
                .operation_attempt_timeout(std::time::Duration::from_secs(3))
                .operation_timeout(std::time::Duration::from_secs(10))
                .build(),
        )
        .load()
        .await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let mut terminal_config = config.terminal;
    if let Some(arn) = &config.token_secret_arn {
        // Read once per cold start and kept for the environment's life (`crate::secrets`).
        let secrets = aws_sdk_secretsmanager::Client::new(&aws);
        terminal_config.token = Some(crate::secrets::fetch_api_token(&secrets, arn).await?);
        tracing::info!(secret = %arn, "terminal API token read from Secrets Manager");
    }
    let terminal = HttpTerminal::new(terminal_config)?;
    Ok(Gate {
        store: Arc::new(DynamoStore::new(
            dynamodb,
            config.idempotency_table.clone(),
            config.bookings_table.clone(),
        )),
        terminal: Arc::new(terminal),
        manual: Arc::new(SqsManualQueue::new(sqs, config.manual_queue_url.clone())),
        clock: Arc::new(SystemClock),
        config: config.gate,
    })
}

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
            signals::metric::MULTI_SLOT_KEYS,
            store_signals.multi_slot_keys as f64,
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
    store: &dyn crate::store::IdempotencyStore,
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

/// The metrics function's whole life: configuration ([`crate::config::MetricsConfig`]), clients
/// built once, then one [`handle_metrics`] per scheduled invocation (input: the schedule's
/// `{"job": "metrics"}`).
///
/// # Errors
/// A configuration error at cold start, or the runtime's own errors.
pub async fn run_metrics() -> Result<(), Error> {
    crate::logging::init();
    let config = crate::config::MetricsConfig::from_env(|k| std::env::var(k).ok())
        .inspect_err(|e| tracing::error!(error = %e, "invalid configuration; not starting"))?;
    let aws = aws_loader().load().await;
    // The metrics function reads only the idempotency table's indexes; no bookings table.
    let store = DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        config.idempotency_table.clone(),
        String::new(),
    );
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&aws);
    let (store, cloudwatch, integration) = (&store, &cloudwatch, config.integration.as_str());
    lambda_runtime::run(service_fn(
        move |_event: LambdaEvent<ScheduledInput>| async move {
            handle_metrics(store, cloudwatch, integration, &SystemClock).await
        },
    ))
    .await
}

/// The reconciler's whole life: as [`run_consumer`], with the scheduled handler.
///
/// # Errors
/// A configuration error at cold start, or the runtime's own errors.
pub async fn run_reconciler() -> Result<(), Error> {
    crate::logging::init();
    let config = FunctionConfig::from_env(|k| std::env::var(k).ok())
        .inspect_err(|e| {
            tracing::error!(error = %e, "invalid configuration; not starting");
        })?
        .for_reconciler();
    tracing::info!(
        integration = %config.gate.integration,
        deadline_margin_ms = config.gate.deadline_margin_ms,
        "reconciler starting"
    );
    let reconciler = config.reconciler.clone();
    let metrics = init_metrics(&config.gate.integration)?;
    let gate = build_consumer(config).await?;
    let (gate, reconciler) = (&gate, &reconciler);
    metrics_cloudwatch_embedded::lambda::service::run(
        metrics,
        service_fn(move |event: LambdaEvent<ScheduledInput>| async move {
            handle_reconcile(gate, reconciler, event).await
        }),
    )
    .await
}

/// The consumer's whole life: JSON logs (Lambda's `AWS_LAMBDA_LOG_FORMAT`), configuration from
/// the environment (stops start-up naming a bad variable), clients built once, then the runtime
/// loop.
///
/// # Errors
/// A configuration error at cold start, or the runtime's own errors.
pub async fn run_consumer() -> Result<(), Error> {
    crate::logging::init();
    let config = FunctionConfig::from_env(|k| std::env::var(k).ok()).inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration; not starting");
    })?;
    tracing::info!(
        integration = %config.gate.integration,
        terminal_supports_idempotency_key = config.gate.terminal_supports_idempotency_key,
        deadline_margin_ms = config.gate.deadline_margin_ms,
        "consumer starting"
    );
    let metrics = init_metrics(&config.gate.integration)?;
    let gate = build_consumer(config).await?;
    let gate = &gate;
    metrics_cloudwatch_embedded::lambda::service::run(
        metrics,
        service_fn(
            move |event: LambdaEvent<SqsEvent>| async move { handle_sqs(gate, event).await },
        ),
    )
    .await
}
