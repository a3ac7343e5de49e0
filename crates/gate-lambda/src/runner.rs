//! The consumer's and the reconciler's whole life for any [`Integration`]: JSON logs
//! (`crate::logging`), the configuration read once ([`Config::from_env`]; a failed start is
//! reported, [`super::init_error`]), the SDK clients, the store and the integration built once
//! per cold start ([`build_gate`]), the EMF writer ([`Emf`]), then the runtime loop with the SQS
//! handler ([`handle_sqs`]) or the scheduled reconciler ([`handle_reconcile`]).
//!
//! The loop is `lambda_runtime::run_concurrent`: one invocation at a time in a classic Lambda
//! environment, up to `AWS_LAMBDA_MAX_CONCURRENCY` at once in a Lambda Managed Instances one
//! ([`super::concurrency`]). Everything an invocation uses is its own (its deadline, request id
//! and lease tokens from its context, [`invocation`]; its store budget, a task-local; its EMF
//! document; its log span, `lambda_runtime`'s per-invocation span with the request id); what the
//! invocations share (the gate, its store and clients) holds no per-invocation state.

use std::future::Future;
use std::io::stdout;
use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::SqsBatchResponse;
use lambda_runtime::{service_fn, Error, LambdaEvent};

use gate::clock::{Clock, SystemClock};
use gate::consumer::SqsInput;
use gate::integration::Integration;
use gate::reconciler::{ReconcileReport, ReconcilerConfig};
use gate::signals::Counts;
use gate::store::budget::{self, Bounded};
use gate::store::{InFlightIndex, Purge};
use gate::{Gate, Invocation};
use gate_dynamo::sqs::{SqsManualQueue, SqsVisibility};

use super::concurrency::invocations_at_once;
use super::config::{Config, IntegrationConfig};
use super::emf::{emit_sweep, Emf};
use super::init_error::start;
use super::store::build_store;

/// Deadlines below this (epoch ms of 2001-09-09) are durations, not instants.
const EPOCH_MS_FLOOR: i64 = 1_000_000_000_000;

/// The longest invocation Lambda runs, **milliseconds**: a function's timeout is at most 900 s
/// (AWS Lambda Developer Guide, "Lambda quotas": function timeout).
pub const MAX_INVOCATION_MS: i64 = 900_000;

/// The invocation's deadline in epoch ms from the runtime API's `Lambda-Runtime-Deadline-Ms`
/// (`deadline`), read at `now_ms`. Lambda sends an epoch-ms instant; `cargo lambda watch` (1.9)
/// sends the timeout as a duration (e.g. `600000`), which is taken as `now + deadline`. A
/// deadline further than [`MAX_INVOCATION_MS`] ahead is a local emulator's error (SAM's has sent
/// one decades ahead, aws-sam-cli #2519) and is cut to `now + MAX_INVOCATION_MS`, so that a
/// reconciler run and a store budget still end.
pub fn deadline_ms(deadline: u64, now_ms: i64) -> i64 {
    let deadline = i64::try_from(deadline).unwrap_or(i64::MAX);
    let deadline = if deadline < EPOCH_MS_FLOOR {
        now_ms.saturating_add(deadline)
    } else {
        deadline
    };
    deadline.min(now_ms.saturating_add(MAX_INVOCATION_MS))
}

/// The invocation of a Lambda context: this execution of the request id, with its own nonce
/// (the stem of its lease tokens, [`Invocation::new`]: two executions of one request id never
/// share a lease), and the deadline (epoch ms).
pub fn invocation(context: &lambda_runtime::Context) -> Invocation {
    Invocation::new(
        &context.request_id,
        deadline_ms(context.deadline, SystemClock.now_ms()),
    )
}

/// What an invocation keeps after its store calls, **milliseconds**: the time to build the answer
/// and send it to the Runtime API (`POST /runtime/invocation/{id}/response`) before the deadline.
pub const ANSWER_MARGIN_MS: i64 = 1_000;

/// The store budget of `invocation` ([`budget`]): its deadline less [`ANSWER_MARGIN_MS`].
pub fn store_budget(invocation: &Invocation) -> budget::Budget {
    budget::Budget::until_epoch_ms(
        invocation.deadline_ms.saturating_sub(ANSWER_MARGIN_MS),
        SystemClock.now_ms(),
    )
}

/// Handles one SQS event, read leniently ([`SqsInput`]: a record the typed deserialiser refuses
/// is routed to a person, never logged): the partial batch response (`batchItemFailures`). Never
/// returns an error for a record's failure; an error here would make SQS retry the whole batch.
/// The invocation's counters are written as one EMF document with its request id by `emf`
/// ([`Emf::write_counts`], to stdout), the environment's cold start once.
///
/// # Errors
/// Only an event that is not an SQS event at all, or holds a record without a readable
/// `messageId` ([`SqsInput::whole_event_error`]): the message names its shape, never a value.
pub async fn handle_sqs(
    gate: &Gate,
    emf: &Emf,
    event: LambdaEvent<SqsInput>,
) -> Result<SqsBatchResponse, Error> {
    let request_id = event.context.request_id.clone();
    emf.write_cold_start(&request_id, stdout());
    if let Some(why) = &event.payload.whole_event_error {
        tracing::error!(error = %why, "the event cannot be handled: the whole batch is retried");
        return Err(Error::from(why.clone()));
    }
    let invocation = invocation(&event.context);
    let report = budget::scope(store_budget(&invocation), async {
        gate.handle_input(event.payload, &invocation).await
    })
    .await;
    emf.write_counts(&request_id, &Counts::of_batch(&report), stdout());
    Ok(report.response)
}

/// A scheduled function's input: the EventBridge Scheduler (`ScheduleV2`) target delivers only
/// its `Input`, which the template sets to `{"job": "reconcile"}` (`{"job": "metrics"}`). Read
/// leniently: any JSON is accepted (so `lambda_runtime` never fails the invocation with the
/// input quoted in its error line), `job` is taken when it is a string, and anything else is
/// ignored (a manual invocation may send `{}`). [`ScheduledInput::unexpected`] names the shape of
/// an input that is not an object, for the log line.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ScheduledInput {
    /// The job name, `reconcile` or `metrics`.
    pub job: Option<String>,
    /// Set when the input was not a JSON object, or its `job` not a string: what it was (a JSON
    /// type's name, never the value).
    #[serde(skip)]
    pub unexpected: Option<&'static str>,
}

impl<'de> serde::Deserialize<'de> for ScheduledInput {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        use serde_json::Value;
        let kind = gate::consumer::type_name;
        let value = Value::deserialize(de)?;
        Ok(match &value {
            Value::Object(map) => match map.get("job") {
                None | Some(Value::Null) => Self::default(),
                Some(Value::String(job)) => Self {
                    job: Some(job.clone()),
                    unexpected: None,
                },
                Some(other) => Self {
                    job: None,
                    unexpected: Some(kind(other)),
                },
            },
            other => Self {
                job: None,
                unexpected: Some(kind(other)),
            },
        })
    }
}

/// Runs one scheduled reconciler run (a sweep every `config.sweep_interval_ms` within the
/// one-minute schedule, [`Gate::reconcile_run`]) and returns its sweeps' report; then, on a
/// store without TTL (PostgreSQL), the purge of expired rows ([`gate::purge`]). Each sweep's
/// counters are written as soon as it ends, one EMF document with the invocation's request id
/// ([`super::emf::emit_sweep`], to stdout), so a run killed at its timeout keeps the counts of
/// its finished sweeps.
///
/// # Errors
/// None in practice; failures are counted in the report and retried by the next run.
pub async fn handle_reconcile(
    gate: &Gate,
    (index, purge): (&dyn InFlightIndex, &dyn Purge),
    config: &ReconcilerConfig,
    emf: &Emf,
    event: LambdaEvent<ScheduledInput>,
) -> Result<ReconcileReport, Error> {
    emf.write_cold_start(&event.context.request_id, stdout());
    if let Some(kind) = event.payload.unexpected {
        tracing::warn!(
            input = kind,
            "the scheduled input is not an object with a string `job`; running the pass anyway"
        );
    }
    let invocation = invocation(&event.context);
    budget::scope(
        store_budget(&invocation),
        reconcile_within_budget(
            gate,
            (index, purge),
            config,
            (emf, &event.context.request_id),
            &invocation,
        ),
    )
    .await
}

/// [`handle_reconcile`]'s work, inside the invocation's store budget; `(emf, request_id)` write
/// each sweep's document.
async fn reconcile_within_budget(
    gate: &Gate,
    (index, purge): (&dyn InFlightIndex, &dyn Purge),
    config: &ReconcilerConfig,
    (emf, request_id): (&Emf, &str),
    invocation: &Invocation,
) -> Result<ReconcileReport, Error> {
    // Several sweeps a run (every `RECONCILE_SWEEP_INTERVAL_SECONDS` of the one-minute
    // schedule): a stranded record waits at most a sweep interval after its lease ends.
    let (report, sweeps) = gate
        .reconcile_run(
            index,
            config,
            invocation,
            |ms| tokio::time::sleep(std::time::Duration::from_millis(ms)),
            |sweep| emit_sweep(sweep, emf, request_id, stdout()),
        )
        .await;
    tracing::info!(sweeps, ?report, "reconciler run finished");
    // A store without TTL (PostgreSQL): expired rows with nothing left to do, after the pass.
    gate.purge_expired(purge, invocation).await;
    Ok(report)
}

/// The SDK configuration every function starts from: the latest behaviour version, and
/// throttling and transient service errors retried by the SDK (standard mode, at most 4
/// attempts), not by hand. `AWS_ENDPOINT_URL` is honoured by the SDK (local runs against moto).
pub fn aws_loader() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(4))
}

/// An integration's build function: from its configuration `C` (read at cold start,
/// [`IntegrationConfig`]) and the SDK configuration (for its own clients, e.g. Secrets Manager's)
/// to the integration, once per cold start. Any `async fn(C, SdkConfig) -> Result<I, Error>`
/// is one (e.g. `truck_slot::lambda::build`).
pub trait Build<C> {
    /// The integration built.
    type Integration: Integration + 'static;

    /// Builds it.
    fn build(
        self,
        config: C,
        aws: SdkConfig,
    ) -> impl Future<Output = Result<Self::Integration, Error>>;
}

impl<C, I, F, Fut> Build<C> for F
where
    I: Integration + 'static,
    F: FnOnce(C, SdkConfig) -> Fut,
    Fut: Future<Output = Result<I, Error>>,
{
    type Integration = I;

    fn build(self, config: C, aws: SdkConfig) -> impl Future<Output = Result<I, Error>> {
        self(config, aws)
    }
}

/// Builds the gate from `config`, once per cold start: the SDK configuration (operation timeouts
/// that keep a call well inside the lease), the store ([`build_store`]), the manual queue (SQS),
/// and the integration from its own configuration by `build` (which may read secrets with the
/// SDK configuration it is given, [`super::secrets`]).
///
/// Returns the gate, the read side of its idempotency table (what the reconciler pages) and the
/// store's purge of expired rows (what the reconciler's schedule runs); the consumer ignores
/// both.
///
/// # Errors
/// `build`'s, or [`build_store`]'s (the conditional-write check failed, the database's secret
/// or migrations).
pub async fn build_gate<C: IntegrationConfig, B: Build<C>>(
    config: Config<C>,
    build: B,
) -> Result<(Gate, Arc<dyn InFlightIndex>, Arc<dyn Purge>), Error> {
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
    let integration = build.build(config.integration, aws.clone()).await?;
    // The labels are checked against the names the store refuses on every commit (DynamoDB:
    // the integration's; PostgreSQL: the neutral ones, its fixed columns), before the store is
    // checked or migrated: a label refused there would send every new event to a person.
    let (store, index, purge) = build_store(
        &config.lambda.store,
        &aws,
        integration.row_columns(),
        integration.label_names(),
    )
    .await?;
    // Every store call of an invocation ends before the invocation must answer (`budget`).
    let store = Arc::new(Bounded::new(store));
    let index: Arc<dyn InFlightIndex> = Arc::new(Bounded::new(index));
    let purge: Arc<dyn Purge> = Arc::new(Bounded::new(purge));
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let integration = Arc::new(integration);
    let codes = integration.clone();
    // A message whose server asked to wait (`Retry-After`) is hidden on the event queue.
    let mut gate_config = config.lambda.gate;
    gate_config.visibility = Some(Arc::new(SqsVisibility::new(sqs.clone())));
    let gate = Gate {
        store,
        integration,
        manual: Arc::new(
            SqsManualQueue::new(sqs, config.lambda.manual_queue_url)
                .with_codes(Arc::new(move |r| codes.manual_reason_code(r))),
        ),
        clock: Arc::new(SystemClock),
        config: gate_config,
    };
    Ok((gate, index, purge))
}

/// The consumer's whole life for the integration `build` makes (from its configuration `C` and
/// the SDK configuration): JSON logs (Lambda's `AWS_LAMBDA_LOG_FORMAT`), configuration from the
/// environment (a failed start is reported naming every bad variable), clients built once, then
/// the runtime loop (`lambda_runtime::run_concurrent`: [`super::concurrency`]) with
/// [`handle_sqs`], each invocation writing its own EMF document.
///
///
/// The job client of `examples/job-client` wired as a consumer: its one variable and its build
/// are `job_client::lambda` (`examples/job-client/src/lambda.rs`; the payments example's
/// `examples/payments/src/lambda.rs` adds a secret), and its `main` is this (the reconciler's
/// and the metrics function's are the same with [`run_reconciler`] and [`run_metrics`](super::run_metrics);
/// the example's own binaries compile it, a doc test cannot name that crate without a cycle):
///
/// ```ignore
/// fn main() -> Result<(), gate_lambda::Error> {
///     // Current-thread, or multi-thread with several invocations at once (`concurrency`).
///     gate_lambda::tokio_runtime()?.block_on(gate_lambda::run_consumer(job_client::lambda::build))
/// }
/// ```
///
/// # Errors
/// A failed start (reported first, [`super::report_init_error`]), or the runtime's own errors.
pub async fn run_consumer<C: IntegrationConfig, B: Build<C>>(build: B) -> Result<(), Error> {
    crate::logging::init();
    let (emf, gate) = start(async {
        let config = Config::<C>::from_env(|k| std::env::var(k).ok())?;
        tracing::info!(
            integration = %config.lambda.gate.integration,
            supports_idempotency_key = config.lambda.gate.server_supports_idempotency_key,
            deadline_margin_ms = config.lambda.gate.deadline_margin_ms,
            lease_ms = config.lambda.gate.lease_ms(),
            invocations_at_once = invocations_at_once(|k| std::env::var(k).ok()),
            integration_config = ?config.integration,
            "consumer starting"
        );
        let emf = Emf::new(&config.lambda.gate.integration);
        Ok((emf, build_gate(config, build).await?.0))
    })
    .await?;
    let (gate, emf) = (Arc::new(gate), Arc::new(emf));
    lambda_runtime::run_concurrent(service_fn(move |event: LambdaEvent<SqsInput>| {
        let (gate, emf) = (gate.clone(), emf.clone());
        async move { handle_sqs(&gate, &emf, event).await }
    }))
    .await
}

/// The reconciler's whole life: as [`run_consumer`], with the reconciler's deadline margin
/// ([`Config::for_reconciler`]) and [`handle_reconcile`] per scheduled invocation.
///
/// # Errors
/// A failed start (reported first, [`super::report_init_error`]), or the runtime's own errors.
pub async fn run_reconciler<C: IntegrationConfig, B: Build<C>>(build: B) -> Result<(), Error> {
    crate::logging::init();
    let (emf, gate, (index, purge), reconciler) = start(async {
        let config = Config::<C>::from_env(|k| std::env::var(k).ok())?.for_reconciler();
        tracing::info!(
            integration = %config.lambda.gate.integration,
            deadline_margin_ms = config.lambda.gate.deadline_margin_ms,
            lease_ms = config.lambda.gate.lease_ms(),
            invocations_at_once = invocations_at_once(|k| std::env::var(k).ok()),
            "reconciler starting"
        );
        let reconciler = config.lambda.reconciler.clone();
        let emf = Emf::new(&config.lambda.gate.integration);
        let (gate, index, purge) = build_gate(config, build).await?;
        Ok((emf, gate, (index, purge), reconciler))
    })
    .await?;
    let (gate, emf, reconciler) = (Arc::new(gate), Arc::new(emf), Arc::new(reconciler));
    lambda_runtime::run_concurrent(service_fn(move |event: LambdaEvent<ScheduledInput>| {
        let (gate, index, purge, emf, reconciler) = (
            gate.clone(),
            index.clone(),
            purge.clone(),
            emf.clone(),
            reconciler.clone(),
        );
        async move {
            let ports = (index.as_ref(), purge.as_ref());
            handle_reconcile(&gate, ports, &reconciler, &emf, event).await
        }
    }))
    .await
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

    #[test]
    fn a_deadline_decades_ahead_is_cut_to_the_longest_invocation_and_a_past_one_kept() {
        let now = 1_780_293_600_000;
        let fifty_years_ms = 50 * 365 * 86_400_000;
        let far = u64::try_from(now + fifty_years_ms).unwrap();
        assert_eq!(deadline_ms(far, now), now + 900_000);
        assert_eq!(deadline_ms(u64::MAX, now), now + 900_000);
        let past = u64::try_from(now - 5_000).unwrap();
        assert_eq!(deadline_ms(past, now), now - 5_000);
    }

    /// Any JSON is a scheduled input: the job when it is a string, else the shape named.
    #[test]
    fn any_json_is_a_scheduled_input() {
        let read = |text: &str| serde_json::from_str::<ScheduledInput>(text).unwrap();
        let input = read(r#"{"job": "reconcile", "other": 1}"#);
        assert_eq!(
            (input.job.as_deref(), input.unexpected),
            (Some("reconcile"), None)
        );
        let input = read("{}");
        assert_eq!((input.job, input.unexpected), (None, None));
        let input = read(r#"{"job": ["SECRET"]}"#);
        assert_eq!((input.job, input.unexpected), (None, Some("an array")));
        let input = read(r#""SECRET\u0001""#);
        assert_eq!((input.job, input.unexpected), (None, Some("a string")));
        let input = read("null");
        assert_eq!((input.job, input.unexpected), (None, Some("null")));
    }
}
