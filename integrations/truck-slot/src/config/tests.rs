//! Tests of `config`.

use super::*;
use gate_lambda::fixed_env as env;

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
    assert_eq!(c.lambda.reconciler.min_age_ms, 0);
    assert_eq!(c.lambda.reconciler.sweep_interval_ms, 15_000);
    assert_eq!(c.lambda.gate.lease_floor_ms, 15_000);
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
        text.contains(
            "RETENTION_MARGIN_SECONDS: 600 must be less than SERVER_KEY_RETENTION_SECONDS (600)"
        ),
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
    // The integration's problems first, then the gate's (`gate_lambda::Config::from_env`).
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
    let doc = include_str!("../../../../docs/DEPLOYING.md");
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
