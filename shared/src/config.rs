//! The functions' configuration (the consumer and the reconciler share it), read and validated
//! once at cold start from environment variables. A missing or invalid variable stops start-up
//! with a message naming it.
//!
//! | variable | meaning | unit | default |
//! | --- | --- | --- | --- |
//! | `INTEGRATION_NAME` | record key prefix | | `ect-delta-slots` |
//! | `IDEMPOTENCY_TABLE` | idempotency table name | | required |
//! | `BOOKINGS_TABLE` | TMS bookings table name | | required |
//! | `MANUAL_QUEUE_URL` | manual-booking queue URL | | required |
//! | `TERMINAL_BASE_URL` | terminal API base URL | | required |
//! | `TERMINAL_SUPPORTS_IDEMPOTENCY_KEY` | `true` or `false` | | `true` |
//! | `KNOWN_TERMINALS` | comma-separated terminal codes | | `ECT-DELTA` |
//! | `KEY_TTL_SECONDS` | record lifetime | seconds | `1209600` (14 days) |
//! | `LEASE_FLOOR_MS` | shortest lease | milliseconds | `30000` |
//! | `MAX_CONCURRENCY` | records at once per batch | | `10` |
//! | `DEADLINE_MARGIN_MS` | no new record this close to the deadline | milliseconds | `12000` |
//! | `TERMINAL_CONNECT_TIMEOUT_MS` | connect timeout | milliseconds | `2000` |
//! | `TERMINAL_REQUEST_TIMEOUT_MS` | whole-request timeout | milliseconds | `10000` |
//! | `TERMINAL_API_TOKEN` | bearer token, **local runs only** (the cloud reads Secrets Manager) | | none |
//! | `RECONCILE_MIN_AGE_SECONDS` | reconciler: minimum record age | seconds | `120` |
//! | `TERMINAL_KEY_RETENTION_SECONDS` | reconciler: the terminal's key retention | seconds | `86400` |
//! | `RETENTION_MARGIN_SECONDS` | reconciler: never claim this close to the retention's end | seconds | `3600` |
//! | `RECONCILE_PAGE_SIZE` | reconciler: records per `InFlight` page | | `25` |

use std::time::Duration;

use crate::gate::{GateConfig, DEFAULT_KEY_TTL_S};
use crate::reconciler::ReconcilerConfig;
use crate::terminal::{ApiToken, HttpTerminalConfig};

/// A configuration error: the variable's name and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration: {variable}: {problem}")]
pub struct ConfigError {
    /// The environment variable.
    pub variable: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// The functions' configuration.
#[derive(Debug, Clone)]
pub struct FunctionConfig {
    /// The gate's settings.
    pub gate: GateConfig,
    /// The reconciler's settings (unused by the consumer).
    pub reconciler: ReconcilerConfig,
    /// The idempotency table's name.
    pub idempotency_table: String,
    /// The TMS bookings table's name.
    pub bookings_table: String,
    /// The manual-booking queue's URL.
    pub manual_queue_url: String,
    /// The terminal client's settings (the token is redacted in `Debug`).
    pub terminal: HttpTerminalConfig,
}

struct Env<F: Fn(&str) -> Option<String>>(F);

impl<F: Fn(&str) -> Option<String>> Env<F> {
    fn optional(&self, variable: &'static str) -> Option<String> {
        (self.0)(variable).filter(|v| !v.trim().is_empty())
    }

    fn required(&self, variable: &'static str) -> Result<String, ConfigError> {
        self.optional(variable).ok_or(ConfigError {
            variable,
            problem: "missing (required)".into(),
        })
    }

    fn number(
        &self,
        variable: &'static str,
        default: i64,
        min: i64,
        max: i64,
    ) -> Result<i64, ConfigError> {
        let Some(raw) = self.optional(variable) else {
            return Ok(default);
        };
        let value: i64 = raw.trim().parse().map_err(|_| ConfigError {
            variable,
            problem: format!("{raw:?} is not an integer"),
        })?;
        if !(min..=max).contains(&value) {
            return Err(ConfigError {
                variable,
                problem: format!("{value} is outside {min}..={max}"),
            });
        }
        Ok(value)
    }

    fn boolean(&self, variable: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.optional(variable).as_deref().map(str::trim) {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(ConfigError {
                variable,
                problem: format!("{other:?} is not `true` or `false`"),
            }),
        }
    }
}

/// Whether `url` may be used as the terminal's base URL: `https://`, or `http://` to a loopback
/// host (`127.0.0.1`, `localhost`, `[::1]`) for local runs and tests.
pub fn base_url_allowed(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?']).next().unwrap_or("");
    let host = if host.starts_with('[') {
        host.split(']')
            .next()
            .map(|h| format!("{h}]"))
            .unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or("").to_string()
    };
    matches!(host.as_str(), "127.0.0.1" | "localhost" | "[::1]")
}

impl FunctionConfig {
    /// Reads the configuration through `lookup` (e.g. `|k| std::env::var(k).ok()`).
    ///
    /// # Errors
    /// The first [`ConfigError`] found, naming the variable.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env(lookup);
        let base_url = env.required("TERMINAL_BASE_URL")?;
        if !base_url_allowed(&base_url) {
            return Err(ConfigError {
                variable: "TERMINAL_BASE_URL",
                problem: "must be https:// (http:// only to a loopback host)".into(),
            });
        }
        let known_terminals: Vec<String> = env
            .optional("KNOWN_TERMINALS")
            .unwrap_or_else(|| "ECT-DELTA".into())
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        if known_terminals.is_empty() {
            return Err(ConfigError {
                variable: "KNOWN_TERMINALS",
                problem: "no terminal code given".into(),
            });
        }
        let mut gate = GateConfig::new(
            env.optional("INTEGRATION_NAME")
                .unwrap_or_else(|| "ect-delta-slots".into()),
            known_terminals,
        );
        gate.terminal_supports_idempotency_key =
            env.boolean("TERMINAL_SUPPORTS_IDEMPOTENCY_KEY", true)?;
        // At least 15 days would be safer than SQS's 14-day retention; 1 hour is the floor.
        gate.key_ttl_s = env.number("KEY_TTL_SECONDS", DEFAULT_KEY_TTL_S, 3_600, 366 * 86_400)?;
        gate.lease_floor_ms = env.number("LEASE_FLOOR_MS", 30_000, 1_000, 900_000)?;
        gate.max_concurrency = env.number("MAX_CONCURRENCY", 10, 1, 10_000)? as usize;
        gate.deadline_margin_ms = env.number("DEADLINE_MARGIN_MS", 12_000, 0, 900_000)?;
        let mut terminal = HttpTerminalConfig::new(base_url);
        terminal.connect_timeout =
            Duration::from_millis(
                env.number("TERMINAL_CONNECT_TIMEOUT_MS", 2_000, 1, 60_000)? as u64
            );
        terminal.request_timeout =
            Duration::from_millis(
                env.number("TERMINAL_REQUEST_TIMEOUT_MS", 10_000, 1, 900_000)? as u64,
            );
        // Local runs only: in the cloud the token comes from AWS Secrets Manager.
        terminal.token = env.optional("TERMINAL_API_TOKEN").map(ApiToken::new);
        let reconciler = ReconcilerConfig {
            min_age_ms: env.number("RECONCILE_MIN_AGE_SECONDS", 120, 0, 86_400)? * 1000,
            key_retention_ms: env.number(
                "TERMINAL_KEY_RETENTION_SECONDS",
                86_400,
                60,
                366 * 86_400,
            )? * 1000,
            retention_margin_ms: env.number("RETENTION_MARGIN_SECONDS", 3_600, 0, 366 * 86_400)?
                * 1000,
            page_size: env.number("RECONCILE_PAGE_SIZE", 25, 1, 1_000)? as usize,
        };
        if reconciler.retention_margin_ms >= reconciler.key_retention_ms {
            return Err(ConfigError {
                variable: "RETENTION_MARGIN_SECONDS",
                problem: "must be less than TERMINAL_KEY_RETENTION_SECONDS".into(),
            });
        }
        Ok(Self {
            gate,
            reconciler,
            idempotency_table: env.required("IDEMPOTENCY_TABLE")?,
            bookings_table: env.required("BOOKINGS_TABLE")?,
            manual_queue_url: env.required("MANUAL_QUEUE_URL")?,
            terminal,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const BASE: &[(&str, &str)] = &[
        ("IDEMPOTENCY_TABLE", "idem"),
        ("BOOKINGS_TABLE", "book"),
        (
            "MANUAL_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/1/manual",
        ),
        ("TERMINAL_BASE_URL", "https://slots.example"),
    ];

    #[test]
    fn defaults_apply() {
        let c = FunctionConfig::from_env(env(BASE)).unwrap();
        assert_eq!(c.gate.key_ttl_s, 1_209_600);
        assert_eq!(c.gate.known_terminals, vec!["ECT-DELTA".to_string()]);
        assert!(c.gate.terminal_supports_idempotency_key);
        assert_eq!(c.terminal.request_timeout, Duration::from_secs(10));
        assert_eq!(c.reconciler.min_age_ms, 120_000);
        assert_eq!(c.reconciler.key_retention_ms, 86_400_000);
        assert_eq!(c.reconciler.retention_margin_ms, 3_600_000);
    }

    #[test]
    fn a_missing_or_bad_variable_is_named() {
        let without: Vec<_> = BASE
            .iter()
            .copied()
            .filter(|(k, _)| *k != "BOOKINGS_TABLE")
            .collect();
        assert_eq!(
            FunctionConfig::from_env(env(&without))
                .unwrap_err()
                .variable,
            "BOOKINGS_TABLE"
        );
        let mut bad = BASE.to_vec();
        bad.push(("KEY_TTL_SECONDS", "14d"));
        let err = FunctionConfig::from_env(env(&bad)).unwrap_err();
        assert_eq!(err.variable, "KEY_TTL_SECONDS");
        assert!(err.to_string().contains("14d"));
        let mut bad = BASE.to_vec();
        bad.push(("TERMINAL_SUPPORTS_IDEMPOTENCY_KEY", "yes"));
        assert_eq!(
            FunctionConfig::from_env(env(&bad)).unwrap_err().variable,
            "TERMINAL_SUPPORTS_IDEMPOTENCY_KEY"
        );
    }

    #[test]
    fn the_base_url_must_be_https_outside_loopback() {
        assert!(base_url_allowed("https://slots.example/api"));
        assert!(base_url_allowed("http://127.0.0.1:8080"));
        assert!(base_url_allowed("http://localhost:8080/x"));
        assert!(base_url_allowed("http://[::1]:8080"));
        assert!(!base_url_allowed("http://slots.example"));
        assert!(!base_url_allowed("http://127.0.0.1.evil.example"));
        assert!(!base_url_allowed("ftp://127.0.0.1"));
        let mut plain = BASE.to_vec();
        plain[3] = ("TERMINAL_BASE_URL", "http://slots.example");
        assert_eq!(
            FunctionConfig::from_env(env(&plain)).unwrap_err().variable,
            "TERMINAL_BASE_URL"
        );
    }

    #[test]
    fn the_token_never_shows_in_debug() {
        let mut with_token = BASE.to_vec();
        with_token.push(("TERMINAL_API_TOKEN", "tok-XYZZY-secret"));
        let c = FunctionConfig::from_env(env(&with_token)).unwrap();
        assert!(!format!("{c:?}").contains("XYZZY"));
    }
}
