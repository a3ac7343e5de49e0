//! The reconciler's report counts a record it skipped because its lease is live under
//! `live_lease` (docs/DEPLOYING.md, "Reconciler"), whatever made the lease live, and never
//! takes such a record over: among them a record reserved the very millisecond of the sweep,
//! which is at least `min_age_ms` (0) old.

use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::effect::{CallOutcome, LookupOutcome};
use gate::integration::{Held, Integration, Lookup, Parsed, Rejection};
use gate::manual::MemoryManualQueue;
use gate::reconciler::ReconcilerConfig;
use gate::record::{inflight_shard, IdempotencyRecord, Labels, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;

/// An integration the reconciler must never call here: every record it meets is someone else's.
struct NeverCalled;

#[async_trait]
impl Integration for NeverCalled {
    fn operation(&self) -> &str {
        "declare"
    }
    fn parse(&self, _body: &str, _now_ms: i64) -> Parsed {
        Parsed::Rejected(Rejection::new("unused", "unused"))
    }
    async fn call(&self, _held: &Held<'_>) -> CallOutcome {
        panic!("a record under a live lease was called")
    }
    fn lookup_by_key(&self) -> Option<&dyn Lookup> {
        Some(self)
    }
    fn subject(&self, _record: &IdempotencyRecord) -> String {
        String::new()
    }
}

#[async_trait]
impl Lookup for NeverCalled {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        panic!("a record under a live lease was looked up")
    }
}

fn record(n: u8, lease_until_ms: i64, route_pending: bool) -> IdempotencyRecord {
    aged(n, lease_until_ms, route_pending, T0 - 600_000)
}

fn aged(n: u8, lease_until_ms: i64, route_pending: bool, created_at_ms: i64) -> IdempotencyRecord {
    let event_key = format!("{n:02x}{}", "ab".repeat(31));
    IdempotencyRecord {
        pk: format!("customs#{event_key}"),
        op_key: format!("{event_key}:declare"),
        inflight_shard: Some(inflight_shard(&event_key)),
        status: if route_pending {
            RecordStatus::Manual
        } else {
            RecordStatus::InFlight
        },
        event_key,
        fingerprint: "f".repeat(64),
        request: b"{}".to_vec(),
        lease_owner: Some(format!("consumer-{n}")),
        lease_until_ms: Some(lease_until_ms),
        created_at_ms,
        updated_at_ms: created_at_ms,
        expires_at_s: T0 / 1000 + 86_400,
        effect_id: None,
        effect_ids: Default::default(),
        error: None,
        route_pending,
        labels: Labels::new(),
    }
}

#[tokio::test]
async fn a_record_skipped_as_live_is_counted_as_live_lease() {
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(T0));
    let gate = Gate {
        config: GateConfig::new("customs"),
        store: store.clone(),
        integration: Arc::new(NeverCalled),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: clock.clone(),
    };
    // In flight under a live lease; a routing whose send is in progress; a lease that ends
    // exactly now (`now <= lease_until` is live); a record reserved this very millisecond.
    let live = [
        record(1, T0 + 10_000, false),
        record(2, T0 + 10_000, true),
        record(3, T0, false),
        aged(4, T0 + 15_000, false, T0),
    ];
    for r in &live {
        store.put_raw(r.clone());
    }
    let invocation = Invocation::new("reconciler", clock.now_ms() + 60_000);
    let report = gate
        .reconcile(store.as_ref(), &ReconcilerConfig::default(), &invocation)
        .await;
    assert_eq!((report.examined, report.live_lease), (4, 4), "{report:?}");
    assert_eq!(
        (report.reconciled, report.manual, report.transient),
        (0, 0, 0),
        "{report:?}"
    );
    for r in &live {
        let after = store.get(&r.pk).await.unwrap().unwrap();
        assert_eq!(after.lease_owner, r.lease_owner, "taken over");
    }
    // One entry, as `gatectl reconcile KEY` runs it.
    let one = gate
        .reconcile_entry((&live[0]).into(), &invocation.for_record(9))
        .await;
    assert_eq!((one.examined, one.live_lease), (1, 1), "{one:?}");

    // A minimum age: exactly that old is examined (and skipped, live), younger is not seen.
    let config = ReconcilerConfig {
        min_age_ms: 60_000,
        ..ReconcilerConfig::default()
    };
    let store = Arc::new(MemoryStore::new());
    let gate = Gate {
        store: store.clone(),
        ..gate
    };
    store.put_raw(aged(5, T0 + 10_000, false, T0 - 60_000));
    store.put_raw(aged(6, T0 + 10_000, false, T0 - 59_999));
    let report = gate.reconcile(store.as_ref(), &config, &invocation).await;
    assert_eq!((report.examined, report.live_lease), (1, 1), "{report:?}");
}
