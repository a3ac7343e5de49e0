//! The Lambda wiring (feature `aws`): configuration to clients, the `lambda_runtime` handlers,
//! JSON logs. `functions/consumer/src/main.rs` only calls [`run_consumer`],
//! `functions/reconciler/src/main.rs` only [`run_reconciler`], `functions/metrics-publisher/src/main.rs`
//! only [`run_metrics`].
//!
//! A function that cannot start (configuration missing or invalid, the token's secret
//! unreadable) reports it to the Runtime API's init-error endpoint ([`report_init_error`]) and
//! exits: Lambda fails the waiting invocation at once with the message, instead of the invocation
//! waiting for a runtime that never asks for its event.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, Error, LambdaEvent};

use crate::config::{ConfigErrors, FunctionConfig};
use crate::terminal::several::{TerminalRouter, TerminalSpec};
use crate::terminal::{HttpTerminal, HttpTerminalConfig, SlotTerminal};
use crate::TruckSlot;
use gate::clock::{Clock, SystemClock};
use gate::consumer::{Gate, Invocation};
use gate::manual::sqs::SqsManualQueue;
use gate::signals::{self, Counts, StoreSignals};
use gate::store::dynamo::{DynamoIndex, DynamoStore};

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
    index: &dyn gate::store::InFlightIndex,
    config: &gate::reconciler::ReconcilerConfig,
    event: LambdaEvent<ScheduledInput>,
) -> Result<gate::reconciler::ReconcileReport, Error> {
    let invocation = invocation(&event.context);
    let report = gate.reconcile(index, config, &invocation).await;
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
/// Returns the gate and the read side of its idempotency table (`InFlight`, `MultiSlot`: what the
/// reconciler pages; the consumer ignores it).
///
/// # Errors
/// If the terminal client cannot be built, or the token cannot be read from Secrets Manager.
pub async fn build_consumer(config: FunctionConfig) -> Result<(Gate, DynamoIndex), Error> {
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
    let secrets = aws_sdk_secretsmanager::Client::new(&aws);
    let terminal: Arc<dyn SlotTerminal> = if config.terminals.is_empty() {
        let mut terminal_config = config.terminal;
        if let Some(arn) = &config.token_secret_arn {
            // Read once per cold start and kept for the environment's life (`crate::secrets`).
            terminal_config.token = Some(crate::secrets::fetch_api_token(&secrets, arn).await?);
            tracing::info!(secret = %arn, "terminal API token read from Secrets Manager");
        }
        Arc::new(HttpTerminal::new(terminal_config)?)
    } else {
        Arc::new(terminal_router(&config.terminals, &config.terminal, &secrets).await?)
    };
    let store = DynamoStore::new(
        dynamodb,
        config.idempotency_table.clone(),
        config.bookings_table.clone(),
    );
    let index = store.index().clone();
    let gate = Gate {
        store: Arc::new(store),
        integration: Arc::new(
            TruckSlot::new(terminal, config.known_terminals.clone())
                .with_policies(config.policies.clone()),
        ),
        manual: Arc::new(SqsManualQueue::new(sqs, config.manual_queue_url.clone())),
        clock: Arc::new(SystemClock),
        config: config.gate,
    };
    Ok((gate, index))
}

/// The [`TerminalRouter`] of a stack with several terminals (`TERMINALS`,
/// [`crate::terminal::several::http_router`]): each terminal with key support gets its client, its token
/// read from its own secret once, at cold start. A terminal without key support gets no client
/// (the gate never calls it) and its secret, if named, is not read.
///
/// # Errors
/// A secret that cannot be read (the error names the terminal and the secret's ARN, never the
/// value), or a client that cannot be built.
pub async fn terminal_router(
    specs: &[TerminalSpec],
    shared: &HttpTerminalConfig,
    secrets: &aws_sdk_secretsmanager::Client,
) -> Result<TerminalRouter, Error> {
    let mut tokens = std::collections::BTreeMap::new();
    for spec in specs.iter().filter(|s| s.supports_idempotency_key) {
        if let Some(arn) = &spec.token_secret_arn {
            let token = crate::secrets::fetch_api_token(secrets, arn)
                .await
                .map_err(|e| Error::from(format!("terminal {:?}: {e}", spec.code)))?;
            tracing::info!(terminal = %spec.code, secret = %arn, "terminal API token read from Secrets Manager");
            tokens.insert(spec.code.clone(), token);
        }
    }
    Ok(crate::terminal::several::http_router(
        specs, shared, tokens,
    )?)
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

/// The error type (`Lambda-Runtime-Function-Error-Type` and `errorType`) of a start refused for
/// its configuration: every missing or invalid variable, named ([`ConfigErrors`]).
pub const INVALID_CONFIGURATION: &str = "Runtime.InvalidConfiguration";

/// The error type of any other failed start: the token's secret unreadable, a client or the
/// EMF recorder that cannot be built.
pub const INIT_ERROR: &str = "Runtime.InitError";

/// The Runtime API path a runtime posts its initialization error to.
const INIT_ERROR_PATH: &str = "/2018-06-01/runtime/init/error";

/// How long reporting an init error may take before the function exits anyway.
const INIT_ERROR_REPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reports a failed start to the Lambda Runtime API, as a custom runtime must (AWS Lambda
/// Developer Guide, "Using the Lambda runtime API for custom runtimes", *Initialization error*):
/// `POST /2018-06-01/runtime/init/error` with the header `Lambda-Runtime-Function-Error-Type:
/// {error_type}` and the body `{"errorType": error_type, "errorMessage": message}`. Lambda (and
/// `cargo lambda watch`) then answers the waiting invocation with that error at once; the caller
/// exits afterwards and the next invocation starts a fresh environment.
///
/// Sent with `lambda_runtime_api_client`, the client `lambda_runtime` itself uses (base URL from
/// `AWS_LAMBDA_RUNTIME_API`, its path prefix and user agent honoured): `lambda_runtime` 1.5
/// reports init errors only for its SnapStart hooks and has no public call for them. Without
/// `AWS_LAMBDA_RUNTIME_API` (the binary run outside a Lambda runtime) nothing is sent. The
/// message is also logged; it must hold no secret (configuration errors describe a token, never
/// quote it; a Secrets Manager failure names the ARN). A failed report is logged, never retried.
pub async fn report_init_error(error_type: &str, message: &str) {
    tracing::error!(error_type, error = %message, "cannot start; reporting the init error");
    let Some(api) = std::env::var("AWS_LAMBDA_RUNTIME_API")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        tracing::warn!(
            "AWS_LAMBDA_RUNTIME_API is not set: not under a Lambda runtime, not reported"
        );
        return;
    };
    let endpoint = if api.contains("://") {
        api
    } else {
        format!("http://{api}")
    };
    if let Err(e) = post_init_error(&endpoint, error_type, message).await {
        tracing::error!(error = %e, "the init error could not be reported to the Runtime API");
    }
}

/// `POST {endpoint}/2018-06-01/runtime/init/error`; `Ok` on a 2xx answer (Lambda: `202`).
async fn post_init_error(endpoint: &str, error_type: &str, message: &str) -> Result<(), Error> {
    use lambda_runtime_api_client::{body::Body, build_request, PooledClient};
    let base: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("AWS_LAMBDA_RUNTIME_API {endpoint:?} is not a URI: {e}"))?;
    if base.authority().is_none() {
        return Err(format!("AWS_LAMBDA_RUNTIME_API {endpoint:?} names no host").into());
    }
    let diagnostic = lambda_runtime::Diagnostic {
        error_type: error_type.to_string(),
        error_message: message.to_string(),
    };
    let request = build_request()
        .method("POST")
        .uri(INIT_ERROR_PATH)
        .header("Lambda-Runtime-Function-Error-Type", error_type)
        .header("Content-Type", "application/json")
        .body(Body::from(serde_json::to_vec(&diagnostic)?))?;
    let client = PooledClient::builder().with_endpoint(base).build();
    let answer = tokio::time::timeout(INIT_ERROR_REPORT_TIMEOUT, client.call(request))
        .await
        .map_err(|_| "no answer within 5 s")??;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(format!("the Runtime API answered {}", answer.status()).into())
    }
}

/// Why a function could not start: its configuration ([`INVALID_CONFIGURATION`]) or anything
/// else ([`INIT_ERROR`]).
#[derive(Debug, thiserror::Error)]
enum InitFailure {
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Other(#[from] Error),
}

/// Runs a function's start-up; on failure reports it ([`report_init_error`]) and returns the
/// error, which ends the process.
async fn start<T>(
    init: impl std::future::Future<Output = Result<T, InitFailure>>,
) -> Result<T, Error> {
    match init.await {
        Ok(started) => Ok(started),
        Err(failure) => {
            let error_type = match failure {
                InitFailure::Config(_) => INVALID_CONFIGURATION,
                InitFailure::Other(_) => INIT_ERROR,
            };
            report_init_error(error_type, &failure.to_string()).await;
            Err(Error::from(failure))
        }
    }
}

/// The metrics function's whole life: configuration ([`crate::config::MetricsConfig`]), clients
/// built once, then one [`handle_metrics`] per scheduled invocation (input: the schedule's
/// `{"job": "metrics"}`).
///
/// # Errors
/// A failed start (reported first, [`report_init_error`]), or the runtime's own errors.
pub async fn run_metrics() -> Result<(), Error> {
    gate::logging::init();
    let (store, cloudwatch, integration) = start(async {
        let config = crate::config::MetricsConfig::from_env(|k| std::env::var(k).ok())?;
        let aws = aws_loader().load().await;
        // The metrics function reads only the idempotency table's indexes (`InFlightIndex`).
        let store = DynamoIndex::new(
            aws_sdk_dynamodb::Client::new(&aws),
            config.idempotency_table.clone(),
        );
        Ok((
            store,
            aws_sdk_cloudwatch::Client::new(&aws),
            config.integration,
        ))
    })
    .await?;
    let (store, cloudwatch, integration) = (&store, &cloudwatch, integration.as_str());
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
/// A failed start (reported first, [`report_init_error`]), or the runtime's own errors.
pub async fn run_reconciler() -> Result<(), Error> {
    gate::logging::init();
    let (metrics, gate, index, reconciler) = start(async {
        let config = FunctionConfig::from_env(|k| std::env::var(k).ok())?.for_reconciler();
        tracing::info!(
            integration = %config.gate.integration,
            deadline_margin_ms = config.gate.deadline_margin_ms,
            "reconciler starting"
        );
        let reconciler = config.reconciler.clone();
        let metrics = init_metrics(&config.gate.integration)?;
        let (gate, index) = build_consumer(config).await?;
        Ok((metrics, gate, index, reconciler))
    })
    .await?;
    let (gate, index, reconciler) = (&gate, &index, &reconciler);
    metrics_cloudwatch_embedded::lambda::service::run(
        metrics,
        service_fn(move |event: LambdaEvent<ScheduledInput>| async move {
            handle_reconcile(gate, index, reconciler, event).await
        }),
    )
    .await
}

/// The consumer's whole life: JSON logs (Lambda's `AWS_LAMBDA_LOG_FORMAT`), configuration from
/// the environment (a failed start is reported naming every bad variable), clients built once,
/// then the runtime loop.
///
/// # Errors
/// A failed start (reported first, [`report_init_error`]), or the runtime's own errors.
pub async fn run_consumer() -> Result<(), Error> {
    gate::logging::init();
    let (metrics, gate) = start(async {
        let config = FunctionConfig::from_env(|k| std::env::var(k).ok())?;
        tracing::info!(
            integration = %config.gate.integration,
            terminal_supports_idempotency_key = config.gate.terminal_supports_idempotency_key,
            terminals = ?config.known_terminals,
            deadline_margin_ms = config.gate.deadline_margin_ms,
            "consumer starting"
        );
        let metrics = init_metrics(&config.gate.integration)?;
        Ok((metrics, build_consumer(config).await?.0))
    })
    .await?;
    let gate = &gate;
    metrics_cloudwatch_embedded::lambda::service::run(
        metrics,
        service_fn(
            move |event: LambdaEvent<SqsEvent>| async move { handle_sqs(gate, event).await },
        ),
    )
    .await
}

#[cfg(test)]
mod init_error_tests {
    use super::*;
    use std::sync::Mutex;

    /// What the fake Runtime API received: path, error-type header, body.
    type Seen = Arc<Mutex<Vec<(String, Option<String>, serde_json::Value)>>>;

    /// A Runtime API stand-in on loopback that records every request and answers `202`.
    async fn runtime_api() -> (String, Seen) {
        let seen: Seen = Arc::default();
        let record = seen.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let record = record.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .unwrap_or_default();
                record.lock().unwrap().push((
                    parts.uri.path().to_string(),
                    parts
                        .headers
                        .get("lambda-runtime-function-error-type")
                        .and_then(|v| v.to_str().ok())
                        .map(String::from),
                    serde_json::from_slice(&bytes).unwrap_or_default(),
                ));
                axum::http::StatusCode::ACCEPTED
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr.to_string(), seen)
    }

    /// The request Lambda expects: `POST /2018-06-01/runtime/init/error`, the error type in
    /// `Lambda-Runtime-Function-Error-Type` and the body `{"errorType", "errorMessage"}`; under
    /// a base path (as `cargo lambda watch` gives each function), below it.
    #[tokio::test]
    async fn an_init_error_is_posted_as_the_runtime_api_expects() {
        let (addr, seen) = runtime_api().await;
        post_init_error(
            &format!("http://{addr}"),
            INVALID_CONFIGURATION,
            "bad: X missing",
        )
        .await
        .unwrap();
        post_init_error(
            &format!("http://{addr}/.rt/consumer"),
            INIT_ERROR,
            "no secret",
        )
        .await
        .unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                (
                    "/2018-06-01/runtime/init/error".to_string(),
                    Some("Runtime.InvalidConfiguration".to_string()),
                    serde_json::json!({
                        "errorType": "Runtime.InvalidConfiguration",
                        "errorMessage": "bad: X missing"
                    })
                ),
                (
                    "/.rt/consumer/2018-06-01/runtime/init/error".to_string(),
                    Some("Runtime.InitError".to_string()),
                    serde_json::json!({"errorType": "Runtime.InitError", "errorMessage": "no secret"})
                ),
            ]
        );
    }

    /// A Runtime API that refuses the report, or a malformed address, is an error (logged by
    /// the caller), never a panic.
    #[tokio::test]
    async fn a_refused_or_impossible_report_is_an_error() {
        let app = axum::Router::new().fallback(|| async { axum::http::StatusCode::FORBIDDEN });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let err = post_init_error(&format!("http://{addr}"), INIT_ERROR, "x")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("403"), "{err}");
        assert!(post_init_error("http:///no-host", INIT_ERROR, "x")
            .await
            .is_err());
        assert!(post_init_error("http://exa mple", INIT_ERROR, "x")
            .await
            .is_err());
    }
}
