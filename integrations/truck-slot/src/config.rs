//! The functions' configuration (the consumer and the reconciler share it), read and validated
//! once at cold start from environment variables. Every missing or invalid variable is found in
//! one pass and reported together ([`ConfigErrors`]): a function that cannot start says so once,
//! naming each variable, instead of one variable per attempt.
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
//! | `TERMINALS` | several terminals: a JSON array, one object per terminal (`crate::terminal::several`); replaces `TERMINAL_BASE_URL`, `TERMINAL_API_TOKEN_SECRET_ARN`, `TERMINAL_API_TOKEN`, `TERMINAL_SUPPORTS_IDEMPOTENCY_KEY`, `KNOWN_TERMINALS` and `TERMINAL_KEY_RETENTION_SECONDS`, which are refused next to it | | none (one terminal) |
//! | `TERMINAL_TOKEN_SECRET_ARNS` | with `TERMINALS`: comma-separated ARNs of the secrets the function's role may read; every terminal's `token_secret_arn` must be one of them (set but empty: none may be read) | | unset (not checked) |

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use reqwest::Url;

use gate::consumer::{GateConfig, DEFAULT_KEY_TTL_S};
use gate::reconciler::ReconcilerConfig;

use crate::terminal::several::{
    parse_terminals, policies, TerminalLimits, TerminalPolicy, TerminalSpec,
};
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
#[error("{variable}: {problem}")]
pub struct ConfigError {
    /// The environment variable.
    pub variable: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// Every problem of one configuration, in the order the variables are read (never empty).
/// Displayed as `invalid configuration: 2 problems: TERMINAL_BASE_URL: missing (required);
/// IDEMPOTENCY_TABLE: missing (required)`; it quotes values, never a token (a refused
/// `TERMINAL_API_TOKEN` is described, not quoted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The variables named, in order (a variable with two problems is named twice).
    pub fn variables(&self) -> Vec<&'static str> {
        self.0.iter().map(|e| e.variable).collect()
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "invalid configuration: {n} problem{}: ",
            if n == 1 { "" } else { "s" }
        )?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
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
    /// `KNOWN_TERMINALS`: the terminal codes the integration books at (comma-separated).
    pub known_terminals: Vec<String>,
    /// The terminal client's settings (the token is redacted in `Debug`). `terminal.token` is
    /// set here only from `TERMINAL_API_TOKEN` (local runs); in the cloud it is filled in at cold
    /// start from [`FunctionConfig::token_secret_arn`] (`crate::lambda`).
    pub terminal: HttpTerminalConfig,
    /// `TERMINAL_API_TOKEN_SECRET_ARN`: the Secrets Manager secret whose `SecretString` is the
    /// terminal's bearer token, read once per cold start. Not a secret itself.
    pub token_secret_arn: Option<String>,
    /// `TERMINALS`: the terminals of a stack that books at several, in their configured order;
    /// empty for one terminal. With several, `terminal` holds the settings they share (the
    /// timeouts; its `base_url` is empty), `token_secret_arn` is `None` (each terminal names its
    /// own), and `policies` holds each one's key support and claim horizon.
    pub terminals: Vec<TerminalSpec>,
    /// Per terminal code, with several terminals: its key support and claim horizon, which
    /// replace `gate.terminal_supports_idempotency_key` and `gate.claim_horizon_ms` for records
    /// of that terminal ([`crate::TruckSlot::with_policies`]). Empty for one terminal.
    pub policies: BTreeMap<String, TerminalPolicy>,
}

/// Reads variables through a lookup and collects every problem instead of stopping at the first:
/// an accessor that finds a problem records it and returns the default (or `None`), so the
/// caller reads on and [`Env::finish`] reports them all.
struct Env<F: Fn(&str) -> Option<String>> {
    lookup: F,
    problems: std::cell::RefCell<Vec<ConfigError>>,
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    fn new(lookup: F) -> Self {
        Self {
            lookup,
            problems: std::cell::RefCell::new(Vec::new()),
        }
    }

    fn problem(&self, variable: &'static str, problem: impl Into<String>) {
        self.problems.borrow_mut().push(ConfigError {
            variable,
            problem: problem.into(),
        });
    }

    fn optional(&self, variable: &'static str) -> Option<String> {
        (self.lookup)(variable).filter(|v| !v.trim().is_empty())
    }

    /// The value, or `None` with the problem `missing (required)` recorded.
    fn required(&self, variable: &'static str) -> Option<String> {
        let value = self.optional(variable);
        if value.is_none() {
            self.problem(variable, "missing (required)");
        }
        value
    }

    /// The integer in `min..=max`, `default` when unset; `None` with the problem recorded when
    /// set to anything else.
    fn number(&self, variable: &'static str, default: i64, min: i64, max: i64) -> Option<i64> {
        let Some(raw) = self.optional(variable) else {
            return Some(default);
        };
        let Ok(value) = raw.trim().parse::<i64>() else {
            self.problem(variable, format!("{raw:?} is not an integer"));
            return None;
        };
        if !(min..=max).contains(&value) {
            self.problem(variable, format!("{value} is outside {min}..={max}"));
            return None;
        }
        Some(value)
    }

    /// With `TERMINALS` set: records a problem if `variable`, which `TERMINALS` replaces, is set
    /// too (a forgotten single-terminal variable must not silently configure a terminal).
    fn replaced_by_terminals(&self, variable: &'static str) {
        if self.optional(variable).is_some() {
            self.problem(
                variable,
                "set together with TERMINALS, which configures every terminal; unset it",
            );
        }
    }

    /// `true` or `false`, `default` when unset or (with the problem recorded) anything else.
    fn boolean(&self, variable: &'static str, default: bool) -> bool {
        match self.optional(variable).as_deref().map(str::trim) {
            None => default,
            Some("true") => true,
            Some("false") => false,
            Some(other) => {
                self.problem(variable, format!("{other:?} is not `true` or `false`"));
                default
            }
        }
    }

    /// `value` when no problem was recorded, else every problem.
    fn finish<T>(self, value: impl FnOnce() -> T) -> Result<T, ConfigErrors> {
        let problems = self.problems.into_inner();
        if problems.is_empty() {
            Ok(value())
        } else {
            Err(ConfigErrors(problems))
        }
    }
}

/// Whether `url` may be used as the terminal's base URL: `https://` with a host, or `http://` to
/// a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`) for local runs and tests. The URL is
/// parsed (WHATWG URL rules, as reqwest sends it), so `http://127.0.0.1:80@evil.example` is a
/// request to `evil.example` and refused. Never allowed: user info (`user:password@`, a
/// credential in a URL ends up in logs and error messages), a query or a fragment (the client
/// appends `/slots` and its own query), white space or a control character anywhere (the parser
/// strips a trailing space that the client, appending `/slots`, would send as `%20`).
pub fn base_url_allowed(url: &str) -> bool {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
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
    /// Whether the terminal `terminal` (a record's terminal code) honours `Idempotency-Key`: its
    /// policy's, else `gate.terminal_supports_idempotency_key`.
    pub fn supports_idempotency_key(&self, terminal: &str) -> bool {
        self.policies
            .get(terminal)
            .map_or(self.gate.terminal_supports_idempotency_key, |p| {
                p.supports_idempotency_key
            })
    }

    /// The claim horizon at the terminal `terminal`, **milliseconds**: its policy's, else
    /// `gate.claim_horizon_ms`.
    pub fn claim_horizon_for(&self, terminal: &str) -> i64 {
        self.policies
            .get(terminal)
            .map_or(self.gate.claim_horizon_ms, |p| p.claim_horizon_ms)
    }

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
    /// [`ConfigErrors`]: every missing or invalid variable, each named, in one error.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigErrors> {
        let env = Env::new(lookup);
        let terminals_raw = env.optional("TERMINALS");
        let several = terminals_raw.is_some();
        if several {
            for variable in [
                "TERMINAL_BASE_URL",
                "TERMINAL_API_TOKEN_SECRET_ARN",
                "TERMINAL_API_TOKEN",
                "TERMINAL_SUPPORTS_IDEMPOTENCY_KEY",
                "KNOWN_TERMINALS",
                "TERMINAL_KEY_RETENTION_SECONDS",
            ] {
                env.replaced_by_terminals(variable);
            }
        }
        let base_url = if several {
            Some(String::new())
        } else {
            env.required("TERMINAL_BASE_URL")
        };
        // Not quoted: a refused URL may carry a credential (`https://user:password@...`).
        if !several && base_url.as_deref().is_some_and(|u| !base_url_allowed(u)) {
            env.problem(
                "TERMINAL_BASE_URL",
                "must be https:// (http:// only to a loopback host), without user info, query, \
                 fragment or white space",
            );
        }
        let mut known_terminals: Vec<String> = env
            .optional("KNOWN_TERMINALS")
            .unwrap_or_else(|| "ECT-DELTA".into())
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        if known_terminals.is_empty() {
            env.problem("KNOWN_TERMINALS", "no terminal code given");
        }
        let mut gate = GateConfig::new(
            env.optional("INTEGRATION_NAME")
                .unwrap_or_else(|| "ect-delta-slots".into()),
        );
        gate.terminal_supports_idempotency_key =
            several || env.boolean("TERMINAL_SUPPORTS_IDEMPOTENCY_KEY", true);
        // The default (21 days) outlives every redelivery horizon; 1 hour is the floor for tests
        // and local runs (`DEFAULT_KEY_TTL_S`; the template refuses less than 19 days).
        gate.key_ttl_s = env
            .number("KEY_TTL_SECONDS", DEFAULT_KEY_TTL_S, 3_600, 366 * 86_400)
            .unwrap_or(DEFAULT_KEY_TTL_S);
        gate.lease_floor_ms = env
            .number("LEASE_FLOOR_MS", 30_000, 1_000, 900_000)
            .unwrap_or(30_000);
        gate.max_concurrency = env.number("MAX_CONCURRENCY", 10, 1, 10_000).unwrap_or(10) as usize;
        gate.deadline_margin_ms = env
            .number("DEADLINE_MARGIN_MS", 12_000, 0, 900_000)
            .unwrap_or(12_000);
        let mut terminal = HttpTerminalConfig::new(base_url.unwrap_or_default());
        terminal.connect_timeout = Duration::from_millis(
            env.number("TERMINAL_CONNECT_TIMEOUT_MS", 2_000, 1, 60_000)
                .unwrap_or(2_000) as u64,
        );
        terminal.request_timeout = Duration::from_millis(
            env.number("TERMINAL_REQUEST_TIMEOUT_MS", 10_000, 1, 900_000)
                .unwrap_or(10_000) as u64,
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
        let token_secret_arn = env
            .optional("TERMINAL_API_TOKEN_SECRET_ARN")
            .filter(|_| !several);
        let local_token = env.optional("TERMINAL_API_TOKEN").filter(|_| !several);
        if token_secret_arn.is_some() && local_token.is_some() {
            env.problem(
                "TERMINAL_API_TOKEN",
                "set together with TERMINAL_API_TOKEN_SECRET_ARN; TERMINAL_API_TOKEN is for local \
                 runs only, unset one of them",
            );
        }
        if let Some(arn) = token_secret_arn.as_deref().filter(|a| !secret_arn_valid(a)) {
            // Not quoted: a value that is no ARN may be the token itself, pasted in the wrong place.
            env.problem(
                "TERMINAL_API_TOKEN_SECRET_ARN",
                format!(
                    "not a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:\
                     secret:NAME; {} characters, not quoted: it may be the secret itself)",
                    arn.chars().count()
                ),
            );
        }
        // The token is described, never quoted (`ApiToken::parse`'s errors do not quote it).
        terminal.token = match local_token.map(|raw| ApiToken::parse(&raw)).transpose() {
            Ok(token) => token,
            Err(e) => {
                env.problem("TERMINAL_API_TOKEN", e.to_string());
                None
            }
        };
        // The AWS SDK logs request and response bodies at TRACE when this is set; the manual
        // queue's messages hold the PIN.
        if env
            .optional("LOG_SENSITIVE_BODIES")
            .is_some_and(|v| !v.trim().eq_ignore_ascii_case("false"))
        {
            env.problem(
                "LOG_SENSITIVE_BODIES",
                "would let the AWS SDK log request bodies, which hold release PINs; unset it",
            );
        }
        let min_age_s = env.number("RECONCILE_MIN_AGE_SECONDS", 120, 0, 86_400);
        let mut retention_s = if several {
            Some(86_400)
        } else {
            env.number("TERMINAL_KEY_RETENTION_SECONDS", 86_400, 60, 366 * 86_400)
        };
        let margin_s = env.number("RETENTION_MARGIN_SECONDS", 3_600, 0, 366 * 86_400);
        let page_size = env.number("RECONCILE_PAGE_SIZE", 25, 1, 1_000);
        let mut terminal_policies = BTreeMap::new();
        let terminals = match (&terminals_raw, margin_s) {
            (Some(raw), Some(margin)) => {
                let limits = TerminalLimits {
                    key_ttl_s: gate.key_ttl_s,
                    retention_margin_s: margin,
                };
                // Set but empty is a list too (the template's `!Join` of an empty
                // `TerminalTokenSecretArns`): the role may read no secret.
                let readable = (env.lookup)("TERMINAL_TOKEN_SECRET_ARNS");
                match parse_terminals(raw, limits) {
                    Ok(specs) => {
                        check_readable_secrets(&env, &specs, readable.as_deref());
                        specs
                    }
                    Err(problems) => {
                        for problem in problems {
                            env.problem("TERMINALS", problem);
                        }
                        Vec::new()
                    }
                }
            }
            _ => Vec::new(),
        };
        if several {
            known_terminals = terminals.iter().map(|t| t.code.clone()).collect();
            terminal_policies = policies(&terminals, margin_s.unwrap_or(3_600) * 1000);
            // What a record of a terminal no longer configured is held to: the shortest retention.
            retention_s = terminals
                .iter()
                .filter_map(|t| t.key_retention_s)
                .min()
                .or(retention_s);
        }
        if let (false, Some(retention), Some(margin)) = (several, retention_s, margin_s) {
            if margin >= retention {
                env.problem(
                    "RETENTION_MARGIN_SECONDS",
                    format!(
                        "{margin} must be less than TERMINAL_KEY_RETENTION_SECONDS ({retention})"
                    ),
                );
            }
        }
        let reconciler = ReconcilerConfig {
            min_age_ms: min_age_s.unwrap_or(120) * 1000,
            key_retention_ms: retention_s.unwrap_or(86_400) * 1000,
            retention_margin_ms: margin_s.unwrap_or(3_600) * 1000,
            page_size: page_size.unwrap_or(25) as usize,
        };
        // The consumer resumes stale records too: it never claims past the same horizon.
        gate.claim_horizon_ms = reconciler.claim_horizon_ms();
        let idempotency_table = env.required("IDEMPOTENCY_TABLE");
        let bookings_table = env.required("BOOKINGS_TABLE");
        let manual_queue_url = env.required("MANUAL_QUEUE_URL");
        env.finish(|| Self {
            gate,
            reconciler,
            idempotency_table: idempotency_table.unwrap_or_default(),
            bookings_table: bookings_table.unwrap_or_default(),
            manual_queue_url: manual_queue_url.unwrap_or_default(),
            known_terminals,
            terminal,
            token_secret_arn,
            terminals,
            policies: terminal_policies,
        })
    }
}

/// With `TERMINAL_TOKEN_SECRET_ARNS` set, even empty (the template passes the secrets the role
/// may read, `""` for none): records a problem for every terminal whose `token_secret_arn` is not
/// among them, which would otherwise fail at cold start with an access denied.
fn check_readable_secrets<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
    specs: &[TerminalSpec],
    readable: Option<&str>,
) {
    let Some(readable) = readable else {
        return;
    };
    let readable: Vec<&str> = readable
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    for spec in specs {
        if let Some(arn) = spec
            .token_secret_arn
            .as_deref()
            .filter(|a| !readable.contains(a))
        {
            env.problem(
                "TERMINALS",
                format!(
                    "terminal {:?}: token_secret_arn: {arn:?} is not among \
                     TERMINAL_TOKEN_SECRET_ARNS (the secrets the function's role may read)",
                    spec.code
                ),
            );
        }
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
    /// [`ConfigErrors`] naming the missing variable.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigErrors> {
        let env = Env::new(lookup);
        let idempotency_table = env.required("IDEMPOTENCY_TABLE");
        let integration = env
            .optional("INTEGRATION_NAME")
            .unwrap_or_else(|| "ect-delta-slots".into());
        env.finish(|| Self {
            idempotency_table: idempotency_table.unwrap_or_default(),
            integration,
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
        assert_eq!(c.known_terminals, vec!["ECT-DELTA".to_string()]);
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
                .variables(),
            ["BOOKINGS_TABLE"]
        );
        let mut bad = BASE.to_vec();
        bad.push(("KEY_TTL_SECONDS", "14d"));
        let err = FunctionConfig::from_env(env(&bad)).unwrap_err();
        assert_eq!(err.variables(), ["KEY_TTL_SECONDS"]);
        assert!(err.to_string().contains("14d"));
        let mut bad = BASE.to_vec();
        bad.push(("TERMINAL_SUPPORTS_IDEMPOTENCY_KEY", "yes"));
        assert_eq!(
            FunctionConfig::from_env(env(&bad)).unwrap_err().variables(),
            ["TERMINAL_SUPPORTS_IDEMPOTENCY_KEY"]
        );
    }

    /// Nothing set: every required variable is named in one error, in reading order.
    #[test]
    fn every_missing_variable_is_named_at_once() {
        let err = FunctionConfig::from_env(env(&[])).unwrap_err();
        assert_eq!(
            err.variables(),
            [
                "TERMINAL_BASE_URL",
                "IDEMPOTENCY_TABLE",
                "BOOKINGS_TABLE",
                "MANUAL_QUEUE_URL"
            ]
        );
        assert_eq!(
            err.to_string(),
            "invalid configuration: 4 problems: TERMINAL_BASE_URL: missing (required); \
             IDEMPOTENCY_TABLE: missing (required); BOOKINGS_TABLE: missing (required); \
             MANUAL_QUEUE_URL: missing (required)"
        );
        assert_eq!(
            MetricsConfig::from_env(env(&[])).unwrap_err().to_string(),
            "invalid configuration: 1 problem: IDEMPOTENCY_TABLE: missing (required)"
        );
    }

    /// Missing and invalid variables together: all of them, each once, none hidden behind the
    /// first; a refused base URL is not quoted (it may carry a credential).
    #[test]
    fn missing_and_invalid_variables_are_reported_together() {
        let err = FunctionConfig::from_env(env(&[
            ("TERMINAL_BASE_URL", "http://user:s3cret@slots.example"),
            ("IDEMPOTENCY_TABLE", "idem"),
            ("KEY_TTL_SECONDS", "14d"),
            ("MAX_CONCURRENCY", "0"),
            ("TERMINAL_SUPPORTS_IDEMPOTENCY_KEY", "yes"),
            ("TERMINAL_KEY_RETENTION_SECONDS", "600"),
            ("RETENTION_MARGIN_SECONDS", "600"),
        ]))
        .unwrap_err();
        assert_eq!(
            err.variables(),
            [
                "TERMINAL_BASE_URL",
                "TERMINAL_SUPPORTS_IDEMPOTENCY_KEY",
                "KEY_TTL_SECONDS",
                "MAX_CONCURRENCY",
                "RETENTION_MARGIN_SECONDS",
                "BOOKINGS_TABLE",
                "MANUAL_QUEUE_URL"
            ]
        );
        let text = err.to_string();
        assert!(
            text.contains("KEY_TTL_SECONDS: \"14d\" is not an integer"),
            "{text}"
        );
        assert!(
            text.contains("MAX_CONCURRENCY: 0 is outside 1..=10000"),
            "{text}"
        );
        assert!(
            text.contains("RETENTION_MARGIN_SECONDS: 600 must be less than TERMINAL_KEY_RETENTION_SECONDS (600)"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
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
            FunctionConfig::from_env(env(&plain))
                .unwrap_err()
                .variables(),
            ["TERMINAL_BASE_URL"]
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
        assert_eq!(err.variables(), ["TERMINAL_API_TOKEN"]);
        assert!(!err.to_string().contains("XYZZY"), "{err}");

        let mut bad_arn = BASE.to_vec();
        bad_arn.push((
            "TERMINAL_API_TOKEN_SECRET_ARN",
            "arn:aws:ssm:eu-west-1:123456789012:parameter/x",
        ));
        assert_eq!(
            FunctionConfig::from_env(env(&bad_arn))
                .unwrap_err()
                .variables(),
            ["TERMINAL_API_TOKEN_SECRET_ARN"]
        );

        let mut bad_token = BASE.to_vec();
        bad_token.push(("TERMINAL_API_TOKEN", "tok XYZZY"));
        let err = FunctionConfig::from_env(env(&bad_token)).unwrap_err();
        assert_eq!(err.variables(), ["TERMINAL_API_TOKEN"]);
        assert!(!err.to_string().contains("XYZZY"), "{err}");
    }

    #[test]
    fn sensitive_sdk_body_logging_is_refused() {
        let mut logging = BASE.to_vec();
        logging.push(("LOG_SENSITIVE_BODIES", "true"));
        assert_eq!(
            FunctionConfig::from_env(env(&logging))
                .unwrap_err()
                .variables(),
            ["LOG_SENSITIVE_BODIES"]
        );
        let mut off = BASE.to_vec();
        off.push(("LOG_SENSITIVE_BODIES", "false"));
        assert!(FunctionConfig::from_env(env(&off)).is_ok());
    }

    const TERMINALS: &str = r#"[
        {"code": "ECT-DELTA", "supports_idempotency_key": true,
         "base_url": "https://slots.ect.example", "key_retention_seconds": 86400,
         "max_concurrent_calls": 4,
         "token_secret_arn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-delta/token-AbCdEf"},
        {"code": "APMT-MV2", "supports_idempotency_key": true, "api": "appointments-v2",
         "base_url": "https://apmt.example/api", "key_retention_seconds": 172800,
         "max_concurrent_calls": 2},
        {"code": "RWG", "supports_idempotency_key": false}
    ]"#;

    fn several() -> Vec<(&'static str, &'static str)> {
        let mut vars: Vec<_> = BASE
            .iter()
            .copied()
            .filter(|(k, _)| *k != "TERMINAL_BASE_URL")
            .collect();
        vars.push(("TERMINALS", TERMINALS));
        vars
    }

    /// `TERMINALS`: the gate knows each terminal's code, key support and claim horizon (its
    /// retention minus the margin); the reconciler's fallback retention is the shortest.
    #[test]
    fn several_terminals_configure_each_its_own_policy() {
        let c = FunctionConfig::from_env(env(&several())).unwrap();
        assert_eq!(c.known_terminals, ["ECT-DELTA", "APMT-MV2", "RWG"]);
        assert_eq!(c.terminals.len(), 3);
        assert!(c.supports_idempotency_key("ECT-DELTA"));
        assert!(c.supports_idempotency_key("APMT-MV2"));
        assert!(!c.supports_idempotency_key("RWG"));
        assert_eq!(c.claim_horizon_for("ECT-DELTA"), 23 * 3_600_000);
        assert_eq!(c.claim_horizon_for("APMT-MV2"), 47 * 3_600_000);
        assert_eq!(c.reconciler.key_retention_ms, 86_400_000);
        assert_eq!(c.token_secret_arn, None);
        assert!(c.terminal.base_url.is_empty());
        // One terminal (no TERMINALS): no per-terminal policy, the single settings apply.
        let one = FunctionConfig::from_env(env(BASE)).unwrap();
        assert!(one.terminals.is_empty() && one.policies.is_empty());
        assert!(one.supports_idempotency_key("ECT-DELTA"));
        assert_eq!(one.claim_horizon_for("ECT-DELTA"), 23 * 3_600_000);
    }

    /// The single-terminal variables are refused next to `TERMINALS`; a bad terminal is named
    /// with its field, together with every other problem.
    #[test]
    fn terminals_errors_name_the_terminal_and_the_field() {
        let mut both = several();
        both.push(("TERMINAL_BASE_URL", "https://slots.example"));
        both.push(("KNOWN_TERMINALS", "ECT-DELTA"));
        both.push(("TERMINAL_API_TOKEN", "tok-XYZZY-secret"));
        let err = FunctionConfig::from_env(env(&both)).unwrap_err();
        assert_eq!(
            err.variables(),
            ["TERMINAL_BASE_URL", "TERMINAL_API_TOKEN", "KNOWN_TERMINALS"]
        );
        assert!(!err.to_string().contains("XYZZY"), "{err}");

        let mut bad = several();
        bad.retain(|(k, _)| *k != "TERMINALS");
        bad.push((
            "TERMINALS",
            r#"[{"code": "APMT-MV2", "supports_idempotency_key": true,
                 "base_url": "https://apmt.example", "max_concurrent_calls": 2}]"#,
        ));
        bad.push(("KEY_TTL_SECONDS", "14d"));
        let err = FunctionConfig::from_env(env(&bad)).unwrap_err();
        assert_eq!(err.variables(), ["KEY_TTL_SECONDS", "TERMINALS"]);
        assert_eq!(
            err.to_string(),
            "invalid configuration: 2 problems: KEY_TTL_SECONDS: \"14d\" is not an integer; \
             TERMINALS: terminal \"APMT-MV2\": key_retention_seconds: missing (required with key \
             support)"
        );
    }

    /// The example of a refused `TERMINALS` in `docs/DEPLOYING.md` ("Several terminals in one
    /// stack"), word for word.
    #[test]
    fn the_documented_example_of_terminals_errors() {
        let mut vars = several();
        vars.retain(|(k, _)| *k != "TERMINALS");
        vars.push((
            "TERMINALS",
            r#"[{"code": "ECT-DELTA", "supports_idempotency_key": true,
                 "base_url": "https://slots.ect.example", "key_retention_seconds": 86400,
                 "max_concurrent_calls": 0},
                {"code": "APMT-MV2", "supports_idempotency_key": true, "api": "appointments-v2",
                 "base_url": "https://api.apmt.example", "max_concurrent_calls": 2}]"#,
        ));
        vars.push(("KNOWN_TERMINALS", "ECT-DELTA,APMT-MV2"));
        let err = FunctionConfig::from_env(env(&vars)).unwrap_err();
        let doc = include_str!("../../../docs/DEPLOYING.md");
        let shown = doc
            .lines()
            .find(|l| l.starts_with("invalid configuration: 3 problems: KNOWN_TERMINALS"))
            .expect("the example in docs/DEPLOYING.md");
        assert_eq!(err.to_string(), shown);
    }

    /// With `TERMINAL_TOKEN_SECRET_ARNS` (what the role may read), a terminal's secret outside
    /// it is refused at start, naming the terminal.
    #[test]
    fn a_terminal_secret_the_role_cannot_read_is_refused() {
        let mut vars = several();
        vars.push((
            "TERMINAL_TOKEN_SECRET_ARNS",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:other-AbCdEf",
        ));
        let err = FunctionConfig::from_env(env(&vars)).unwrap_err();
        assert_eq!(err.variables(), ["TERMINALS"]);
        assert!(
            err.to_string().contains(
                "terminal \"ECT-DELTA\": token_secret_arn: \"arn:aws:secretsmanager:eu-west-1:\
                 123456789012:secret:ect-delta/token-AbCdEf\" is not among \
                 TERMINAL_TOKEN_SECRET_ARNS"
            ),
            "{err}"
        );
        vars.pop();
        vars.push((
            "TERMINAL_TOKEN_SECRET_ARNS",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:other-AbCdEf, \
             arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-delta/token-AbCdEf",
        ));
        assert!(FunctionConfig::from_env(env(&vars)).is_ok());
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
