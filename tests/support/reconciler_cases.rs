//! The reconciler's cases, written once over any `IdempotencyStore`, run on the memory store and
//! on DynamoDB (moto) so the two cannot drift. Each case uses the terminal simulator over HTTP.

use std::sync::Arc;

use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{IdempotencyRecord, RecordStatus};
use gate::store::{Reservation, Store};
use serde_json::json;
use sim::terminal::{self, TerminalConfig, TerminalCore};
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::{CallOutcome, HttpTerminal, HttpTerminalConfig};

/// 2026-06-01T06:00:00Z.
pub const T0: i64 = 1_780_293_600_000;

/// A world around one store: the gate, the terminal simulator, the manual queue, the clock.
pub struct World {
    /// The gate (consumer and reconciler share it, as the two functions share the tables).
    pub gate: Gate,
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// The manual queue.
    pub manual: Arc<MemoryManualQueue>,
    /// Simulated time.
    pub clock: Arc<ManualClock>,
    /// The terminal simulator.
    pub core: Arc<TerminalCore>,
    /// Record key prefix, unique per test.
    pub integration: String,
}

impl World {
    /// A world over `store`, records prefixed with `integration`.
    pub async fn new(store: Arc<dyn Store>, integration: &str) -> Self {
        Self::with_terminal(store, integration, TerminalConfig::default()).await
    }

    /// As [`World::new`] with a configured terminal simulator.
    pub async fn with_terminal(
        store: Arc<dyn Store>,
        integration: &str,
        terminal_config: TerminalConfig,
    ) -> Self {
        let clock = Arc::new(ManualClock::new(T0));
        let core = TerminalCore::new(terminal_config, clock.clone() as Arc<dyn Clock>);
        let (addr, _server) = terminal::spawn(core.clone())
            .await
            .expect("terminal simulator");
        let http = HttpTerminal::new(HttpTerminalConfig::new(format!("http://{addr}")))
            .expect("http client");
        let manual = Arc::new(MemoryManualQueue::new());
        let gate = Gate {
            config: GateConfig::new(integration),
            store: store.clone(),
            integration: Arc::new(truck_slot::TruckSlot::new(
                Arc::new(http),
                vec!["ECT-DELTA".into()],
            )),
            manual: manual.clone(),
            clock: clock.clone(),
        };
        Self {
            gate,
            store,
            manual,
            clock,
            core,
            integration: integration.to_string(),
        }
    }

    /// A notification body for `id` and `container`, window on 2026-06-01 08:00-10:00Z.
    pub fn body(id: &str, container: &str) -> String {
        json!({
            "notificationId": id,
            "equipment_number": container,
            "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
            "terminal": "ECT-DELTA",
            "pin": "RLS-104233"
        })
        .to_string()
    }

    /// Reserves `body` as a worker `owner` whose invocation ends at `deadline_ms` would.
    pub async fn strand(&self, body: &str, owner: &str, deadline_ms: i64) -> IdempotencyRecord {
        let now = self.clock.now_ms();
        let n = parse_notification(body, now, &["ECT-DELTA".to_string()]).expect("body");
        let keys = derive_keys(&n).expect("keys");
        let inv = Invocation {
            request_id: owner.into(),
            deadline_ms,
        };
        let record =
            self.gate
                .config
                .new_record(&truck_slot::event(&n).expect("event"), &keys, &inv, now);
        assert_eq!(
            self.store.reserve(&record, now).await.expect("reserve"),
            Reservation::Reserved
        );
        record
    }

    /// A reconciler invocation at the current time with a 60 s deadline.
    pub fn reconciler_invocation(&self, id: &str) -> Invocation {
        Invocation {
            request_id: id.into(),
            deadline_ms: self.clock.now_ms() + 60_000,
        }
    }

    /// The reconciler's configuration for these cases (defaults: 120 s minimum age, 24 h
    /// retention, 1 h margin).
    pub fn reconciler_config() -> ReconcilerConfig {
        ReconcilerConfig::default()
    }
}

/// Stranded after the claim, inside the claim horizon: the reconciler re-sends the stored request
/// under the same key and the terminal replays its first answer (the replay is the lookup);
/// committed with that same slot, no second slot.
pub async fn stranded_after_claim_is_answered_by_the_replay(w: &World) {
    let body = World::body("R-1", "CSQU3054383");
    let record = w.strand(&body, "inv-dead", T0 + 30_000).await;
    let CallOutcome::Done(slot) = w
        .gate
        .integration
        .call(&gate::Held::for_tests(&record))
        .await
    else {
        panic!("claim failed")
    };
    w.clock.advance_ms(180_000);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-1"),
        )
        .await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(report.found_by_lookup, 0, "re-sent, not looked up");
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_id.as_deref(), Some(slot.effect_id.as_str()));
    let booking = w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(booking.effect_id, slot.effect_id);
    assert_eq!(w.core.slots_issued(), 1);
}

/// Stranded after the claim, found past the claim horizon: never claimed again; the lookup
/// finds the slot under the key and it is committed.
pub async fn stranded_after_claim_past_the_horizon_is_found_by_lookup(w: &World) {
    let body = World::body("R-6", "MWCU6059784");
    let record = w.strand(&body, "inv-dead", T0 + 30_000).await;
    let CallOutcome::Done(slot) = w
        .gate
        .integration
        .call(&gate::Held::for_tests(&record))
        .await
    else {
        panic!("claim failed")
    };
    w.clock.advance_ms(23 * 3_600_000 + 1);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-1"),
        )
        .await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(report.found_by_lookup, 1);
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_id.as_deref(), Some(slot.effect_id.as_str()));
    assert_eq!(w.core.slots_issued(), 1);
}

/// Stranded before the claim: no slot under the key; claimed once with the same key.
pub async fn stranded_before_claim_is_claimed_once_with_the_same_key(w: &World) {
    let body = World::body("R-2", "MWCU6059784");
    let record = w.strand(&body, "inv-dead", T0 + 30_000).await;
    w.clock.advance_ms(180_000);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-1"),
        )
        .await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(report.found_by_lookup, 0);
    let slots = w.core.slots();
    assert_eq!(slots.len(), 1);
    assert_eq!(
        slots[0].idempotency_key.as_deref(),
        Some(record.op_key.as_str())
    );
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(
        after.effect_id.as_deref(),
        Some(slots[0].effect_id.as_str())
    );
    // A second run finds nothing to do.
    w.clock.advance_ms(60_000);
    let again = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-2"),
        )
        .await;
    assert_eq!(again.examined, 0);
    assert_eq!(w.core.slots_issued(), 1);
}

/// The reconciler racing a slow consumer (its redelivery): one slot, one booking.
pub async fn racing_a_slow_consumer_makes_one_slot_and_one_booking(w: &World) {
    let body = World::body("R-3", "ABCD1234560");
    let record = w.strand(&body, "inv-dead", T0 + 30_000).await;
    w.clock.advance_ms(180_000);
    let consumer_inv = Invocation {
        request_id: "inv-redelivery".into(),
        deadline_ms: w.clock.now_ms() + 30_000,
    };
    let rec_inv = w.reconciler_invocation("rec-1");
    let config = World::reconciler_config();
    let (batch, report) = tokio::join!(
        w.gate
            .handle_batch(crate::sqs_event(&[("m-1", &body)]), &consumer_inv),
        w.gate.reconcile(w.store.as_ref(), &config, &rec_inv)
    );
    assert!(batch.response.batch_item_failures.is_empty());
    let consumer_committed = matches!(batch.records[0].outcome, RecordOutcome::Committed { .. });
    assert_eq!(
        usize::from(consumer_committed) + report.reconciled,
        1,
        "exactly one of them commits: {:?} / {report:?}",
        batch.records[0].outcome
    );
    assert_eq!(w.core.slots_issued(), 1);
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_ids.len(), 1);
    assert!(w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .is_some());
}

/// Past the terminal's key retention (minus the margin): never claimed, routed to manual.
pub async fn past_retention_is_routed_to_manual_without_a_claim(w: &World) {
    let body = World::body("R-4", "CSQU3054383");
    let record = w.strand(&body, "inv-dead", T0 + 30_000).await;
    w.clock.advance_ms(23 * 3_600_000 + 1);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-1"),
        )
        .await;
    assert_eq!(report.manual, 1, "{report:?}");
    assert_eq!(w.core.slots_issued(), 0, "never claimed");
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Manual);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
    assert_eq!(
        items[0].event_key.as_deref(),
        Some(record.event_key.as_str())
    );
}

/// A live lease is not taken. The lease is one record's work from the reserve (`lease_floor_ms`,
/// 15 s by default), not the invocation's deadline: 10 s after its reserve, a slow
/// consumer still holds it, although its invocation has 15 minutes left.
pub async fn a_live_lease_is_not_taken(w: &World) {
    let body = World::body("R-5", "CSQU3054383");
    let record = w.strand(&body, "inv-slow", T0 + 900_000).await;
    assert_eq!(
        record.lease_until_ms,
        Some(w.gate.config.lease_until(w.clock.now_ms())),
        "the lease is the floor from the reserve, not the deadline"
    );
    w.clock.advance_ms(10_000);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-1"),
        )
        .await;
    assert_eq!(report.live_lease, 1, "{report:?}");
    assert_eq!(report.reconciled, 0);
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.lease_owner.as_deref(), Some("inv-slow"));
    assert_eq!(w.core.slots_issued(), 0);
}

/// An expired record (TTL passed, not yet deleted) that still has work is finished like the live
/// one beside it: a reserve never replaces a record with work left, so nothing else would finish
/// it. It is counted as `expired`.
pub async fn an_expired_record_with_work_is_finished(w: &World) {
    let live = w
        .strand(&World::body("R-6", "CSQU3054383"), "inv-dead", T0 + 30_000)
        .await;
    // A stranded record whose TTL is 5 minutes (as if written long ago with a short TTL).
    let now = w.clock.now_ms();
    let body = World::body("R-6b", "MWCU6059784");
    let n = parse_notification(&body, now, &["ECT-DELTA".to_string()]).unwrap();
    let keys = derive_keys(&n).unwrap();
    let inv = Invocation {
        request_id: "inv-dead-2".into(),
        deadline_ms: now + 30_000,
    };
    let mut short =
        w.gate
            .config
            .new_record(&truck_slot::event(&n).expect("event"), &keys, &inv, now);
    short.expires_at_s = gate::clock::ms_to_s(now) + 300;
    w.store.reserve(&short, now).await.unwrap();
    // Ten minutes later `short` has expired (still stored, as DynamoDB's TTL lags); `live` has not.
    w.clock.advance_ms(600_000);
    let report = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-1"),
        )
        .await;
    assert_eq!(report.expired, 1, "{report:?}");
    assert_eq!(report.reconciled, 2, "{report:?}");
    let short_after = w.store.get(&short.pk).await.unwrap().unwrap();
    assert_eq!(short_after.status, RecordStatus::Committed);
    let live_after = w.store.get(&live.pk).await.unwrap().unwrap();
    assert_eq!(live_after.status, RecordStatus::Committed);
    assert_eq!(w.core.slots_issued(), 2);
}

/// An invocation near its deadline leaves the rest for the next run.
pub async fn near_the_deadline_the_rest_is_left_for_the_next_run(w: &World) {
    let mut pks = Vec::new();
    for (i, c) in ["CSQU3054383", "MWCU6059784", "ABCD1234560"]
        .iter()
        .enumerate()
    {
        let body = World::body(&format!("R-7-{i}"), c);
        pks.push(w.strand(&body, "inv-dead", T0 + 30_000).await.pk);
    }
    w.clock.advance_ms(180_000);
    let near = Invocation {
        request_id: "rec-1".into(),
        deadline_ms: w.clock.now_ms() + 5_000,
    };
    let report = w
        .gate
        .reconcile(w.store.as_ref(), &World::reconciler_config(), &near)
        .await;
    assert!(report.left_for_next_run);
    assert_eq!(report.reconciled, 0);
    assert_eq!(w.core.slots_issued(), 0);
    let next = w
        .gate
        .reconcile(
            w.store.as_ref(),
            &World::reconciler_config(),
            &w.reconciler_invocation("rec-2"),
        )
        .await;
    assert_eq!(next.reconciled, 3, "{next:?}");
    for pk in pks {
        assert_eq!(
            w.store.get(&pk).await.unwrap().unwrap().status,
            RecordStatus::Committed
        );
    }
}

/// Runs every case, each in a fresh world from `make_world` (called with a case name).
pub async fn run_all<F, Fut>(make_world: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = World>,
{
    stranded_after_claim_is_answered_by_the_replay(&make_world("after-claim").await).await;
    stranded_after_claim_past_the_horizon_is_found_by_lookup(&make_world("after-horizon").await)
        .await;
    stranded_before_claim_is_claimed_once_with_the_same_key(&make_world("before-claim").await)
        .await;
    racing_a_slow_consumer_makes_one_slot_and_one_booking(&make_world("race").await).await;
    past_retention_is_routed_to_manual_without_a_claim(&make_world("retention").await).await;
    a_live_lease_is_not_taken(&make_world("live-lease").await).await;
    an_expired_record_with_work_is_finished(&make_world("expired").await).await;
    near_the_deadline_the_rest_is_left_for_the_next_run(&make_world("deadline").await).await;
}
