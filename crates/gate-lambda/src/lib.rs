//! `gate-lambda`: the exactly-once gate's Lambda wiring. Any [`gate::Integration`] runs as the
//! SQS consumer ([`run_consumer`]), the scheduled reconciler ([`run_reconciler`]) and the
//! scheduled metrics publisher ([`run_metrics`]) from a `main.rs` of a few lines. Depends on
//! `gate`, `gate-dynamo`, `lambda_runtime` and the AWS SDK (Secrets Manager, CloudWatch);
//! features `postgres` (the PostgreSQL store, `gate-postgres`) and `http` (`gate-http`).
//!
//! The gate reads its generic variables ([`LambdaConfig`]) once at cold start; the integration
//! adds its own ([`IntegrationConfig`]), and every problem of both is reported in one message
//! ([`ConfigErrors`]) to the Runtime API's init-error endpoint ([`report_init_error`]). Then
//! its `build` function makes the integration (reading a secret with
//! [`secrets::fetch_secret`] if it needs one), and the runtime loop starts.
//!
//! Modules, one concern each: [`env`](mod@env) (reading variables, collecting problems),
//! [`config`], [`init_error`] (a start that fails), [`secrets`] (Secrets Manager),
//! [`store_config`] (which store), [`store`] (the store as configured, with its cold-start
//! checks), [`emf`] (the EMF documents), [`metrics`] (the metrics function), [`logging`],
//! [`runner`] (the handlers and the runtime loops, an example `main` on [`run_consumer`]),
//! [`concurrency`] (several invocations at once in one environment).
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
