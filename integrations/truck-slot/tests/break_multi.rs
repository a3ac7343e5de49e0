//! Adversarial review of several terminals in one stack: regressions of the
//! findings (each fixed), and the attacks that found nothing, kept so they stay that way.
//!
//! * `TERMINALS` naming a field twice in one terminal object was read as the last value
//!   (`serde_json::Value` keeps the last): now refused, naming the terminal and the field.
//! * A token pasted where the secret's ARN belongs was quoted in the cold-start error (a log
//!   line): now described, not quoted (`TERMINALS` and `TERMINAL_API_TOKEN_SECRET_ARN`).
//! * A `base_url` with white space (a trailing space from a copy) passed the check, since the
//!   URL parser strips it, and the client then sent every claim to `/api%20/slots`: refused.
//! * An `appointments-v2` answer naming a field twice was read as its last value, where a `slots`
//!   answer doing so is refused: now refused alike (transient, retried with the same key).
//! * `TERMINAL_TOKEN_SECRET_ARNS` set but empty (what the template passes when
//!   `TerminalTokenSecretArns` is left empty) skipped the check, so a terminal naming a secret
//!   failed later on an access denied: now every named secret is refused, naming the terminal.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gate::clock::ManualClock;
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::MemoryManualQueue;
use gate::store::memory::MemoryStore;
use gate_testkit::sqs_event;
use serde_json::json;
use support::{raw, spawn};
use truck_slot::config::FunctionConfig;
use truck_slot::terminal::several::{parse_terminals, TerminalApi, TerminalLimits, TerminalRouter};
use truck_slot::terminal::{
    ApiToken, CallOutcome, Effect, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal,
};

const LIMITS: TerminalLimits = TerminalLimits {
    key_ttl_s: 1_814_400,
    retention_margin_s: 3_600,
};
const PIN: &str = "PIN-XYZZY-7731";
const TOKEN: &str = "tok-PLUGH-0042";
const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-delta/token-AbCdEf";

/// One keyed terminal `A` with `base_url`, the other fields valid, plus `extra` fields.
fn one(base_url: &str, extra: &[(&str, serde_json::Value)]) -> serde_json::Value {
    let mut t = json!({"code": "A", "supports_idempotency_key": true, "base_url": base_url,
        "key_retention_seconds": 86_400, "max_concurrent_calls": 2});
    for (k, v) in extra {
        t[*k] = v.clone();
    }
    t
}

#[test]
fn a_field_named_twice_in_a_terminal_is_refused() {
    let twice = r#"[{"code": "A", "supports_idempotency_key": true,
        "base_url": "https://a.example", "key_retention_seconds": 86400,
        "max_concurrent_calls": 2, "base_url": "https://b.example"}]"#;
    assert_eq!(
        parse_terminals(twice, LIMITS).unwrap_err(),
        ["terminal \"A\": base_url: given twice (which value counts would be ambiguous)"]
    );
    // The code itself twice: the terminal is named by its position.
    let code_twice = r#"[{"code": "RWG", "supports_idempotency_key": false},
        {"code": "A", "supports_idempotency_key": false, "code": "B"}]"#;
    assert_eq!(
        parse_terminals(code_twice, LIMITS).unwrap_err(),
        ["terminal #2: code: given twice (which value counts would be ambiguous)"]
    );
}

#[test]
fn a_token_pasted_as_the_secret_arn_is_never_quoted() {
    let raw = json!([one(
        "https://a.example",
        &[("token_secret_arn", json!(TOKEN))]
    )]);
    let problems = parse_terminals(&raw.to_string(), LIMITS).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .starts_with("terminal \"A\": token_secret_arn: not a Secrets Manager secret ARN"),
        "{problems:?}"
    );
    assert!(!problems[0].contains("PLUGH"), "{problems:?}");
    // The single-terminal variable alike.
    let err = FunctionConfig::from_env(env(&[
        ("TERMINAL_BASE_URL", "https://slots.example"),
        ("TERMINAL_API_TOKEN_SECRET_ARN", TOKEN),
    ]))
    .unwrap_err();
    assert_eq!(err.variables(), ["TERMINAL_API_TOKEN_SECRET_ARN"]);
    assert!(!err.to_string().contains("PLUGH"), "{err}");
}

#[test]
fn a_base_url_with_white_space_is_refused() {
    for url in [
        "https://a.example/api ",
        " https://a.example/api",
        "https://a.example/a\tpi",
        "https://a.example/api\n",
        "https://a.example/api\u{a0}",
    ] {
        let raw = json!([one(url, &[])]).to_string();
        let problems = parse_terminals(&raw, LIMITS).unwrap_err();
        assert_eq!(problems.len(), 1, "{url:?}: {problems:?}");
        assert!(
            problems[0].starts_with("terminal \"A\": base_url: must be https://"),
            "{url:?}: {problems:?}"
        );
        let err = FunctionConfig::from_env(env(&[("TERMINAL_BASE_URL", url)])).unwrap_err();
        assert_eq!(err.variables(), ["TERMINAL_BASE_URL"], "{url:?}");
    }
    // A path, and trailing slashes, are fine.
    let raw = json!([one("https://a.example/api//", &[])]).to_string();
    let specs = parse_terminals(&raw, LIMITS).unwrap();
    assert_eq!(specs[0].base_url.as_deref(), Some("https://a.example/api"));
}

fn request() -> Vec<u8> {
    json!({"equipment_number": "CSQU3054383", "window_start": "2026-12-01T08:00:00Z",
           "window_end": "2026-12-01T10:00:00Z", "pin": PIN})
    .to_string()
    .into_bytes()
}

fn v2(base_url: &str) -> HttpTerminal {
    let mut config = HttpTerminalConfig::new(base_url);
    config.token = Some(ApiToken::new(TOKEN));
    config.api = TerminalApi::AppointmentsV2;
    HttpTerminal::new(config).unwrap()
}

/// `{"appointment": {"id": "A-1", "id": "A-2"}}` is two answers in one: which slot was made is
/// not known, so nothing is committed (transient, as a `slots` answer naming `slot_id` twice).
#[tokio::test]
async fn an_appointments_v2_answer_naming_a_field_twice_is_no_slot() {
    for (status, body) in [
        (
            201,
            r#"{"appointment": {"id": "A-1", "id": "A-2", "container": {"number": "CSQU3054383"}}}"#,
        ),
        (
            201,
            r#"{"appointment": {"id": "A-1"}, "appointment": {"id": "A-2"}}"#,
        ),
        (200, r#"{"appointment": {"id": "A-1", "id": "A-2"}}"#),
    ] {
        let terminal = spawn(move |_| raw(status, body)).await;
        let client = v2(&terminal.base_url);
        if status == 201 {
            let outcome = client.claim("key-1", &request()).await;
            assert!(
                matches!(outcome, CallOutcome::Transient(_)),
                "{body}: {outcome:?}"
            );
        } else {
            let outcome = client.lookup("key-1", &request()).await;
            assert!(
                matches!(outcome, LookupOutcome::Transient(_)),
                "{body}: {outcome:?}"
            );
        }
    }
    // A single id is the slot.
    let terminal = spawn(|_| raw(201, r#"{"appointment": {"id": "A-1"}}"#)).await;
    let outcome = v2(&terminal.base_url).claim("key-1", &request()).await;
    assert!(
        matches!(&outcome, CallOutcome::Done(Effect { effect_id: slot_id, .. }) if slot_id == "A-1"),
        "{outcome:?}"
    );
}

/// The function's variables: the tables, the queue and `extra`.
fn env(extra: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let mut vars: Vec<(String, String)> = [
        ("IDEMPOTENCY_TABLE", "idem"),
        ("BOOKINGS_TABLE", "book"),
        (
            "MANUAL_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/1/manual",
        ),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    vars.reverse();
    move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

/// The template passes `TERMINAL_TOKEN_SECRET_ARNS` as `!Join [",", ...]`: empty when
/// `TerminalTokenSecretArns` is left empty. The role may then read no secret, so a terminal that
/// names one cannot start; the error says so at once, naming the terminal.
#[test]
fn an_empty_list_of_readable_secrets_refuses_every_named_secret() {
    let terminals = json!([one("https://a.example", &[("token_secret_arn", json!(ARN))]),
        {"code": "RWG", "supports_idempotency_key": false}])
    .to_string();
    let err = FunctionConfig::from_env(env(&[
        ("TERMINALS", &terminals),
        ("TERMINAL_TOKEN_SECRET_ARNS", ""),
    ]))
    .unwrap_err();
    assert_eq!(err.variables(), ["TERMINALS"], "{err}");
    assert!(
        err.to_string()
            .contains("terminal \"A\": token_secret_arn: \"arn:aws:secretsmanager:"),
        "{err}"
    );
    // Unset (a local run): not checked. Naming no secret: nothing to check.
    assert!(FunctionConfig::from_env(env(&[("TERMINALS", &terminals)])).is_ok());
    let tokenless = json!([one("https://a.example", &[])]).to_string();
    assert!(FunctionConfig::from_env(env(&[
        ("TERMINALS", &tokenless),
        ("TERMINAL_TOKEN_SECRET_ARNS", ""),
    ]))
    .is_ok());
}

/// A terminal that never answers, limited to one call at once, holds back no record of another
/// terminal: its own records end transient within the request timeout (nothing committed, retried
/// later with the same key), the other terminal's record commits in the same batch.
#[tokio::test]
async fn a_hung_terminal_holds_back_no_other_terminal() {
    struct Terminal {
        hangs: bool,
    }
    #[async_trait]
    impl SlotTerminal for Terminal {
        async fn claim(&self, op_key: &str, _request: &[u8]) -> CallOutcome {
            if self.hangs {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
            }
            CallOutcome::Done(Effect {
                effect_id: format!("S-{}", &op_key[..8]),
                subject: None,
            })
        }
        async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
            LookupOutcome::NotFound
        }
    }
    const T0: i64 = 1_780_293_600_000; // 2026-06-01T06:00:00Z, before every window here.
    let router = TerminalRouter::new(Duration::from_millis(200))
        .with("A", Arc::new(Terminal { hangs: true }), 1)
        .with("B", Arc::new(Terminal { hangs: false }), 1);
    let gate = Gate {
        config: GateConfig::new("x"),
        store: Arc::new(MemoryStore::new()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(router),
            vec!["A".into(), "B".into()],
        )),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: Arc::new(ManualClock::new(T0)),
    };
    let containers = ["CSQU3054383", "MSCU1234566", "TGHU9876542"];
    let bodies: Vec<(String, String)> = (0..9)
        .map(|i| {
            let body = json!({"notificationId": format!("N-{i}"),
                "equipment_number": containers[i % 3], "terminal": if i < 8 { "A" } else { "B" },
                "pin": PIN, "preferred_window":
                    // A window of its own: one container's notifications in one window would
                    // be one event under two keys (the natural-key guard sends the second to a
                    // person), which this test is not about.
                    {"start": format!("2026-06-05T{:02}:00:00Z", 8 + i),
                     "end": format!("2026-06-05T{:02}:00:00Z", 9 + i)}});
            (format!("m-{i}"), body.to_string())
        })
        .collect();
    let records: Vec<(&str, &str)> = bodies
        .iter()
        .map(|(m, b)| (m.as_str(), b.as_str()))
        .collect();
    let invocation = Invocation {
        request_id: "inv-1".into(),
        deadline_ms: T0 + 60_000,
    };
    let report = gate.handle_batch(sqs_event(&records), &invocation).await;
    let outcomes: Vec<&RecordOutcome> = report.records.iter().map(|r| &r.outcome).collect();
    assert!(
        outcomes[..8]
            .iter()
            .all(|o| matches!(o, RecordOutcome::Retry(_))),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[8], RecordOutcome::Committed { .. }),
        "{outcomes:?}"
    );
}

/// Two terminals naming one token secret at two hosts would send one party's token to the other:
/// refused, naming the second terminal and the first. At one host (one operator's API serving two
/// terminal codes) it is fine, and a terminal without key support is never called.
#[test]
fn one_token_secret_for_terminals_at_two_hosts_is_refused() {
    let at = |code: &str, base_url: &str| {
        let mut t = one(base_url, &[("token_secret_arn", json!(ARN))]);
        t["code"] = json!(code);
        t
    };
    let two_hosts = json!([
        at("A", "https://a.example/api"),
        at("B", "https://b.example")
    ]);
    assert_eq!(
        parse_terminals(&two_hosts.to_string(), LIMITS).unwrap_err(),
        [
            "terminal \"B\": token_secret_arn: also terminal \"A\"'s, whose base_url is another \
          host: a token is sent only to the host it is for (give each its own secret)"
        ]
    );
    let one_host = json!([
        at("A", "https://a.example/v1"),
        at("B", "https://a.example/v2")
    ]);
    assert_eq!(
        parse_terminals(&one_host.to_string(), LIMITS)
            .unwrap()
            .len(),
        2
    );
    let keyless = json!([at("A", "https://a.example"),
        {"code": "B", "supports_idempotency_key": false, "token_secret_arn": ARN}]);
    assert_eq!(
        parse_terminals(&keyless.to_string(), LIMITS).unwrap().len(),
        2
    );
}

/// A terminal removed from `TERMINALS` while its records are in flight (or committed): a
/// redelivered notification for it was rejected as `unknown_terminal`, a manual item that says
/// nothing of the slot that may exist (or does) under the key, and the reconciler later routed
/// the same event again past the retention: two items for one event, a second slot by hand. Now
/// a notification whose event has a record keeps the record's course: a committed one is a
/// duplicate, an `in_flight` one is never claimed (no client) and goes to a person once, by the
/// reconciler. A notification without a record is rejected as before.
#[tokio::test]
async fn a_removed_terminal_s_records_go_to_a_person_once() {
    use gate::clock::Clock;
    use gate::manual::ManualReason;
    use gate::reconciler::ReconcilerConfig;
    use truck_slot::terminal::several::TerminalPolicy;

    /// Claims answer transient (an answer lost) or commit, as `lost` says.
    struct Terminal {
        lost: bool,
    }
    #[async_trait]
    impl SlotTerminal for Terminal {
        async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
            if self.lost {
                return CallOutcome::Transient("answer lost".into());
            }
            CallOutcome::Done(Effect {
                effect_id: "X-1".into(),
                subject: None,
            })
        }
        async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
            LookupOutcome::NotFound
        }
    }
    const T0: i64 = 1_780_293_600_000; // 2026-06-01T06:00:00Z, before every window here.
    const HOUR: i64 = 3_600_000;
    let body = |id: &str| {
        json!({"notificationId": id, "equipment_number": "CSQU3054383", "terminal": "X",
            "pin": PIN, "preferred_window":
                {"start": "2026-06-05T08:00:00Z", "end": "2026-06-05T10:00:00Z"}})
        .to_string()
    };
    for lost in [true, false] {
        let store = Arc::new(MemoryStore::new());
        let manual = Arc::new(MemoryManualQueue::new());
        let clock = Arc::new(ManualClock::new(T0));
        let gate_at = |codes: &[&str]| {
            let mut router = TerminalRouter::new(Duration::from_secs(1));
            let config = GateConfig::new("x");
            let mut policies = std::collections::BTreeMap::new();
            for code in codes {
                router = router.with(*code, Arc::new(Terminal { lost }), 1);
                let policy = TerminalPolicy {
                    supports_idempotency_key: true,
                    claim_horizon_ms: 23 * HOUR,
                };
                policies.insert(code.to_string(), policy);
            }
            Gate {
                config,
                store: store.clone(),
                integration: Arc::new(
                    truck_slot::TruckSlot::new(
                        Arc::new(router),
                        codes.iter().map(|c| c.to_string()).collect(),
                    )
                    .with_policies(policies),
                ),
                manual: manual.clone(),
                clock: clock.clone(),
            }
        };
        let deliver = |gate: Gate, message_id: &'static str, body: String, n: u32| {
            let invocation = Invocation {
                request_id: format!("inv-{n}"),
                deadline_ms: clock.now_ms() + 60_000,
            };
            async move {
                let report = gate
                    .handle_batch(sqs_event(&[(message_id, &body)]), &invocation)
                    .await;
                report.records[0].outcome.clone()
            }
        };
        let first = deliver(gate_at(&["X", "Y"]), "m-1", body("N-1"), 1).await;
        assert_eq!(matches!(first, RecordOutcome::Retry(_)), lost, "{first:?}");
        // X leaves the configuration; SQS delivers the notification again.
        clock.advance_ms(60_000);
        let again = deliver(gate_at(&["Y"]), "m-1", body("N-1"), 2).await;
        if lost {
            assert!(matches!(again, RecordOutcome::Retry(_)), "{again:?}");
            clock.advance_ms(30 * HOUR);
            let invocation = Invocation {
                request_id: "reconciler".into(),
                deadline_ms: clock.now_ms() + 60_000,
            };
            let report = gate_at(&["Y"])
                .reconcile(store.as_ref(), &ReconcilerConfig::default(), &invocation)
                .await;
            assert_eq!(report.manual, 1, "{report:?}");
            let items = manual.items();
            assert_eq!(items.len(), 1, "{items:?}");
            assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
        } else {
            assert!(matches!(again, RecordOutcome::Duplicate(_)), "{again:?}");
            assert!(manual.items().is_empty(), "{:?}", manual.items());
        }
        // Another notification for X has no record: rejected as before.
        let other = deliver(gate_at(&["Y"]), "m-2", body("N-2"), 3).await;
        assert!(
            matches!(&other, RecordOutcome::Rejected(r) if r.code() == "unknown_terminal"),
            "{other:?}"
        );
    }
}
