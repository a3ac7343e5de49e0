//! The Lambda wiring (feature `lambda`): any [`gate::Integration`] runs as the SQS consumer
//! ([`run_consumer`]), the scheduled reconciler ([`run_reconciler`]) and the scheduled metrics
//! publisher ([`run_metrics`]) from a `main.rs` of a few lines. The gate reads its generic
//! variables ([`LambdaConfig`]: the store (DynamoDB or PostgreSQL), manual queue, lease, TTL,
//! key retention and margin, concurrency, deadline margin, reconciler age and page size,
//! integration name) once at cold start; the integration adds its own ([`IntegrationConfig`]), and every problem of both is
//! reported in one message ([`ConfigErrors`]) to the Runtime API's init-error endpoint
//! (`Runtime.InvalidConfiguration`, [`report_init_error`]). Then its `build` function makes the
//! integration from its configuration and the SDK configuration (reading a secret with
//! [`secrets::fetch_secret`] if it needs one), and the runtime loop starts.
//!
//! Modules, one concern each: [`env`](mod@env) (reading variables, collecting problems), [`config`]
//! (the configuration), [`init_error`] (a start that fails), [`secrets`] (Secrets Manager),
//! [`store_config`] (which store: DynamoDB or PostgreSQL), [`store`] (the store as configured, with
//! its cold-start checks), [`emf`] (the EMF documents), [`metrics`] (the metrics function),
//! [`runner`] (the handlers and the runtime loops), [`concurrency`] (several invocations at once
//! in one environment: what is per invocation and what is shared).
//!
//! The job client of `examples/job-client` wired as a consumer: its one variable and its build
//! are `job_client::lambda` (`examples/job-client/src/lambda.rs`; the payments example's
//! `examples/payments/src/lambda.rs` adds a secret), and its `main` is this (the reconciler's
//! and the metrics function's are the same with [`run_reconciler`] and `run_metrics`; the
//! example's own binaries compile it, a doc test cannot name that crate without a cycle):
//!
//! ```ignore
//! fn main() -> Result<(), gate_lambda::Error> {
//!     // Current-thread, or multi-thread with several invocations at once (`concurrency`).
//!     gate_lambda::tokio_runtime()?.block_on(gate_lambda::run_consumer(job_client::lambda::build))
//! }
//! ```
#![warn(missing_docs)]

pub mod concurrency;
pub mod config;
pub mod emf;
pub mod env;
pub mod init_error;
pub mod logging;
pub mod metrics;
pub mod runner;
pub mod secrets;
pub mod store;
pub mod store_config;

/// The SDK configuration an integration's `build` receives (for its own clients, e.g. Secrets
/// Manager's).
pub use aws_config::SdkConfig;
/// The Secrets Manager client an integration's `build` reads its secret with
/// ([`fetch_secret_string`], [`fetch_secret`]): `SecretsClient::new(&aws)`.
pub use aws_sdk_secretsmanager::Client as SecretsClient;
/// The error type of the runtime and of every `build`.
pub use lambda_runtime::Error;

pub use concurrency::{invocations_at_once, tokio_runtime, MAX_CONCURRENCY_VARIABLE};
pub use config::{
    min_deadline_margin_ms, Config, IntegrationConfig, LambdaConfig, MetricsConfig, StoreConfig,
    COMMIT_ALLOWANCE_MS,
};
pub use emf::{emit_sweep, Emf};
pub use env::{fixed_env, secret_arn_valid, ConfigError, ConfigErrors, Env};
pub use init_error::{report_init_error, INIT_ERROR, INVALID_CONFIGURATION};
pub use metrics::{handle_metrics, run_metrics};
pub use runner::{
    build_gate, handle_reconcile, handle_sqs, run_consumer, run_reconciler, Build, ScheduledInput,
};
pub use secrets::{fetch_secret, fetch_secret_string, SecretError, SecretString};
pub use store::{
    build_metrics_index, build_store, verify_conditional_writes, verify_single_region,
};
pub use store_config::{DatabaseUrl, PostgresSettings};
