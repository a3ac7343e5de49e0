//! An adversarial review of the natural-key guard (the natural key held before the call, a second
//! event key for one subject and window to a person): each probe a scenario with its right value,
//! on the memory store, on DynamoDB (moto, through the fault proxy) and on PostgreSQL (through the
//! PostgreSQL proxy).
//!
//! Run with `scripts/with-postgres.sh scripts/with-moto.sh cargo test -p integration-tests --test
//! break_guard` (the memory cases need neither; the others fail without their backend).
//!
//! Every clock is a [`ManualClock`] at [`T0`]: nothing depends on today's date.

use std::sync::Arc;

use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{record_pk, IdempotencyRecord, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::{GuardOutcome, IdempotencyStore, Reservation};
use gate_postgres::{PostgresConfig, PostgresStore};
use gate_testkit::conformance::{sample_natural_key, sample_record, NOW_MS};
use gate_testkit::sqs_event;
use integration_tests::database_url;
use integration_tests::fault_proxy::{store_via, Fault, FaultProxy};
use integration_tests::field_cases::{terminal_core, LostAnswers, OffsetClock, T0};
use integration_tests::pg_proxy::PgProxy;
use integration_tests::{moto_endpoint, unique};
use sim::dst::CoreTerminal;
use sim::terminal::TerminalCore;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::SlotTerminal;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// The field faults' sample window, the day after [`T0`].
const W1: (&str, &str) = ("2027-06-01T08:00:00Z", "2027-06-01T10:00:00Z");
/// Another window of the same day (a re-planned notification).
const W2: (&str, &str) = ("2027-06-01T12:00:00Z", "2027-06-01T14:00:00Z");
/// The end of [`W1`], epoch ms.
const W1_END_MS: i64 = T0 + DAY_MS + 4 * HOUR_MS;
const CONTAINER: &str = "MWCU6059784";

/// A notification: `id`, the container [`CONTAINER`], `window`, gross mass `kg`.
fn body(id: &str, window: (&str, &str), kg: u32) -> String {
    format!(
        r#"{{"notificationId":"{id}","equipment_number":"{CONTAINER}","preferred_window":{{"start":"{}","end":"{}"}},"terminal":"ECT-DELTA","pin":"RLS-104233","gross_mass_kg":{kg}}}"#,
        window.0, window.1
    )
}

fn event_key(body: &str) -> String {
    let n = parse_notification(body, T0, &["ECT-DELTA".to_string()]).expect("body");
    truck_slot::derive_keys(&n).expect("keys").event_key
}

/// One gate over a store, a terminal simulator and a manual queue at a manual clock.
struct World {
    integration: String,
    store: Arc<dyn IdempotencyStore>,
    clock: Arc<ManualClock>,
    core: Arc<TerminalCore>,
    manual: Arc<MemoryManualQueue>,
    gate: Gate,
}

impl World {
    fn new(store: Arc<dyn IdempotencyStore>, integration: &str) -> Self {
        Self::with_config(store, GateConfig::new(integration))
    }

    fn with_config(store: Arc<dyn IdempotencyStore>, config: GateConfig) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let core = terminal_core(&clock);
        let manual = Arc::new(MemoryManualQueue::new());
        let gate = Self::gate_at(&store, &core, &manual, config.clone(), clock.clone());
        Self {
            integration: config.integration.clone(),
            store,
            clock,
            core,
            manual,
            gate,
        }
    }

    fn gate_at(
        store: &Arc<dyn IdempotencyStore>,
        core: &Arc<TerminalCore>,
        manual: &Arc<MemoryManualQueue>,
        config: GateConfig,
        clock: Arc<dyn Clock>,
    ) -> Gate {
        Gate {
            config,
            store: store.clone(),
            integration: Arc::new(truck_slot::TruckSlot::new(
                Arc::new(CoreTerminal::new(core.clone())),
                vec!["ECT-DELTA".into()],
            )),
            manual: manual.clone(),
            clock,
        }
    }

    fn invocation(&self, id: &str) -> Invocation {
        Invocation {
            request_id: id.into(),
            deadline_ms: self.clock.now_ms() + 60_000,
        }
    }

    async fn deliver(&self, id: &str, bodies: &[(&str, &str)]) -> Vec<RecordOutcome> {
        let report = self
            .gate
            .handle_batch(sqs_event(bodies), &self.invocation(id))
            .await;
        report.records.into_iter().map(|r| r.outcome).collect()
    }

    async fn record(&self, body: &str) -> IdempotencyRecord {
        self.store
            .get(&record_pk(&self.integration, &event_key(body)))
            .await
            .expect("get")
            .expect("record")
    }

    /// What a worker that dies right after its guard leaves: the record reserved under
    /// `owner` (its lease ending at [`T0`] + 30 s) and its natural key held, nothing called.
    async fn reserved_and_guarded(&self, body: &str, owner: &str) -> IdempotencyRecord {
        let now = self.clock.now_ms();
        let n = parse_notification(body, now, &["ECT-DELTA".to_string()]).expect("body");
        let event = truck_slot::event(&n).expect("event");
        let keys = truck_slot::derive_keys(&n).expect("keys");
        let inv = Invocation {
            request_id: owner.into(),
            deadline_ms: now + 30_000,
        };
        let mut record = self.gate.config.new_record(&event, &keys, &inv, now);
        record.lease_owner = Some(format!("{owner}#0"));
        record.lease_until_ms = Some(now + 30_000);
        assert_eq!(
            self.store.reserve(&record, now).await.expect("reserve"),
            Reservation::Reserved
        );
        let nk = self
            .gate
            .integration
            .natural_key(&record, now)
            .expect("a natural key");
        assert_eq!(
            self.store.guard(&record, &nk, now).await.expect("guard"),
            GuardOutcome::Held
        );
        record
    }

    fn slots(&self) -> usize {
        self.core.slots_issued()
    }
}

fn memory() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

fn is_committed(o: &RecordOutcome) -> bool {
    matches!(o, RecordOutcome::Committed { .. })
}

// ---- A write that lands and loses its answer --------------------------------------------

/// The guard's write landed, its answer was lost, the client sent it again: the retry meets
/// the event key's own guard and the event is claimed and committed at once (one slot, nobody
/// paged), on the memory store.
#[tokio::test]
async fn a_guard_whose_answer_was_lost_commits_at_once_on_memory() {
    let store = Arc::new(LostAnswers::new(
        memory(),
        &["reserve", "guard", "commit"],
        usize::MAX,
    ));
    let w = World::new(store.clone(), "bg-lost-mem");
    let a = body("PCS-BG-1", W1, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    assert_eq!(w.slots(), 1);
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
    assert_eq!(
        *store.retried.lock().unwrap(),
        ["reserve", "guard", "commit"]
    );
}

/// The same on DynamoDB (moto): the guard's `PutItem` (the second `PutItem` of a new event)
/// is applied and answered with a 500; the SDK retries it and meets its own item. The reserve
/// before it is forwarded with its JSON keys reordered (the same request: the proxy's only way
/// to let one request of an operation through and fault the next).
#[tokio::test]
async fn a_guard_whose_answer_was_lost_commits_at_once_on_dynamodb() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = store_via(&endpoint, "bg-lost-ddb").await;
    proxy.inject("PutItem", 1, Fault::ReorderMaps);
    proxy.inject("PutItem", 1, Fault::LoseAnswer);
    let w = World::new(Arc::new(store), &unique("bglost"));
    let a = body("PCS-BG-2", W1, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    assert_eq!(w.slots(), 1);
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
    assert_eq!(
        proxy.answers("PutItem"),
        [Ok(200), Err("InternalServerError".to_string()), Ok(200)],
        "reserve, the guard's lost answer, its retry"
    );
    assert_eq!(w.record(&a).await.status, RecordStatus::Committed);
}

/// A fresh, migrated PostgreSQL store for `case` reached through a [`PgProxy`].
async fn proxied_postgres(case: &str) -> (Arc<PgProxy>, PostgresStore) {
    let url = database_url();
    let rest = url.split_once('@').map_or(url.as_str(), |(_, r)| r);
    let upstream: std::net::SocketAddr = rest
        .split(['/', '?'])
        .next()
        .unwrap_or(rest)
        .parse()
        .expect("GATE_TEST_DATABASE_URL: postgresql://user@IP:PORT/..");
    let (proxy, addr) = PgProxy::start(upstream).await;
    let url = url.replacen(&upstream.to_string(), &addr.to_string(), 1);
    let schema = format!("bg_{case}_{}", std::process::id());
    let store = PostgresStore::with_config(&PostgresConfig::new(&url, 4).with_schema(schema))
        .expect("store");
    store.migrate().await.expect("migrate");
    (proxy, store)
}

/// On PostgreSQL the guard's statement commits and its answer is lost (the connection closed
/// after `ReadyForQuery`); the store's retry meets its own row: `Held`. Another event key for
/// the same natural key still collides with it.
#[tokio::test]
async fn a_guard_whose_answer_was_lost_is_held_on_postgres() {
    let (proxy, store) = proxied_postgres("lost_guard").await;
    let first = sample_record("bg", "pg-first", "owner-1", NOW_MS);
    let second = sample_record("bg", "pg-second", "owner-2", NOW_MS);
    for r in [&first, &second] {
        assert_eq!(
            store.reserve(r, NOW_MS).await.expect("reserve"),
            Reservation::Reserved
        );
    }
    proxy.cut_after_answer_to(&first.event_key);
    let nk = sample_natural_key(&first, NOW_MS);
    assert_eq!(
        store.guard(&first, &nk, NOW_MS).await.expect("guard"),
        GuardOutcome::Held
    );
    assert_eq!(proxy.cuts(), 1, "the guard's answer was not cut");
    assert_eq!(
        store
            .guard(&second, &sample_natural_key(&second, NOW_MS), NOW_MS + 1)
            .await
            .expect("guard"),
        GuardOutcome::Collision {
            other_event_key: first.event_key.clone()
        }
    );
}

// ---- Crashes between the guard, the call and the commit ----------------------------------

/// A worker died right after its guard (nothing called). Its redelivery, after the lease ends,
/// takes the record over, meets its own guard and claims: one slot, committed, nobody paged.
#[tokio::test]
async fn a_crash_after_the_guard_is_finished_by_the_redelivery() {
    let w = World::new(memory(), "bg-crash-redeliver");
    let a = body("PCS-BG-3", W1, 25_000);
    w.reserved_and_guarded(&a, "inv-dead").await;
    w.clock.advance_ms(60_000);
    let out = w.deliver("inv-2", &[("m2", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    assert_eq!(w.slots(), 1);
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
}

/// The same crash, finished by the reconciler (its clock 45 s ahead of the worker's): it
/// meets the event key's own guard, claims and commits.
#[tokio::test]
async fn a_crash_after_the_guard_is_finished_by_the_reconciler() {
    let store = memory();
    let w = World::new(store.clone(), "bg-crash-reconcile");
    let a = body("PCS-BG-4", W1, 25_000);
    w.reserved_and_guarded(&a, "inv-dead").await;
    w.clock.advance_ms(150_000);
    let reconciler = World::gate_at(
        &w.store,
        &w.core,
        &w.manual,
        GateConfig::new(&w.integration),
        Arc::new(OffsetClock {
            base: w.clock.clone(),
            offset_ms: 45_000,
        }),
    );
    let report = reconciler
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &w.invocation("rec-1"),
        )
        .await;
    assert_eq!((report.reconciled, report.manual), (1, 0), "{report:?}");
    assert_eq!(w.slots(), 1);
    assert_eq!(w.record(&a).await.status, RecordStatus::Committed);
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
}

/// A worker died after its call, before its commit: the reconciler re-sends under the same key,
/// meets its own guard, gets the server's replay and commits that slot: one slot in all.
#[tokio::test]
async fn a_crash_between_the_call_and_the_commit_is_committed_by_the_reconciler() {
    let store = memory();
    let w = World::new(store.clone(), "bg-crash-call");
    let a = body("PCS-BG-5", W1, 25_000);
    let record = w.reserved_and_guarded(&a, "inv-dead").await;
    let first = CoreTerminal::new(w.core.clone())
        .claim(&record.op_key, &record.request)
        .await;
    assert!(
        matches!(first, truck_slot::terminal::CallOutcome::Done(_)),
        "{first:?}"
    );
    let slot = w.core.slots()[0].effect_id.clone();
    w.clock.advance_ms(150_000);
    let report = w
        .gate
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &w.invocation("rec-1"),
        )
        .await;
    assert_eq!((report.reconciled, report.manual), (1, 0), "{report:?}");
    assert_eq!(w.slots(), 1, "the re-send got the server's replay");
    let stored = w.record(&a).await;
    assert_eq!(stored.status, RecordStatus::Committed);
    assert_eq!(stored.effect_id, Some(slot));
}

// ---- A holder that lost its lease ------------------------------------------------------------

/// A stale holder (its lease taken over, its record committed by the redelivery) writes its
/// guard again: it changes nothing a person or another event key sees. The natural key stays
/// the first event key's, so another event key for it still goes to a person, uncalled.
#[tokio::test]
async fn a_stale_holders_guard_changes_nothing() {
    let w = World::new(memory(), "bg-stale");
    let a = body("PCS-BG-6", W1, 25_000);
    let stale = w.reserved_and_guarded(&a, "inv-stale").await;
    w.clock.advance_ms(60_000);
    let out = w.deliver("inv-2", &[("m2", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    let now = w.clock.now_ms();
    let nk = w.gate.integration.natural_key(&stale, now).expect("nk");
    assert_eq!(
        w.store.guard(&stale, &nk, now).await.expect("guard"),
        GuardOutcome::Held
    );
    assert_eq!(w.record(&a).await.status, RecordStatus::Committed);
    let b = body("PCS-BG-6-COPY", W1, 25_000);
    let out = w.deliver("inv-3", &[("m3", &b)]).await;
    assert_eq!(
        out,
        [RecordOutcome::Manual(ManualReason::NaturalKeyCollision)]
    );
    assert_eq!(w.slots(), 1);
}

// ---- Two event keys at once; a re-planned notification ----------------------------------

async fn two_at_once(store: Arc<dyn IdempotencyStore>, integration: &str) {
    let mut config = GateConfig::new(integration);
    config.max_concurrency = 10;
    let w = World::with_config(store, config);
    let a = body("PCS-BG-7", W1, 25_000);
    let b = body("PCS-BG-7-COPY", W1, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a), ("m2", &b)]).await;
    let committed = out.iter().filter(|o| is_committed(o)).count();
    let collided = out
        .iter()
        .filter(|o| **o == RecordOutcome::Manual(ManualReason::NaturalKeyCollision))
        .count();
    assert_eq!((committed, collided), (1, 1), "{out:?}");
    assert_eq!(w.slots(), 1, "two event keys, one natural key: one slot");
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    let (ka, kb) = (event_key(&a), event_key(&b));
    let loser = items[0].event_key.clone().expect("event key");
    let winner = if loser == ka { &kb } else { &ka };
    assert!(loser == ka || loser == kb);
    assert!(items[0].detail.contains(winner.as_str()), "{items:?}");
}

/// Two event keys for one container and window in one batch, handled concurrently: exactly one
/// claims, the other goes to a person naming both event keys (memory store).
#[tokio::test]
async fn two_event_keys_for_one_natural_key_at_once_on_memory() {
    two_at_once(memory(), "bg-two-mem").await;
}

/// The same on DynamoDB (moto).
#[tokio::test]
async fn two_event_keys_for_one_natural_key_at_once_on_dynamodb() {
    let (_proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    two_at_once(
        Arc::new(store_via(&endpoint, "bg-two-ddb").await),
        &unique("bgtwo"),
    )
    .await;
}

/// A re-planned notification (a new notificationId for another window of the same container)
/// is another natural key: it claims as before. Two slots, nobody paged.
#[tokio::test]
async fn a_replanned_notification_claims() {
    let w = World::new(memory(), "bg-replan");
    let a = body("PCS-BG-8", W1, 25_000);
    let c = body("PCS-BG-8-REPLAN", W2, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    let out = w.deliver("inv-2", &[("m2", &c)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    assert_eq!(w.slots(), 2);
    assert!(w.manual.items().is_empty());
}

// ---- A mismatch and a poison body ------------------------------------------------------------

/// A mismatch (the same notificationId and container, re-planned to another window: the same
/// event key with another fingerprint) goes to a person and does not take the other window's
/// natural key; a poison body takes nothing either. Then a new event key for that other window
/// claims, and a copy of the first event under a new id still collides with the first.
#[tokio::test]
async fn a_mismatch_and_a_poison_body_leave_the_guard_alone() {
    let w = World::new(memory(), "bg-mismatch");
    let a = body("PCS-BG-9", W1, 25_000);
    let a_moved = body("PCS-BG-9", W2, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    let out = w
        .deliver("inv-2", &[("m2", &a_moved), ("m3", "{not json")])
        .await;
    assert_eq!(out[0], RecordOutcome::Mismatch, "{out:?}");
    assert!(matches!(out[1], RecordOutcome::Rejected(_)), "{out:?}");
    let reasons: Vec<ManualReason> = w.manual.items().iter().map(|i| i.reason).collect();
    assert!(
        !reasons.contains(&ManualReason::NaturalKeyCollision),
        "{reasons:?}"
    );
    // The other window is free: a new event key for it claims.
    let c = body("PCS-BG-9-W2", W2, 25_000);
    let out = w.deliver("inv-3", &[("m4", &c)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    // The first window is still the first event key's.
    let b = body("PCS-BG-9-COPY", W1, 25_000);
    let out = w.deliver("inv-4", &[("m5", &b)]).await;
    assert_eq!(
        out,
        [RecordOutcome::Manual(ManualReason::NaturalKeyCollision)]
    );
    assert_eq!(w.slots(), 2);
}

// ---- The manual item of a collision ----------------------------------------------------------

/// A collision reaches a person exactly once however often its message comes back (at once and
/// after its lease would have ended): one item, reason `natural_key_collision`, the colliding
/// event key, the holder's event key in its text, and the body exactly as received.
#[tokio::test]
async fn a_collision_reaches_a_person_once_with_both_keys_and_its_body() {
    let w = World::new(memory(), "bg-once");
    let a = body("PCS-BG-10", W1, 25_000);
    let b = body("PCS-BG-10-COPY", W1, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    let out = w.deliver("inv-2", &[("m2", &b)]).await;
    assert_eq!(
        out,
        [RecordOutcome::Manual(ManualReason::NaturalKeyCollision)]
    );
    let again = w.deliver("inv-3", &[("m2", &b)]).await;
    w.clock.advance_ms(10 * 60_000);
    let later = w.deliver("inv-4", &[("m2", &b)]).await;
    for o in again.iter().chain(&later) {
        assert_eq!(*o, RecordOutcome::Duplicate(RecordStatus::Manual));
    }
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    let item = &items[0];
    assert_eq!(item.reason, ManualReason::NaturalKeyCollision);
    assert_eq!(item.event_key.as_deref(), Some(event_key(&b).as_str()));
    assert!(item.detail.contains(&event_key(&a)), "{}", item.detail);
    assert_eq!(item.original_body, b);
    assert_eq!(w.slots(), 1);
    let stored = w.record(&b).await;
    assert_eq!(stored.status, RecordStatus::Manual);
    assert!(stored.effect_ids.is_empty(), "the copy was called");
}

#[path = "break_guard/two_guards.rs"]
mod two_guards;

#[path = "break_guard/lifetimes.rs"]
mod lifetimes;
