//! The functions' log subscriber (feature `aws`): `lambda_runtime`'s default (level from
//! `AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG`, else `INFO`; JSON when `AWS_LAMBDA_LOG_FORMAT=JSON`,
//! which Lambda sets from `LoggingConfig`), with one difference: **other crates never log below
//! `INFO`**, whatever the level; only the gate's own events follow the configured level.
//!
//! The reason: below `INFO` the libraries print payloads, and payloads hold secrets.
//! `lambda_runtime` logs every raw event it receives at TRACE ("raw JSON event received from
//! Lambda": an SQS event's bodies hold release PINs); the AWS SDK logs every request it transmits
//! and every response body it reads at TRACE (a `SendMessage` to the manual queue holds the
//! original body, a DynamoDB item holds the stored request); its DEBUG errors print raw
//! responses. Raising a function's `ApplicationLogLevel` to debug something must not put PINs
//! into CloudWatch Logs. The gate's own events never hold a secret (`Debug` of every type that
//! holds one redacts it; server answers are scrubbed, see `truck_slot::server`), and
//! `LOG_SENSITIVE_BODIES` is refused by the configuration (`crate::config`, feature `lambda`).

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{filter_fn, EnvFilter, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The targets whose events follow the configured level: the gate's crates and the functions.
const OWN_TARGETS: &[&str] = &[
    "gate",
    "gate_dynamo",
    "gate_postgres",
    "gate_http",
    "gate_lambda",
    "consumer",
    "reconciler",
    "metrics_publisher",
    "ingress",
];

/// Whether an event or span of `target` at `level` may be logged at all: the gate's own at any
/// level, every other crate's at `INFO`, `WARN` and `ERROR` only.
pub fn allowed_target(target: &str, level: Level) -> bool {
    let own = OWN_TARGETS.iter().any(|own| {
        target == *own
            || target
                .strip_prefix(own)
                .is_some_and(|rest| rest.starts_with("::"))
    });
    own || level <= Level::INFO
}

/// [`allowed_target`] for an event's or span's metadata.
pub fn allowed(metadata: &Metadata<'_>) -> bool {
    allowed_target(metadata.target(), *metadata.level())
}

/// The level from `AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG` (a bare level), else `INFO`, as
/// `lambda_runtime` reads it.
fn level(lookup: impl Fn(&str) -> Option<String>) -> LevelFilter {
    lookup("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|| lookup("RUST_LOG"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(LevelFilter::INFO)
}

/// Installs the subscriber for the process, writing to stdout. Call once, first thing in
/// `main`. A second call (or another subscriber already installed) is ignored.
pub fn init() {
    let format = std::env::var("AWS_LAMBDA_LOG_FORMAT").unwrap_or_default();
    let filter = EnvFilter::builder()
        .with_default_directive(level(|k| std::env::var(k).ok()).into())
        .from_env_lossy();
    let fmt = tracing_subscriber::fmt::layer()
        .with_target(false)
        .without_time();
    let layer = if format.eq_ignore_ascii_case("json") {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(filter).with_filter(filter_fn(allowed)))
        .try_init();
    tracing::trace!("TRACE logging: other crates are capped at INFO (their payloads hold secrets)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_follows_lambda_then_rust_log() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(level(env(&[])), LevelFilter::INFO);
        assert_eq!(level(env(&[("RUST_LOG", "debug")])), LevelFilter::DEBUG);
        assert_eq!(
            level(env(&[
                ("AWS_LAMBDA_LOG_LEVEL", "TRACE"),
                ("RUST_LOG", "warn")
            ])),
            LevelFilter::TRACE
        );
    }

    #[test]
    fn other_crates_stay_at_info() {
        assert!(allowed_target("gate::consumer", Level::TRACE));
        assert!(allowed_target("gate", Level::DEBUG));
        assert!(allowed_target("gate_lambda::runner", Level::TRACE));
        assert!(allowed_target("gate_dynamo", Level::DEBUG));
        assert!(!allowed_target("gate_other", Level::DEBUG));
        assert!(allowed_target("reconciler", Level::TRACE));
        assert!(!allowed_target("gatekeeper", Level::TRACE));
        assert!(!allowed_target(
            "lambda_runtime::layers::api_response",
            Level::TRACE
        ));
        assert!(!allowed_target(
            "aws_smithy_runtime::client::orchestrator",
            Level::TRACE
        ));
        assert!(!allowed_target("aws_smithy_runtime", Level::DEBUG));
        assert!(allowed_target("aws_smithy_runtime", Level::INFO));
        assert!(allowed_target("lambda_runtime", Level::WARN));
        assert!(allowed_target("hyper_util", Level::ERROR));
    }
}
