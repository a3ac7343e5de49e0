//! Several terminals in one stack, through the consumer and the reconciler with the real
//! [`TerminalRouter`]: each record goes to the terminal its notification names, a terminal
//! without key support goes to a person once and is never called, and each terminal's key
//! retention decides alone whether a record resumed late is claimed again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::store::memory::MemoryStore;
use gate_testkit::sqs_event;
use truck_slot::terminal::several::{TerminalPolicy, TerminalRouter};
use truck_slot::terminal::{CallOutcome, Effect, LookupOutcome, SlotTerminal};
use truck_slot::TruckSlot;

/// 2026-06-01T06:00:00Z; every window here is on 2026-06-05, after every clock used.
const T0: i64 = 1_780_293_600_000;
const HOUR: i64 = 3_600_000;

/// One terminal's client: answers claims from a script (then slots `{code}-{n}`), lookups
/// `NotFound`, and records every call.
struct Scripted {
    code: &'static str,
    claims: Mutex<Vec<CallOutcome>>,
    calls: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl SlotTerminal for Scripted {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        let mut calls = self.calls.lock().unwrap();
        calls.push(format!("claim {}", self.code));
        let n = calls.len();
        drop(calls);
        let scripted = self.claims.lock().unwrap().pop();
        scripted.unwrap_or_else(|| {
            CallOutcome::Done(Effect {
                effect_id: format!("{}-{n}", self.code),
                subject: None,
            })
        })
    }

    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        self.calls
            .lock()
            .unwrap()
            .push(format!("lookup {}", self.code));
        LookupOutcome::NotFound
    }
}

struct World {
    gate: Gate,
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    manual: Arc<MemoryManualQueue>,
    calls: Arc<Mutex<Vec<String>>>,
}

/// ECT Delta (keys, 24 h retention) and APMT (keys, 48 h), each failing its first claim with
/// `first_claims` (if given); RWG without key support. Retention margin 1 h.
fn world(first_claims: Option<CallOutcome>) -> World {
    let clock = Arc::new(ManualClock::new(T0));
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let client = |code| {
        Arc::new(Scripted {
            code,
            claims: Mutex::new(first_claims.clone().into_iter().collect()),
            calls: calls.clone(),
        })
    };
    let router = TerminalRouter::new(Duration::from_secs(10))
        .with("ECT-DELTA", client("ECT-DELTA"), 4)
        .with("APMT-MV2", client("APMT-MV2"), 1);
    let mut config = GateConfig::new("several");
    let keyed = |retention_h: i64| TerminalPolicy {
        supports_idempotency_key: true,
        claim_horizon_ms: (retention_h - 1) * HOUR,
    };
    let policies = BTreeMap::from([
        ("ECT-DELTA".to_string(), keyed(24)),
        ("APMT-MV2".to_string(), keyed(48)),
        (
            "RWG".to_string(),
            TerminalPolicy {
                supports_idempotency_key: false,
                claim_horizon_ms: 0,
            },
        ),
    ]);
    config.claim_horizon_ms = 23 * HOUR;
    let manual = Arc::new(MemoryManualQueue::new());
    let store = Arc::new(MemoryStore::new());
    World {
        store: store.clone(),
        gate: Gate {
            config,
            store,
            integration: Arc::new(
                TruckSlot::new(
                    Arc::new(router),
                    vec!["ECT-DELTA".into(), "APMT-MV2".into(), "RWG".into()],
                )
                .with_policies(policies),
            ),
            manual: manual.clone(),
            clock: clock.clone(),
        },
        clock,
        manual,
        calls,
    }
}

fn body(id: &str, container: &str, terminal: &str) -> String {
    serde_json::json!({
        "notificationId": id,
        "equipment_number": container,
        "preferred_window": {"start": "2026-06-05T08:00:00Z", "end": "2026-06-05T12:00:00Z"},
        "terminal": terminal,
        "pin": "4711",
    })
    .to_string()
}

impl World {
    async fn deliver(&self, records: &[(&str, &str)], n: u32) -> Vec<RecordOutcome> {
        let invocation = Invocation {
            request_id: format!("inv-{n}"),
            deadline_ms: self.clock.now_ms() + 60_000,
        };
        let report = self
            .gate
            .handle_batch(sqs_event(records), &invocation)
            .await;
        report.records.into_iter().map(|r| r.outcome).collect()
    }

    fn calls(&self) -> Vec<String> {
        let mut calls = self.calls.lock().unwrap().clone();
        calls.sort();
        calls
    }
}

/// One batch for three terminals: each keyed terminal gets its own claim and commits its own
/// slot; RWG's notification goes to the manual queue with `no_idempotency_support`, once, also
/// when delivered again, and RWG is never called. A fourth terminal is rejected as before.
#[tokio::test]
async fn each_record_goes_to_its_own_terminal_and_the_keyless_one_to_a_person_once() {
    let w = world(None);
    let (ect, apmt, rwg) = (
        body("N-1", "CSQU3054383", "ECT-DELTA"),
        body("N-2", "MSCU1234566", "APMT-MV2"),
        body("N-3", "TGHU9876542", "RWG"),
    );
    let outcomes = w
        .deliver(&[("m-1", &ect), ("m-2", &apmt), ("m-3", &rwg)], 1)
        .await;
    // The two claims run concurrently, so which one is the terminals' call 1 is not fixed.
    let committed_at = |o: &RecordOutcome| match o {
        RecordOutcome::Committed {
            effect_id: slot_id, ..
        } => slot_id.rsplit_once('-').map(|(t, _)| t.to_string()),
        _ => None,
    };
    assert_eq!(
        committed_at(&outcomes[0]).as_deref(),
        Some("ECT-DELTA"),
        "{outcomes:?}"
    );
    assert_eq!(
        committed_at(&outcomes[1]).as_deref(),
        Some("APMT-MV2"),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes[2],
        RecordOutcome::Manual(ManualReason::NoIdempotencySupport)
    );
    assert_eq!(w.calls(), ["claim APMT-MV2", "claim ECT-DELTA"]);
    let again = w.deliver(&[("m-4", &rwg)], 2).await;
    assert!(
        matches!(again[..], [RecordOutcome::Duplicate(_)]),
        "{again:?}"
    );
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].reason, ManualReason::NoIdempotencySupport);
    assert_eq!(items[0].original_body, rwg);
    // A terminal the stack does not book at: rejected, nothing called.
    let other = body("N-5", "CSQU3054383", "EUROMAX");
    let rejected = w.deliver(&[("m-5", &other)], 3).await;
    assert!(
        matches!(&rejected[..], [RecordOutcome::Rejected(r)] if r.code() == "unknown_terminal"),
        "{rejected:?}"
    );
    assert_eq!(w.calls().len(), 2);
}

/// Two records stranded `in_flight` for 30 h (their first claims failed transiently): past ECT
/// Delta's horizon (24 h retention - 1 h), so its record is only looked up and then handed to a
/// person; inside APMT's (48 h - 1 h), so its record is claimed again with the same key and
/// committed. The consumer and the reconciler decide alike.
#[tokio::test]
async fn each_terminal_s_key_retention_decides_alone() {
    for by_reconciler in [false, true] {
        let w = world(Some(CallOutcome::Transient("503".into())));
        let (ect, apmt) = (
            body("N-1", "CSQU3054383", "ECT-DELTA"),
            body("N-2", "MSCU1234566", "APMT-MV2"),
        );
        let first = w.deliver(&[("m-1", &ect), ("m-2", &apmt)], 1).await;
        assert!(
            first.iter().all(|o| matches!(o, RecordOutcome::Retry(_))),
            "{first:?}"
        );
        w.clock.advance_ms(30 * HOUR);
        w.calls.lock().unwrap().clear();
        let outcomes = if by_reconciler {
            let invocation = Invocation {
                request_id: "reconciler-1".into(),
                deadline_ms: w.clock.now_ms() + 60_000,
            };
            let report = w
                .gate
                .reconcile(w.store.as_ref(), &ReconcilerConfig::default(), &invocation)
                .await;
            assert_eq!((report.reconciled, report.manual), (1, 1), "{report:?}");
            Vec::new()
        } else {
            w.deliver(&[("m-3", &ect), ("m-4", &apmt)], 2).await
        };
        if !by_reconciler {
            assert_eq!(
                outcomes[0],
                RecordOutcome::Manual(ManualReason::PastKeyRetention)
            );
            assert!(
                matches!(&outcomes[1], RecordOutcome::Committed { effect_id: slot_id, .. } if slot_id.starts_with("APMT-MV2")),
                "{outcomes:?}"
            );
        }
        // One decision for both (`gate::decision`): inside its horizon a record is re-sent under
        // its key (the terminal's replay is the lookup); only the one past its horizon is looked up.
        assert_eq!(w.calls(), ["claim APMT-MV2", "lookup ECT-DELTA"]);
        let items = w.manual.items();
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
    }
}
