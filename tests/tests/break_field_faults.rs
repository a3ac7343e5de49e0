//! Regressions from an adversarial review of the field faults (a write that lands and loses its
//! answer, a record that outlives its event) and of what the gate keeps of a server's answer: each
//! finding ("FINDING", fixed in the gate since) as a test asserting the right value, and the probes
//! that held ("PROBE"). Slots for another container are in module `foreign_slots`, lost answers on
//! DynamoDB in module `lost_answers`.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests --test break_field_faults`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Invocation, RecordOutcome};
use gate::manual::{ManualQueue, ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::RecordStatus;
use gate::store::memory::MemoryStore;
use gate::store::{CommitOutcome, Reservation, Store};
use gate_testkit::{FaultRates, FaultyStore};
use integration_tests::fault_proxy::{store_via, FaultProxy};
use integration_tests::field_cases::{gate, T0};
use integration_tests::{moto_endpoint, sqs_event, unique};
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::{AnswerDetail, CallOutcome, Effect, LookupOutcome, SlotTerminal};

const HOUR_MS: i64 = 3_600_000;
const OURS: &str = "MWCU6059784";
const FOREIGN: &str = "CSQU3054383";

fn body(id: &str) -> String {
    serde_json::json!({
        "notificationId": id,
        "equipment_number": OURS,
        "preferred_window": {"start": "2027-06-01T08:00:00Z", "end": "2027-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233"
    })
    .to_string()
}

/// A terminal that answers every claim with `claim` and every lookup with `lookup`.
struct Scripted {
    claim: CallOutcome,
    lookup: LookupOutcome,
    claims: AtomicUsize,
}

#[async_trait]
impl SlotTerminal for Scripted {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.claim.clone()
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        self.lookup.clone()
    }
}

/// FINDING (low; debug builds, i.e. tests, `cargo lambda watch` and local runs). A number whose
/// exponent is near `i64::MIN` and whose mantissa has a fraction, e.g. `1.5e-9223372036854775808`:
/// `ijson::decimal` computes `exponent - frac_len` with an `i64` subtraction that overflows and
/// panics (the whole batch fails, every copy is retried until the dead-letter queue). In release
/// builds the subtraction wraps. Right: `number_not_exact` (it underflows to 0), routed once.
#[tokio::test]
async fn huge_negative_exponent_is_rejected_not_a_panic() {
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        Arc::new(MemoryStore::new()),
        "exp-mem",
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        manual.clone(),
        clock,
    );
    let b = body("PCS-EXP-1").replace(
        "\"terminal\"",
        "\"gross_mass_kg\":1.5e-9223372036854775808,\"terminal\"",
    );
    let handled = tokio::spawn(async move {
        g.handle_batch(
            sqs_event(&[("m-exp", &b)]),
            &Invocation {
                request_id: "inv-exp".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await
    })
    .await;
    let report = handled.expect("the batch handler panicked");
    assert!(
        matches!(
            report.records[0].outcome,
            RecordOutcome::Rejected(ref r) if r.code == "number_not_exact"
        ),
        "{:?}",
        report.records[0].outcome
    );
}

/// FINDING (low-medium). "A window that has ended is never claimed" (gate.rs, step 2) holds only
/// for a body whose event has no record. A redelivery after the window's end that meets the
/// event's stranded `in_flight` record (its worker died before its claim reached the terminal)
/// takes it over and goes to `claim_and_commit`, which sends a fresh claim for a window that has
/// ended (the reconciler does the same for a stranded record once the window is past). Right:
/// after the window's end nothing is claimed; the slot is only looked up (found: commit; not
/// found: a person gets `window_ended`).
#[tokio::test]
async fn ended_window_is_never_claimed_on_take_over() {
    let window_end = 1_811_843_200_000_i64; // 2027-06-01T10:00:00Z
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(window_end - HOUR_MS));
    let manual = Arc::new(MemoryManualQueue::new());
    let terminal = Arc::new(Scripted {
        claim: CallOutcome::Done(Effect {
            effect_id: "S-LATE".into(),
            subject: Some(OURS.into()),
        }),
        lookup: LookupOutcome::NotFound,
        claims: AtomicUsize::new(0),
    });
    let g = gate(
        store.clone(),
        "ended-mem",
        terminal.clone(),
        manual.clone(),
        clock.clone(),
    );
    let b = body("PCS-ENDED-1");
    let created = clock.now_ms();
    let n = parse_notification(&b, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let stranded = g.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &Invocation {
            request_id: "inv-dead#0".into(),
            deadline_ms: created + 30_000,
        },
        created,
    );
    assert_eq!(
        store.reserve(&stranded, created).await.expect("reserve"),
        Reservation::Reserved
    );
    // The redelivery arrives 2 h later: the window ended an hour ago.
    clock.advance_ms(2 * HOUR_MS);
    let report = g
        .handle_batch(
            sqs_event(&[("m-late", &b)]),
            &Invocation {
                request_id: "inv-late".into(),
                deadline_ms: clock.now_ms() + 60_000,
            },
        )
        .await;
    assert_eq!(
        terminal.claims.load(Ordering::SeqCst),
        0,
        "a claim was sent for a window that ended an hour ago: {:?}",
        report.records[0].outcome
    );
}

/// A manual queue that refuses every send while `down` is set.
struct FlakyQueue {
    inner: Arc<MemoryManualQueue>,
    down: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl ManualQueue for FlakyQueue {
    async fn send(
        &self,
        item: gate::manual::ManualItem,
    ) -> Result<(), gate::manual::ManualQueueError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(gate::manual::ManualQueueError(
                "injected: queue down".into(),
            ));
        }
        self.inner.send(item).await
    }
}

/// FINDING (low). A routing whose send is not confirmed (`route_pending`) whose TTL has passed
/// is skipped by the reconciler (`Step::Expired`, no log line of its own) on every run until
/// DynamoDB's TTL deletes it: the manual item (a poison body here, with its PIN) is lost without
/// a trace. The take-over does not extend `expires_at` either. Right: a record with work left
/// is finished (sent) whatever its TTL says, and its lifetime extended while it has work.
#[tokio::test]
async fn expired_pending_routing_is_still_sent() {
    let day = 24 * HOUR_MS;
    let clock = Arc::new(ManualClock::new(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let items = Arc::new(MemoryManualQueue::new());
    let queue = Arc::new(FlakyQueue {
        inner: items.clone(),
        down: true.into(),
    });
    let g = gate(
        store.clone(),
        "expired-route",
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        queue.clone(),
        clock.clone(),
    );
    let poison = r#"{"notificationId":"PCS-POISON-2","pin":"RLS-104233"}"#;
    let report = g
        .handle_batch(
            sqs_event(&[("m-poison-2", poison)]),
            &Invocation {
                request_id: "inv-p".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    assert!(matches!(report.records[0].outcome, RecordOutcome::Retry(_)));
    // The queue stays down past the routing record's lifetime (the message went to the
    // dead-letter queue long ago); then it heals and the reconciler runs.
    clock.advance_ms(22 * day);
    queue.down.store(false, Ordering::SeqCst);
    let run = g
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &Invocation {
                request_id: "rec-late".into(),
                deadline_ms: clock.now_ms() + 120_000,
            },
        )
        .await;
    assert_eq!(
        items.items().len(),
        1,
        "the pending routing was skipped as expired: {run:?}"
    );
}

/// FINDING (low): forms of the PIN a server may echo, checked with `truck_slot::terminal::scrub` (which decides
/// what reaches a record's `error` and a manual item's `detail`; logs never quote answers). Hex
/// and base64 are searched only for the secret as sent, not in another case nor with its
/// separators dropped, though docs/SECURITY.md says "any case, separators dropped or changed"; an
/// HTML page's `&nbsp;` or a tag inside the PIN hides it too. Each form missed is listed.
#[test]
fn scrub_finds_more_echo_forms() {
    let forms: &[(&str, &str)] = &[
        ("hex_lower_pin", r#"70696e2d78797a7a792d37373331"#),
        ("hex_no_sep", r#"50494e58595a5a5937373331"#),
        ("b64_lower", r#"cGluLXh5enp5LTc3MzE="#),
        ("nbsp", r#"PIN&nbsp;XYZZY&nbsp;7731"#),
        ("html_tag", r#"PIN-<b>XYZZY</b>-7731"#),
        (
            "hex_spaced_upper",
            r#"50 49 4E 2D 58 59 5A 5A 59 2D 37 37 33 31"#,
        ),
        ("dotted_hex", r#"50.49.4e.2d.58.59.5a.5a.59.2d.37.37.33.31"#),
        (
            "css_escape",
            r#"\50 \49 \4e \2d \58 \59 \5a \5a \59 \2d \37 \37 \33 \31 "#,
        ),
        (
            "uri_double",
            r#"%2550%2549%254E%252D%2558%2559%255A%255A%2559%252D%2537%2537%2533%2531"#,
        ),
        ("json_in_b64", r#"eyJwaW4iOiJQSU4tWFlaWlktNzczMSJ9"#),
        ("b64_no_sep", r#"UElOWFlaWlk3NzMx"#),
    ];
    let missed: Vec<&str> = forms
        .iter()
        .filter(|(_, text)| !truck_slot::terminal::scrub::quotes_secret(text, &["PIN-XYZZY-7731"]))
        .map(|(name, _)| *name)
        .collect();
    assert!(
        missed.is_empty(),
        "forms of PIN-XYZZY-7731 not found: {missed:?}"
    );
}

#[path = "break_field_faults/foreign_slots.rs"]
mod foreign_slots;

#[path = "break_field_faults/lost_answers.rs"]
mod lost_answers;
