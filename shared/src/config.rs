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
//! | `KEY_TTL_SECONDS` | record lifetime | seconds | `1814400` (21 days) |
//! | `LEASE_FLOOR_MS` | shortest lease | milliseconds | `30000` |
//! | `MAX_CONCURRENCY` | records at once per batch | | `10` |
//! | `DEADLINE_MARGIN_MS` | no new record this close to the deadline; raised to at least `TERMINAL_REQUEST_TIMEOUT_MS` + [`COMMIT_ALLOWANCE_MS`] (the reconciler: twice the timeout + the allowance) | milliseconds | `12000` |
//! | `TERMINAL_CONNECT_TIMEOUT_MS` | connect timeout | milliseconds | `2000` |
//! | `TERMINAL_REQUEST_TIMEOUT_MS` | whole-request timeout | milliseconds | `10000` |
//! | `TERMINAL_API_TOKEN_SECRET_ARN` | ARN of the Secrets Manager secret holding the bearer token (the cloud) | | none |
//! | `TERMINAL_API_TOKEN` | bearer token, **local runs only**; refused together with the ARN | | none |
//! | `RECONCILE_MIN_AGE_SECONDS` | reconciler: minimum record age | seconds | `120` |
//! | `TERMINAL_KEY_RETENTION_SECONDS` | consumer and reconciler: the terminal's key retention | seconds | `86400` |
//! | `RETENTION_MARGIN_SECONDS` | consumer and reconciler: never claim this close to the retention's end | seconds | `3600` |
//! | `RECONCILE_PAGE_SIZE` | reconciler: records per `InFlight` page | | `25` |

use std::net::IpAddr;
use std::time::Duration;

use reqwest::Url;

use crate::gate::{GateConfig, DEFAULT_KEY_TTL_S};
use crate::reconciler::ReconcilerConfig;
use crate::terminal::{ApiToken, HttpTerminalConfig};

/// What [`FunctionConfig`] reserves for the commit (and the store calls around it) after the
/// terminal calls of one record, milliseconds.
pub const COMMIT_ALLOWANCE_MS: i64 = 2_000;

/// The least deadline margin for a record that makes `calls` terminal requests of at most
/// `request_timeout` each and then commits, milliseconds: `calls × timeout + COMMIT_ALLOWANCE_MS`.
fn terminal_calls_margin_ms(request_timeout: Duration, calls: i64) -> i64 {
    i64::try_from(request_timeout.as_millis())
        .unwrap_or(i64::MAX)
        .saturating_mul(calls)
        .saturating_add(COMMIT_ALLOWANCE_MS)
}

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
    /// The terminal client's settings (the token is redacted in `Debug`). `terminal.token` is
    /// set here only from `TERMINAL_API_TOKEN` (local runs); in the cloud it is filled in at cold
    /// start from [`FunctionConfig::token_secret_arn`] (`crate::lambda`).
    pub terminal: HttpTerminalConfig,
    /// `TERMINAL_API_TOKEN_SECRET_ARN`: the Secrets Manager secret whose `SecretString` is the
    /// terminal's bearer token, read once per cold start. Not a secret itself.
    pub token_secret_arn: Option<String>,
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

/// Whether `url` may be used as the terminal's base URL: `https://` with a host, or `http://` to
/// a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`) for local runs and tests. The URL is
/// parsed (WHATWG URL rules, as reqwest sends it), so `http://127.0.0.1:80@evil.example` is a
/// request to `evil.example` and refused. Never allowed: user info (`user:password@`, a
/// credential in a URL ends up in logs and error messages), a query or a fragment (the client
/// appends `/slots` and its own query).
pub fn base_url_allowed(url: &str) -> bool {
    let Ok(parsed) = Url::parse(url) else {
        return false;
    };
    if !parsed.username().is_empty()
        || parsed.password().is_some()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        return false;
    }
    let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
        return false;
    };
    match parsed.scheme() {
        "https" => true,
        "http" => {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}

/// Whether `arn` looks like a Secrets Manager secret ARN
/// (`arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME`).
pub fn secret_arn_valid(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(7, ':').collect();
    parts.len() == 7
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "secretsmanager"
        && !parts[3].is_empty()
        && parts[4].len() == 12
        && parts[4].bytes().all(|b| b.is_ascii_digit())
        && parts[5] == "secret"
        && !parts[6].is_empty()
        && arn.bytes().all(|b| b.is_ascii_graphic())
}

impl FunctionConfig {
    /// The reconciler's configuration: as read, with the deadline margin raised to fit a lookup
    /// and a claim (two terminal requests) and the commit of one record, since the reconciler may
    /// make both before committing.
    #[must_use]
    pub fn for_reconciler(mut self) -> Self {
        self.gate.deadline_margin_ms = self
            .gate
            .deadline_margin_ms
            .max(terminal_calls_margin_ms(self.terminal.request_timeout, 2));
        self
    }

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
        // The default (21 days) outlives every redelivery horizon; 1 hour is the floor for tests
        // and local runs (`DEFAULT_KEY_TTL_S`; the template refuses less than 19 days).
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
        // A record started just before the margin must finish its claim (up to the request
        // timeout) and its commit before Lambda's deadline, or Lambda ends the invocation mid-claim
        // and the whole batch comes back: the margin is raised to that if set lower (not refused:
        // a function that cannot start would send every notification to the dead-letter queue).
        gate.deadline_margin_ms = gate
            .deadline_margin_ms
            .max(terminal_calls_margin_ms(terminal.request_timeout, 1));
        // The token: in the cloud from AWS Secrets Manager (the ARN here, the value read once at
        // cold start by `crate::lambda`); `TERMINAL_API_TOKEN` is for local runs only. Both at once
        // is refused rather than ranked: a forgotten local variable must not silently override the
        // managed secret, nor the other way round.
        let token_secret_arn = env.optional("TERMINAL_API_TOKEN_SECRET_ARN");
        let local_token = env.optional("TERMINAL_API_TOKEN");
        if token_secret_arn.is_some() && local_token.is_some() {
            return Err(ConfigError {
                variable: "TERMINAL_API_TOKEN",
                problem: "set together with TERMINAL_API_TOKEN_SECRET_ARN; TERMINAL_API_TOKEN is \
                          for local runs only, unset one of them"
                    .into(),
            });
        }
        if let Some(arn) = &token_secret_arn {
            if !secret_arn_valid(arn) {
                return Err(ConfigError {
                    variable: "TERMINAL_API_TOKEN_SECRET_ARN",
                    problem: format!("{arn:?} is not a Secrets Manager secret ARN"),
                });
            }
        }
        terminal.token = local_token
            .map(|raw| ApiToken::parse(&raw))
            .transpose()
            .map_err(|e| ConfigError {
                variable: "TERMINAL_API_TOKEN",
                problem: e.to_string(),
            })?;
        // The AWS SDK logs request and response bodies at TRACE when this is set; the manual
        // queue's messages hold the PIN.
        if env
            .optional("LOG_SENSITIVE_BODIES")
            .is_some_and(|v| !v.trim().eq_ignore_ascii_case("false"))
        {
            return Err(ConfigError {
                variable: "LOG_SENSITIVE_BODIES",
                problem:
                    "would let the AWS SDK log request bodies, which hold release PINs; unset it"
                        .into(),
            });
        }
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
        // The consumer resumes stale records too: it never claims past the same horizon.
        gate.claim_horizon_ms = reconciler.claim_horizon_ms();
        Ok(Self {
            gate,
            reconciler,
            idempotency_table: env.required("IDEMPOTENCY_TABLE")?,
            bookings_table: env.required("BOOKINGS_TABLE")?,
            manual_queue_url: env.required("MANUAL_QUEUE_URL")?,
            terminal,
            token_secret_arn,
        })
    }
}

/// The metrics function's configuration: `IDEMPOTENCY_TABLE` (required) and `INTEGRATION_NAME`
/// (default `ect-delta-slots`, the metrics' `Integration` dimension).
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// The idempotency table's name (its GSIs `InFlight` and `MultiSlot` are read).
    pub idempotency_table: String,
    /// The integration's name.
    pub integration: String,
}

impl MetricsConfig {
    /// Reads the configuration through `lookup`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the missing variable.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env(lookup);
        Ok(Self {
            idempotency_table: env.required("IDEMPOTENCY_TABLE")?,
            integration: env
                .optional("INTEGRATION_NAME")
                .unwrap_or_else(|| "ect-delta-slots".into()),
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
        assert_eq!(c.gate.key_ttl_s, 1_814_400);
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
        // The authority is parsed as reqwest parses it: this one is a request to evil.example.
        assert!(!base_url_allowed("http://127.0.0.1:80@evil.example/"));
        assert!(!base_url_allowed("http://localhost@evil.example"));
        assert!(!base_url_allowed("http://[::1].evil.example"));
        // No credential, query or fragment in a base URL, https or not.
        assert!(!base_url_allowed("https://user:pass@slots.example"));
        assert!(!base_url_allowed("https://slots.example/api?token=abc"));
        assert!(!base_url_allowed("https://slots.example/api#x"));
        assert!(!base_url_allowed("https://"));
        assert!(!base_url_allowed("slots.example"));
        assert!(!base_url_allowed(""));
        assert!(base_url_allowed("HTTPS://Slots.Example/api"));
        assert!(base_url_allowed("http://127.0.0.2:9"));
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
        assert_eq!(
            c.terminal.token.as_ref().map(|t| t.expose()),
            Some("tok-XYZZY-secret")
        );
        assert_eq!(c.token_secret_arn, None);
    }

    /// A deadline margin shorter than a claim plus its commit is raised to fit one (the consumer)
    /// or a lookup, a claim and the commit (the reconciler); a longer one is kept.
    #[test]
    fn a_deadline_margin_shorter_than_a_claim_is_raised() {
        let mut slow = BASE.to_vec();
        slow.push(("TERMINAL_REQUEST_TIMEOUT_MS", "30000"));
        let c = FunctionConfig::from_env(env(&slow)).unwrap();
        assert_eq!(c.gate.deadline_margin_ms, 32_000);
        assert_eq!(c.for_reconciler().gate.deadline_margin_ms, 62_000);

        let defaults = FunctionConfig::from_env(env(BASE)).unwrap();
        assert_eq!(defaults.gate.deadline_margin_ms, 12_000);
        assert_eq!(defaults.for_reconciler().gate.deadline_margin_ms, 22_000);

        let mut long = BASE.to_vec();
        long.push(("DEADLINE_MARGIN_MS", "40000"));
        let c = FunctionConfig::from_env(env(&long)).unwrap();
        assert_eq!(c.for_reconciler().gate.deadline_margin_ms, 40_000);
    }

    const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-delta/token-AbCdEf";

    #[test]
    fn the_token_comes_from_one_place_only() {
        let mut cloud = BASE.to_vec();
        cloud.push(("TERMINAL_API_TOKEN_SECRET_ARN", ARN));
        let c = FunctionConfig::from_env(env(&cloud)).unwrap();
        assert_eq!(c.token_secret_arn.as_deref(), Some(ARN));
        assert!(c.terminal.token.is_none(), "read at cold start, not here");

        let mut both = cloud.clone();
        both.push(("TERMINAL_API_TOKEN", "tok-XYZZY-secret"));
        let err = FunctionConfig::from_env(env(&both)).unwrap_err();
        assert_eq!(err.variable, "TERMINAL_API_TOKEN");
        assert!(!err.to_string().contains("XYZZY"), "{err}");

        let mut bad_arn = BASE.to_vec();
        bad_arn.push((
            "TERMINAL_API_TOKEN_SECRET_ARN",
            "arn:aws:ssm:eu-west-1:123456789012:parameter/x",
        ));
        assert_eq!(
            FunctionConfig::from_env(env(&bad_arn))
                .unwrap_err()
                .variable,
            "TERMINAL_API_TOKEN_SECRET_ARN"
        );

        let mut bad_token = BASE.to_vec();
        bad_token.push(("TERMINAL_API_TOKEN", "tok XYZZY"));
        let err = FunctionConfig::from_env(env(&bad_token)).unwrap_err();
        assert_eq!(err.variable, "TERMINAL_API_TOKEN");
        assert!(!err.to_string().contains("XYZZY"), "{err}");
    }

    #[test]
    fn sensitive_sdk_body_logging_is_refused() {
        let mut logging = BASE.to_vec();
        logging.push(("LOG_SENSITIVE_BODIES", "true"));
        assert_eq!(
            FunctionConfig::from_env(env(&logging))
                .unwrap_err()
                .variable,
            "LOG_SENSITIVE_BODIES"
        );
        let mut off = BASE.to_vec();
        off.push(("LOG_SENSITIVE_BODIES", "false"));
        assert!(FunctionConfig::from_env(env(&off)).is_ok());
    }

    #[test]
    fn secret_arns_are_recognised() {
        assert!(secret_arn_valid(ARN));
        assert!(secret_arn_valid(
            "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:a-AbCdEf"
        ));
        assert!(!secret_arn_valid("ect-delta/token"));
        assert!(!secret_arn_valid(
            "arn:aws:secretsmanager:eu-west-1:1234:secret:x"
        ));
        assert!(!secret_arn_valid(
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
        ));
        assert!(!secret_arn_valid(
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:a b"
        ));
    }
}
