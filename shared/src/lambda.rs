//! The Lambda wiring (feature `aws`): configuration to clients, the `lambda_runtime` handlers,
//! JSON logs. `functions/consumer/src/main.rs` only calls [`run_consumer`],
//! `functions/reconciler/src/main.rs` only [`run_reconciler`].

use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, Error, LambdaEvent};

use crate::clock::SystemClock;
use crate::config::FunctionConfig;
use crate::dynamo::DynamoStore;
use crate::gate::{Gate, Invocation};
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
    use crate::clock::Clock;
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
    Ok(gate.reconcile(config, &invocation).await)
}

/// Builds the gate from `config` with the AWS clients (DynamoDB, SQS) and the terminal client,
/// once per cold start. `AWS_ENDPOINT_URL` is honoured by the SDK (local runs against moto).
///
/// # Errors
/// If the terminal client cannot be built.
pub async fn build_consumer(config: FunctionConfig) -> Result<Gate, Error> {
    // Throttling and transient service errors are retried by the SDK (standard mode, adaptive
    // back-off), not by hand; operation timeouts keep a call well inside the lease.
    let aws = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(4))
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
    let terminal = HttpTerminal::new(config.terminal.clone())?;
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

/// The reconciler's whole life: as [`run_consumer`], with the scheduled handler.
///
/// # Errors
/// A configuration error at cold start, or the runtime's own errors.
pub async fn run_reconciler() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = FunctionConfig::from_env(|k| std::env::var(k).ok()).inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration; not starting");
    })?;
    let reconciler = config.reconciler.clone();
    let gate = build_consumer(config).await?;
    let (gate, reconciler) = (&gate, &reconciler);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<ScheduledInput>| async move {
            handle_reconcile(gate, reconciler, event).await
        },
    ))
    .await
}

/// The consumer's whole life: JSON logs (Lambda's `AWS_LAMBDA_LOG_FORMAT`), configuration from
/// the environment (stops start-up naming a bad variable), clients built once, then the runtime
/// loop.
///
/// # Errors
/// A configuration error at cold start, or the runtime's own errors.
pub async fn run_consumer() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = FunctionConfig::from_env(|k| std::env::var(k).ok()).inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration; not starting");
    })?;
    tracing::info!(
        integration = %config.gate.integration,
        terminal_supports_idempotency_key = config.gate.terminal_supports_idempotency_key,
        "consumer starting"
    );
    let gate = build_consumer(config).await?;
    let gate = &gate;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        handle_sqs(gate, event).await
    }))
    .await
}
