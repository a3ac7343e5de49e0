//! Regressions from an adversarial review of issues 11 and 13: each finding ("FINDING", fixed in
//! the gate since; the text says what went wrong before the fix) as a test asserting the right
//! value, and the probes that held ("PROBE").
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests --test break_11_13`.

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

/// FINDING (high). A claim answered with a slot for another container: `settle_claim` adds that
/// slot id to the record's `effect_ids` (unfenced, before its fenced `finish`). When the finish
/// does not land (a store error, or the lease was lost), the record stays `in_flight` holding a
/// foreign slot id. Past the claim horizon, the reconciler's routing to a person
/// (`FinishGuard::LeaseAndNoEffect`) is refused because a slot id is recorded, and
/// `after_refused_finish` commits the first recorded slot id: the foreign slot is booked for our
/// container in the TMS, and no person is told.
///
/// Right: a slot issued for another container is never committed for ours; the record ends
/// `failed`/`manual` with an item in the manual queue.
async fn foreign_slot_case(store: Arc<dyn Store>, integration: &str) {
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let b = body("PCS-FOREIGN-1");
    let created = T0 - (23 * HOUR_MS - 5 * 60_000);
    let n = parse_notification(&b, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");

    // 1. A stranded record (its worker died before claiming), 22 h 55 min old.
    let consumer_terminal = Arc::new(Scripted {
        claim: CallOutcome::Done(Effect {
            effect_id: "S-FOREIGN".into(),
            subject: Some(FOREIGN.into()),
        }),
        lookup: LookupOutcome::NotFound,
        claims: AtomicUsize::new(0),
    });
    // Its first finish fails without writing (a throttled or unreachable store after the SDK's
    // retries).
    let failing = Arc::new(FaultyStore::new(store.clone(), 0, FaultRates::NONE, "inv-"));
    failing.fail_finishes(1);
    let consumer = gate(
        failing,
        integration,
        consumer_terminal.clone(),
        manual.clone(),
        clock.clone(),
    );
    let stranded = consumer.config.new_record(
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

    // 2. A redelivery takes it over and claims; the terminal answers a slot for another
    //    container; the finish that would route it to a person fails (store unavailable).
    let report = consumer
        .handle_batch(
            sqs_event(&[("m-1", &b)]),
            &Invocation {
                request_id: "inv-1".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Retry(_)),
        "{:?}",
        report.records[0].outcome
    );

    // 3. Ten minutes later (past the 23 h claim horizon) the reconciler runs; the terminal's
    //    lookup endpoint fails.
    clock.advance_ms(10 * 60_000);
    let reconciler = gate(
        store.clone(),
        integration,
        Arc::new(Scripted {
            claim: CallOutcome::Transient(AnswerDetail::new("unused")),
            lookup: LookupOutcome::Transient(AnswerDetail::new("lookup answered 503")),
            claims: AtomicUsize::new(0),
        }),
        manual.clone(),
        clock.clone(),
    );
    let run = reconciler
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &Invocation {
                request_id: "rec-1".into(),
                deadline_ms: clock.now_ms() + 120_000,
            },
        )
        .await;
    assert_eq!(run.examined, 1, "{run:?}");

    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    let booking = store
        .business_row(&record.event_key)
        .await
        .expect("booking");
    assert_eq!(
        booking.as_ref().map(|b| b.effect_id.as_str()),
        None,
        "a slot issued for {FOREIGN} was booked for {OURS}; record {:?} slot {:?}, manual {:?}",
        record.status,
        record.effect_id,
        manual.items().iter().map(|i| i.reason).collect::<Vec<_>>()
    );
    assert_ne!(record.status, RecordStatus::Committed);
    assert!(
        !manual.items().is_empty(),
        "nobody was told about the foreign slot"
    );
}

#[tokio::test]
async fn foreign_slot_is_never_committed_on_memory() {
    foreign_slot_case(Arc::new(MemoryStore::new()), "foreign-mem").await;
}

#[tokio::test]
async fn foreign_slot_is_never_committed_on_dynamodb() {
    let store = integration_tests::fresh_store("foreign").await;
    foreign_slot_case(Arc::new(store), &unique("foreign")).await;
}

/// FINDING (medium). A record whose `effect_ids` already holds a slot id recorded by a holder that
/// lost its lease (`record_effect_id`, the `LeaseLost` path) and is then committed by the new
/// holder with another slot id holds two distinct slot ids. The memory store counts it in
/// `multi_effect_keys` (1); `DynamoStore::commit` adds to `effect_ids` but never sets `multi_effect`,
/// so on DynamoDB the distinct-slot signal reads 0: the terminal issued two slots for one key and
/// the alarm meant for exactly that stays silent.
async fn two_slots_counted(store: Arc<dyn Store>, integration: &str) {
    let clock = Arc::new(ManualClock::new(T0));
    let g = gate(
        store.clone(),
        integration,
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        Arc::new(MemoryManualQueue::new()),
        clock.clone(),
    );
    let b = body("PCS-TWO-SLOTS");
    let n = parse_notification(&b, T0, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let holder = Invocation {
        request_id: "inv-b#0".into(),
        deadline_ms: T0 + 60_000,
    };
    let record = g
        .config
        .new_record(&truck_slot::event(&n).expect("event"), &keys, &holder, T0);
    assert_eq!(
        store.reserve(&record, T0).await.expect("reserve"),
        Reservation::Reserved
    );
    // The old holder's claim came back with S-1 after its lease was taken over by inv-b#0: its
    // commit was refused and it recorded S-1 (what `commit_effect` does on `LeaseLost`).
    let after = store
        .record_effect_id(&record.pk, "S-1", T0 + 1)
        .await
        .expect("record_effect_id")
        .expect("record");
    assert_eq!(after.status, RecordStatus::InFlight);
    // The holder's own claim returned S-2 (a terminal that ignored the key): it commits S-2.
    let booking = gate::record::BusinessRow::for_record(&record, "S-2", T0 + 2);
    assert_eq!(
        store
            .commit(&record.pk, "inv-b#0", "S-2", &booking, T0 + 2,)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    let now = store.get(&record.pk).await.expect("get").expect("record");
    assert_eq!(now.effect_ids.len(), 2, "{:?}", now.effect_ids);
    assert_eq!(
        store.multi_effect_keys().await.expect("multi_effect_keys"),
        1,
        "a key with two distinct slot ids must be counted by the distinct-slot signal"
    );
}

#[tokio::test]
async fn two_slot_ids_are_counted_on_memory() {
    two_slots_counted(Arc::new(MemoryStore::new()), "two-mem").await;
}

#[tokio::test]
async fn two_slot_ids_are_counted_on_dynamodb() {
    let store = integration_tests::fresh_store("two").await;
    two_slots_counted(Arc::new(store), &unique("two")).await;
}

/// PROBE (held): a redelivery takes over a stranded record; the take-over `UpdateItem` lands and
/// its answer is held 4 s (past the 3 s attempt timeout). Right: the retry meets its own lease,
/// the record is claimed and committed in this invocation, nothing left `in_flight`.
#[tokio::test]
async fn lost_take_over_answer_on_dynamodb() {
    let (proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "UpdateItem", 1, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "losttk").await);
    let integration = unique("losttk");
    let clock = Arc::new(ManualClock::new(T0));
    let terminal = Arc::new(Scripted {
        claim: CallOutcome::Done(Effect {
            effect_id: "S-7".into(),
            subject: Some(OURS.into()),
        }),
        lookup: LookupOutcome::NotFound,
        claims: AtomicUsize::new(0),
    });
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        store.clone(),
        &integration,
        terminal.clone(),
        manual.clone(),
        clock.clone(),
    );
    let b = body("PCS-TAKE-1");
    let created = T0 - 10 * 60_000;
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
    let report = g
        .handle_batch(
            sqs_event(&[("m-take", &b)]),
            &Invocation {
                request_id: "inv-2".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    let ops: Vec<String> = proxy.seen();
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Committed {
            effect_id: "S-7".into(),
        },
        "{ops:?}"
    );
    assert_eq!(terminal.claims.load(Ordering::SeqCst), 1);
    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Committed);
    assert!(manual.items().is_empty());
}

/// PROBE (held): a terminal without key support: the record is marked `manual` first (`finish`,
/// the first `UpdateItem`), and that answer is held 4 s. Right: the retry recognises its own
/// mark, one item in the manual queue, the routing confirmed (no `route_pending`, no request).
#[tokio::test]
async fn lost_finish_answer_on_dynamodb() {
    let (proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "UpdateItem", 1, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "lostfin").await);
    let integration = unique("lostfin");
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let mut g = gate(
        store.clone(),
        &integration,
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        manual.clone(),
        clock.clone(),
    );
    g.config.server_supports_idempotency_key = false;
    let b = body("PCS-FIN-1");
    let report = g
        .handle_batch(
            sqs_event(&[("m-fin", &b)]),
            &Invocation {
                request_id: "inv-3".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    let ops = proxy.seen();
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::NoIdempotencySupport),
        "{ops:?}"
    );
    assert_eq!(manual.items().len(), 1);
    let n = parse_notification(&b, T0, &["ECT-DELTA".to_string()]).expect("body");
    let pk = gate::record::record_pk(&integration, &derive_keys(&n).expect("keys").event_key);
    let record = store.get(&pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Manual);
    assert!(!record.route_pending, "routing left pending: {record:?}");
    assert!(record.request.is_empty());
}

/// PROBE (held): a poison body's routing record: its reserve `PutItem` (born `manual`, routing
/// pending) lands and the answer is held 4 s. Right: one item, routing confirmed, `Rejected`.
#[tokio::test]
async fn lost_poison_routing_answer_on_dynamodb() {
    let (_proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "PutItem", 1, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "lostpoi").await);
    let integration = unique("lostpoi");
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        store.clone(),
        &integration,
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        manual.clone(),
        clock.clone(),
    );
    let poison = r#"{"notificationId":"PCS-POISON","equipment_number":"MWCU6059785"}"#;
    let report = g
        .handle_batch(
            sqs_event(&[("m-poison", poison)]),
            &Invocation {
                request_id: "inv-4".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Rejected(_)),
        "{:?}",
        report.records[0].outcome
    );
    assert_eq!(manual.items().len(), 1);
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

/// The consumer's terminal for the race variant: its claim waits for `land`, then answers a slot
/// for another container.
struct PausedForeignClaim {
    land: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl SlotTerminal for PausedForeignClaim {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        self.land.notified().await;
        CallOutcome::Done(Effect {
            effect_id: "S-FOREIGN".into(),
            subject: Some(FOREIGN.into()),
        })
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// The reconciler's terminal for the race variant: its lookup finds nothing, but first lets the
/// consumer's paused claim land and waits until the consumer is done.
struct LookupLetsClaimLand {
    land: Arc<tokio::sync::Notify>,
    consumer_done: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl SlotTerminal for LookupLetsClaimLand {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::KeyInFlight
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        self.land.notify_one();
        self.consumer_done.notified().await;
        LookupOutcome::NotFound
    }
}

/// FINDING (high), the same as [`foreign_slot_case`] with no store fault: issue 11's input 2
/// (record 23 h - 30 s old, a redelivery takes it over and claims, the reconciler's clock 45 s
/// ahead routes it past the horizon) where the terminal answers the paused claim with a slot for
/// another container. The consumer records the foreign slot id (unfenced), its `failed` mark is
/// refused (lease lost); the reconciler's routing is refused by the no-slot guard and it commits
/// the foreign slot. Right: nothing booked under a foreign slot; a person gets the record.
async fn foreign_slot_race(store: Arc<dyn Store>, integration: &str) {
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let land = Arc::new(tokio::sync::Notify::new());
    let consumer_done = Arc::new(tokio::sync::Notify::new());
    let b = body("PCS-FOREIGN-2");
    let created = T0 - (23 * HOUR_MS - 30_000);
    let n = parse_notification(&b, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let consumer = gate(
        store.clone(),
        integration,
        Arc::new(PausedForeignClaim { land: land.clone() }),
        manual.clone(),
        clock.clone(),
    );
    let stranded = consumer.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &Invocation {
            request_id: "inv-0#0".into(),
            deadline_ms: created + 30_000,
        },
        created,
    );
    assert_eq!(
        store.reserve(&stranded, created).await.expect("reserve"),
        Reservation::Reserved
    );
    let task = {
        let done = consumer_done.clone();
        let b = b.clone();
        tokio::spawn(async move {
            let r = consumer
                .handle_batch(
                    sqs_event(&[("m-race", &b)]),
                    &Invocation {
                        request_id: "inv-1".into(),
                        deadline_ms: T0 + 30_000,
                    },
                )
                .await;
            done.notify_one();
            r
        })
    };
    while store
        .get(&stranded.pk)
        .await
        .expect("get")
        .and_then(|r| r.lease_owner)
        .as_deref()
        != Some("inv-1#0")
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reconciler = gate(
        store.clone(),
        integration,
        Arc::new(LookupLetsClaimLand {
            land,
            consumer_done,
        }),
        manual.clone(),
        Arc::new(integration_tests::field_cases::OffsetClock {
            base: clock.clone(),
            offset_ms: 45_000,
        }),
    );
    let run = reconciler
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &Invocation {
                request_id: "rec-1".into(),
                deadline_ms: T0 + 165_000,
            },
        )
        .await;
    let consumer_report = task.await.expect("consumer");
    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    let booking = store
        .business_row(&record.event_key)
        .await
        .expect("booking");
    assert_eq!(
        booking.map(|b| b.effect_id),
        None,
        "foreign slot booked: record {:?} {:?}, consumer {:?}, run {run:?}, manual {:?}",
        record.status,
        record.effect_id,
        consumer_report.records[0].outcome,
        manual.items().iter().map(|i| i.reason).collect::<Vec<_>>()
    );
    assert!(!manual.items().is_empty());
}

#[tokio::test]
async fn foreign_slot_race_on_memory() {
    foreign_slot_race(Arc::new(MemoryStore::new()), "race-mem").await;
}

#[tokio::test]
async fn foreign_slot_race_on_dynamodb() {
    let store = integration_tests::fresh_store("race").await;
    foreign_slot_race(Arc::new(store), &unique("race")).await;
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

/// PROBE (held): a redelivery of a record past the claim horizon (lookup finds nothing): its
/// take-over and its `manual` mark (the first two `UpdateItem`s) both land and lose their
/// answers. Right: one `past_key_retention` item, the record `manual` and confirmed, no claim.
#[tokio::test]
async fn lost_answers_on_past_retention_routing_on_dynamodb() {
    let (proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "UpdateItem", 2, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "lostpr").await);
    let integration = unique("lostpr");
    let clock = Arc::new(ManualClock::new(T0));
    let terminal = Arc::new(Scripted {
        claim: CallOutcome::KeyInFlight,
        lookup: LookupOutcome::NotFound,
        claims: AtomicUsize::new(0),
    });
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        store.clone(),
        &integration,
        terminal.clone(),
        manual.clone(),
        clock.clone(),
    );
    let b = body("PCS-PAST-1");
    let created = T0 - 23 * HOUR_MS - 60_000;
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
    let report = g
        .handle_batch(
            sqs_event(&[("m-past", &b)]),
            &Invocation {
                request_id: "inv-5".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    let ops = proxy.seen();
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::PastKeyRetention),
        "{ops:?}"
    );
    assert_eq!(terminal.claims.load(Ordering::SeqCst), 0);
    assert_eq!(manual.items().len(), 1);
    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Manual);
    assert!(!record.route_pending);
    assert!(record.request.is_empty());
}
