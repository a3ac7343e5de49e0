//! The truck-slot integration's own configuration ([`TerminalConfig`]), read at cold start after
//! the gate's generic variables (`gate_lambda::config`: tables, manual queue, lease, TTL, key
//! retention and margin, concurrency, deadline margin, reconciler; every problem of both is
//! reported in one message, this integration's first). [`FunctionConfig`] is the whole.
//!
//! | variable | meaning | unit | default |
//! | --- | --- | --- | --- |
//! | `INTEGRATION_NAME` | (the gate's) its default here | | `ect-delta-slots` |
//! | `TERMINAL_BASE_URL` | terminal API base URL | | required |
//! | `TERMINAL_SUPPORTS_IDEMPOTENCY_KEY` | `true` or `false` | | `true` |
//! | `KNOWN_TERMINALS` | comma-separated terminal codes | | `ECT-DELTA` |
//! | `TERMINAL_CONNECT_TIMEOUT_MS` | connect timeout | milliseconds | `2000` |
//! | `TERMINAL_REQUEST_TIMEOUT_MS` | whole-request timeout; the gate's `DEADLINE_MARGIN_MS` is raised to at least this + `gate_lambda::COMMIT_ALLOWANCE_MS` (the reconciler: twice this + the allowance) | milliseconds | `10000` |
//! | `TERMINAL_API_TOKEN_SECRET_ARN` | ARN of the Secrets Manager secret holding the bearer token (the cloud) | | none |
//! | `TERMINAL_API_TOKEN` | bearer token, **local runs only**; refused together with the ARN | | none |
//! | `SERVER_KEY_RETENTION_SECONDS` | (the gate's) the terminal's key retention | seconds | `86400` |
//! | `TERMINAL_SLOT_ID_PATTERN` | the format of the terminal's slot ids: a regular expression (the `regex` crate's syntax) the whole id must match; a slot id outside it is never kept, the record goes to a person | | `[A-Za-z0-9_.:-]+` |
//! | `TERMINAL_SLOT_ID_MAX_CHARS` | the longest slot id, `1..=128` | characters | `64` |
//! | `TERMINALS` | several terminals: a JSON array, one object per terminal (`crate::terminal::several`); replaces `TERMINAL_BASE_URL`, `TERMINAL_API_TOKEN_SECRET_ARN`, `TERMINAL_API_TOKEN`, `TERMINAL_SUPPORTS_IDEMPOTENCY_KEY`, `KNOWN_TERMINALS` and `SERVER_KEY_RETENTION_SECONDS`, which are refused next to it | | none (one terminal) |
//! | `TERMINAL_TOKEN_SECRET_ARNS` | with `TERMINALS`: comma-separated ARNs of the secrets the function's role may read; every terminal's `token_secret_arn` must be one of them (set but empty: none may be read) | | unset (not checked) |

use std::collections::BTreeMap;
use std::time::Duration;

use gate::consumer::GateConfig;
use gate::idempotency_key::{
    IdFormat, DEFAULT_ID_MAX_CHARS, DEFAULT_ID_PATTERN, MAX_EFFECT_ID_CHARS,
};
use gate_lambda::{secret_arn_valid, Env, IntegrationConfig, LambdaConfig};

use crate::terminal::several::{
    parse_terminals, policies, TerminalLimits, TerminalPolicy, TerminalSpec,
};
use crate::terminal::{base_url_allowed, ApiToken, HttpTerminalConfig};

/// The functions' whole configuration: the gate's and the terminals'.
pub type FunctionConfig = gate_lambda::Config<TerminalConfig>;

/// The truck-slot integration's configuration: its terminals.
#[derive(Debug, Clone)]
pub struct TerminalConfig {
    /// `KNOWN_TERMINALS`: the terminal codes the integration books at (comma-separated).
    pub known_terminals: Vec<String>,
    /// The terminal client's settings (the token is redacted in `Debug`). `terminal.token` is
    /// set here only from `TERMINAL_API_TOKEN` (local runs); in the cloud it is filled in at cold
    /// start from [`TerminalConfig::token_secret_arn`] (`crate::lambda::build`).
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
    /// replace `gate.server_supports_idempotency_key` and `gate.claim_horizon_ms` for records
    /// of that terminal ([`crate::TruckSlot::with_policies`]). Empty for one terminal.
    pub policies: BTreeMap<String, TerminalPolicy>,
}

/// With `TERMINALS` set: records a problem if `variable`, which `TERMINALS` replaces, is set too
/// (a forgotten single-terminal variable must not silently configure a terminal).
fn replaced_by_terminals(env: &Env<'_>, variable: &'static str) {
    if env.optional(variable).is_some() {
        env.problem(
            variable,
            "set together with TERMINALS, which configures every terminal; unset it",
        );
    }
}

impl TerminalConfig {
    /// Whether the terminal `terminal` (a record's terminal code) honours `Idempotency-Key`: its
    /// policy's, else `gate.server_supports_idempotency_key`.
    pub fn supports_idempotency_key(&self, gate: &GateConfig, terminal: &str) -> bool {
        self.policies
            .get(terminal)
            .map_or(gate.server_supports_idempotency_key, |p| {
                p.supports_idempotency_key
            })
    }

    /// The claim horizon at the terminal `terminal`, **milliseconds**: its policy's, else
    /// `gate.claim_horizon_ms`.
    pub fn claim_horizon_for(&self, gate: &GateConfig, terminal: &str) -> i64 {
        self.policies
            .get(terminal)
            .map_or(gate.claim_horizon_ms, |p| p.claim_horizon_ms)
    }
}

impl IntegrationConfig for TerminalConfig {
    /// The record key prefix of stacks deployed without `INTEGRATION_NAME`.
    const DEFAULT_NAME: Option<&'static str> = Some("ect-delta-slots");

    /// One claim (or lookup) is at most the terminal's request timeout.
    fn call_timeout_ms(&self) -> i64 {
        i64::try_from(self.terminal.request_timeout.as_millis()).unwrap_or(i64::MAX)
    }

    fn from_env(env: &Env<'_>, lambda: &mut LambdaConfig) -> Self {
        let terminals_raw = env.optional("TERMINALS");
        let several = terminals_raw.is_some();
        if several {
            for variable in [
                "TERMINAL_BASE_URL",
                "TERMINAL_API_TOKEN_SECRET_ARN",
                "TERMINAL_API_TOKEN",
                "TERMINAL_SUPPORTS_IDEMPOTENCY_KEY",
                "KNOWN_TERMINALS",
                "SERVER_KEY_RETENTION_SECONDS",
                gate_lambda::config::LEGACY_KEY_RETENTION_VARIABLE,
                "TERMINAL_SLOT_ID_PATTERN",
                "TERMINAL_SLOT_ID_MAX_CHARS",
            ] {
                replaced_by_terminals(env, variable);
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
        lambda.gate.server_supports_idempotency_key =
            several || env.boolean("TERMINAL_SUPPORTS_IDEMPOTENCY_KEY", true);
        let mut terminal = HttpTerminalConfig::new(base_url.unwrap_or_default());
        terminal.connect_timeout = Duration::from_millis(
            env.number("TERMINAL_CONNECT_TIMEOUT_MS", 2_000, 1, 60_000)
                .unwrap_or(2_000) as u64,
        );
        terminal.request_timeout = Duration::from_millis(
            env.number("TERMINAL_REQUEST_TIMEOUT_MS", 10_000, 1, 900_000)
                .unwrap_or(10_000) as u64,
        );
        if !several {
            let pattern = env
                .optional("TERMINAL_SLOT_ID_PATTERN")
                .unwrap_or_else(|| DEFAULT_ID_PATTERN.to_string());
            let max_chars = env
                .number(
                    "TERMINAL_SLOT_ID_MAX_CHARS",
                    DEFAULT_ID_MAX_CHARS as i64,
                    1,
                    MAX_EFFECT_ID_CHARS as i64,
                )
                .unwrap_or(DEFAULT_ID_MAX_CHARS as i64) as usize;
            match IdFormat::new(&pattern, max_chars) {
                Ok(format) => terminal.slot_id_format = format,
                Err(e) => env.problem("TERMINAL_SLOT_ID_PATTERN", e.to_string()),
            }
        }
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
        let margin_s = lambda.reconciler.retention_margin_ms / 1000;
        let mut terminal_policies = BTreeMap::new();
        let terminals = match &terminals_raw {
            Some(raw) => {
                let limits = TerminalLimits {
                    key_ttl_s: lambda.gate.key_ttl_s,
                    retention_margin_s: margin_s,
                };
                // Set but empty is a list too (the template's `!Join` of an empty
                // `TerminalTokenSecretArns`): the role may read no secret.
                let readable = env.raw("TERMINAL_TOKEN_SECRET_ARNS");
                match parse_terminals(raw, limits) {
                    Ok(specs) => {
                        check_readable_secrets(env, &specs, readable.as_deref());
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
            None => Vec::new(),
        };
        if several {
            known_terminals = terminals.iter().map(|t| t.code.clone()).collect();
            terminal_policies = policies(&terminals, margin_s * 1000);
            // What a record of a terminal no longer configured is held to: the shortest retention
            // (`SERVER_KEY_RETENTION_SECONDS` is refused next to `TERMINALS`).
            lambda.reconciler.key_retention_ms = terminals
                .iter()
                .filter_map(|t| t.key_retention_s)
                .min()
                .unwrap_or(86_400)
                * 1000;
        }
        Self {
            known_terminals,
            terminal,
            token_secret_arn,
            terminals,
            policies: terminal_policies,
        }
    }
}

/// With `TERMINAL_TOKEN_SECRET_ARNS` set, even empty (the template passes the secrets the role
/// may read, `""` for none): records a problem for every terminal whose `token_secret_arn` is not
/// among them, which would otherwise fail at cold start with an access denied.
fn check_readable_secrets(env: &Env<'_>, specs: &[TerminalSpec], readable: Option<&str>) {
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

#[cfg(test)]
mod tests;
