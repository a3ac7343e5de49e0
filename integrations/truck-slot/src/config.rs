// Over 600 lines: 374 of them are tests (from `#[cfg(test)]`); the configuration itself is 260.
//! The truck-slot integration's own configuration ([`TerminalConfig`]), read at cold start after
//! the gate's generic variables (`gate::lambda::config`: tables, manual queue, lease, TTL, key
//! retention and margin, concurrency, deadline margin, reconciler; every problem of both is
//! reported in one message, this integration's first). [`FunctionConfig`] is the whole.
//!
//! Past 600 lines only with its tests (about 330 lines: every variable's refusal, several
//! terminals, the documented messages word for word); the code is under 300.
//!
//! | variable | meaning | unit | default |
//! | --- | --- | --- | --- |
//! | `INTEGRATION_NAME` | (the gate's) its default here | | `ect-delta-slots` |
//! | `TERMINAL_BASE_URL` | terminal API base URL | | required |
//! | `TERMINAL_SUPPORTS_IDEMPOTENCY_KEY` | `true` or `false` | | `true` |
//! | `KNOWN_TERMINALS` | comma-separated terminal codes | | `ECT-DELTA` |
//! | `TERMINAL_CONNECT_TIMEOUT_MS` | connect timeout | milliseconds | `2000` |
//! | `TERMINAL_REQUEST_TIMEOUT_MS` | whole-request timeout; the gate's `DEADLINE_MARGIN_MS` is raised to at least this + `gate::lambda::COMMIT_ALLOWANCE_MS` (the reconciler: twice this + the allowance) | milliseconds | `10000` |
//! | `TERMINAL_API_TOKEN_SECRET_ARN` | ARN of the Secrets Manager secret holding the bearer token (the cloud) | | none |
//! | `TERMINAL_API_TOKEN` | bearer token, **local runs only**; refused together with the ARN | | none |
//! | `SERVER_KEY_RETENTION_SECONDS` | (the gate's) the terminal's key retention | seconds | `86400` |
//! | `TERMINALS` | several terminals: a JSON array, one object per terminal (`crate::terminal::several`); replaces `TERMINAL_BASE_URL`, `TERMINAL_API_TOKEN_SECRET_ARN`, `TERMINAL_API_TOKEN`, `TERMINAL_SUPPORTS_IDEMPOTENCY_KEY`, `KNOWN_TERMINALS` and `SERVER_KEY_RETENTION_SECONDS`, which are refused next to it | | none (one terminal) |
//! | `TERMINAL_TOKEN_SECRET_ARNS` | with `TERMINALS`: comma-separated ARNs of the secrets the function's role may read; every terminal's `token_secret_arn` must be one of them (set but empty: none may be read) | | unset (not checked) |

use std::collections::BTreeMap;
use std::time::Duration;

use gate::consumer::GateConfig;
use gate::lambda::{secret_arn_valid, Env, IntegrationConfig, LambdaConfig};

use crate::terminal::several::{
    parse_terminals, policies, TerminalLimits, TerminalPolicy, TerminalSpec,
};
use crate::terminal::{base_url_allowed, ApiToken, HttpTerminalConfig};

/// The functions' whole configuration: the gate's and the terminals'.
pub type FunctionConfig = gate::lambda::Config<TerminalConfig>;

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
mod tests {
    use super::*;
    use gate::lambda::fixed_env as env;

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
        assert_eq!(c.lambda.gate.key_ttl_s, 1_814_400);
        assert_eq!(c.integration.known_terminals, vec!["ECT-DELTA".to_string()]);
        assert!(c.lambda.gate.server_supports_idempotency_key);
        assert_eq!(
            c.integration.terminal.request_timeout,
            Duration::from_secs(10)
        );
        assert_eq!(c.lambda.reconciler.min_age_ms, 120_000);
        assert_eq!(c.lambda.reconciler.key_retention_ms, 86_400_000);
        assert_eq!(c.lambda.reconciler.retention_margin_ms, 3_600_000);
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
            ("SERVER_KEY_RETENTION_SECONDS", "600"),
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
            text.contains("RETENTION_MARGIN_SECONDS: 600 must be less than SERVER_KEY_RETENTION_SECONDS (600)"),
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
            c.integration.terminal.token.as_ref().map(|t| t.expose()),
            Some("tok-XYZZY-secret")
        );
        assert_eq!(c.integration.token_secret_arn, None);
    }

    /// A deadline margin shorter than a claim plus its commit is raised to fit one (the consumer)
    /// or a lookup, a claim and the commit (the reconciler); a longer one is kept.
    #[test]
    fn a_deadline_margin_shorter_than_a_claim_is_raised() {
        let mut slow = BASE.to_vec();
        slow.push(("TERMINAL_REQUEST_TIMEOUT_MS", "30000"));
        let c = FunctionConfig::from_env(env(&slow)).unwrap();
        assert_eq!(c.lambda.gate.deadline_margin_ms, 32_000);
        assert_eq!(c.for_reconciler().lambda.gate.deadline_margin_ms, 62_000);

        let defaults = FunctionConfig::from_env(env(BASE)).unwrap();
        assert_eq!(defaults.lambda.gate.deadline_margin_ms, 12_000);
        assert_eq!(
            defaults.for_reconciler().lambda.gate.deadline_margin_ms,
            22_000
        );

        let mut long = BASE.to_vec();
        long.push(("DEADLINE_MARGIN_MS", "40000"));
        let c = FunctionConfig::from_env(env(&long)).unwrap();
        assert_eq!(c.for_reconciler().lambda.gate.deadline_margin_ms, 40_000);
    }

    const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-delta/token-AbCdEf";

    #[test]
    fn the_token_comes_from_one_place_only() {
        let mut cloud = BASE.to_vec();
        cloud.push(("TERMINAL_API_TOKEN_SECRET_ARN", ARN));
        let c = FunctionConfig::from_env(env(&cloud)).unwrap();
        assert_eq!(c.integration.token_secret_arn.as_deref(), Some(ARN));
        assert!(
            c.integration.terminal.token.is_none(),
            "read at cold start, not here"
        );

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
        assert_eq!(
            c.integration.known_terminals,
            ["ECT-DELTA", "APMT-MV2", "RWG"]
        );
        assert_eq!(c.integration.terminals.len(), 3);
        assert!(c
            .integration
            .supports_idempotency_key(&c.lambda.gate, "ECT-DELTA"));
        assert!(c
            .integration
            .supports_idempotency_key(&c.lambda.gate, "APMT-MV2"));
        assert!(!c
            .integration
            .supports_idempotency_key(&c.lambda.gate, "RWG"));
        assert_eq!(
            c.integration.claim_horizon_for(&c.lambda.gate, "ECT-DELTA"),
            23 * 3_600_000
        );
        assert_eq!(
            c.integration.claim_horizon_for(&c.lambda.gate, "APMT-MV2"),
            47 * 3_600_000
        );
        assert_eq!(c.lambda.reconciler.key_retention_ms, 86_400_000);
        assert_eq!(c.integration.token_secret_arn, None);
        assert!(c.integration.terminal.base_url.is_empty());
        // One terminal (no TERMINALS): no per-terminal policy, the single settings apply.
        let one = FunctionConfig::from_env(env(BASE)).unwrap();
        assert!(one.integration.terminals.is_empty() && one.integration.policies.is_empty());
        assert!(one
            .integration
            .supports_idempotency_key(&one.lambda.gate, "ECT-DELTA"));
        assert_eq!(
            one.integration
                .claim_horizon_for(&one.lambda.gate, "ECT-DELTA"),
            23 * 3_600_000
        );
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
        // The integration's problems first, then the gate's (`gate::lambda::Config::from_env`).
        assert_eq!(err.variables(), ["TERMINALS", "KEY_TTL_SECONDS"]);
        assert_eq!(
            err.to_string(),
            "invalid configuration: 2 problems: TERMINALS: terminal \"APMT-MV2\": \
             key_retention_seconds: missing (required with key support); KEY_TTL_SECONDS: \
             \"14d\" is not an integer"
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
}
