//! The expired-row purge of `PostgresStore` against the real test server:
//! PostgreSQL has no TTL, so `purge_expired` deletes, in batches, the records a reserve may
//! replace (expired, nothing left to do) and the expired natural-key rows, and never an
//! `in_flight` record (its lease live or not) nor a pending routing; a record guarding an event
//! that ends later lives its key TTL past the event's end; the reconciler's run purges through
//! `Gate::purge_expired`. Needs `GATE_TEST_DATABASE_URL` (`scripts/with-postgres.sh`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gate::clock::{ms_to_s, Clock, ManualClock};
use gate::consumer::Invocation;
use gate::manual::MemoryManualQueue;
use gate::purge::{PurgeReport, PURGE_BATCH};
use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore, Purge, PurgeCount,
    Reservation,
};
use gate_postgres::{PostgresConfig, PostgresStore};
use gate_testkit::conformance::{sample_natural_key, sample_record, LEASE_MS, NOW_MS, TTL_S};
use integration_tests::database_url;
use integration_tests::field_cases::{gate, terminal_core};
use sim::dst::CoreTerminal;

async fn fresh_store(case: &str) -> PostgresStore {
    static N: AtomicU64 = AtomicU64::new(0);
    let schema = format!(
        "purge_{}_{}_{case}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let store =
        PostgresStore::with_config(&PostgresConfig::new(database_url(), 2).with_schema(schema))
            .expect("store");
    store.migrate().await.expect("migrate");
    store
}

const DAY_MS: i64 = 86_400_000;

/// A record reserved at `NOW_MS` that expires `TTL_S` after the reserve (an event that ended
/// before it), in the state `state` leaves it in. Returns the record as reserved.
async fn record_in(store: &PostgresStore, name: &str, state: &str) -> IdempotencyRecord {
    let r = sample_record("purge", name, "owner-1", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    match state {
        "in_flight" => {}
        "committed" => {
            // The natural key's guard is written before the call, the commit after it.
            assert_eq!(
                store
                    .guard(&r, &sample_natural_key(&r, NOW_MS), NOW_MS)
                    .await
                    .expect("guard"),
                GuardOutcome::Held
            );
            let row = BusinessRow::for_record(&r, &format!("EFFECT-{name}"), NOW_MS + 1);
            let out = store
                .commit(
                    &r.pk,
                    "owner-1",
                    &format!("EFFECT-{name}"),
                    &row,
                    NOW_MS + 1,
                )
                .await
                .expect("commit");
            assert_eq!(out, CommitOutcome::Committed);
        }
        "routing_pending" | "routed" => {
            let out = store
                .finish(
                    &r.pk,
                    "owner-1",
                    RecordStatus::Manual,
                    "no key support",
                    b"{}",
                    FinishGuard::Lease,
                    NOW_MS + 1,
                )
                .await
                .expect("finish");
            assert_eq!(out, FinishOutcome::Finished);
            if state == "routed" {
                assert!(store
                    .routed(&r.pk, "owner-1", NOW_MS + 2)
                    .await
                    .expect("routed"));
            }
        }
        other => panic!("no state {other}"),
    }
    r
}

async fn present(store: &PostgresStore, r: &IdempotencyRecord) -> bool {
    store.get(&r.pk).await.expect("get").is_some()
}

async fn natural_keys(store: &PostgresStore) -> i64 {
    let client = store.pool().get().await.expect("connection");
    client
        .query_one(
            &format!("SELECT count(*) FROM {}.natural_keys", store.schema()),
            &[],
        )
        .await
        .expect("count")
        .get(0)
}

/// Past the TTL, only the records with nothing left to do go: committed and routed ones (and
/// the natural-key rows of the commits); `in_flight` (lease live or spent) and a pending
/// routing stay. Before the TTL nothing goes. A purged key is reserved anew.
#[tokio::test]
async fn only_expired_records_with_nothing_left_to_do_are_purged() {
    let store = fresh_store("states").await;
    let committed = record_in(&store, "committed", "committed").await;
    let routed = record_in(&store, "routed", "routed").await;
    let pending = record_in(&store, "pending", "routing_pending").await;
    let in_flight = record_in(&store, "in-flight", "in_flight").await;
    assert_eq!(natural_keys(&store).await, 1);

    // The last second of the TTL: `expires_at < now` is false, nothing goes.
    let last_second_ms = (ms_to_s(NOW_MS) + TTL_S) * 1000;
    assert_eq!(
        store
            .purge_expired(last_second_ms, 100)
            .await
            .expect("purge"),
        Some(PurgeCount::default())
    );
    // One second later: the committed and the routed record. The natural key counts its TTL
    // from its window's end (10:00, after the reserve at 04:00): it stays until then + TTL.
    let after_ms = last_second_ms + 1000;
    assert_eq!(
        store.purge_expired(after_ms, 100).await.expect("purge"),
        Some(PurgeCount {
            records: 2,
            natural_keys: 0
        })
    );
    assert!(!present(&store, &committed).await);
    assert!(!present(&store, &routed).await);
    assert!(
        present(&store, &pending).await,
        "a pending routing is never purged"
    );
    assert!(
        present(&store, &in_flight).await,
        "an in_flight record is never purged"
    );
    assert_eq!(natural_keys(&store).await, 1);
    let nk_expires_s = sample_natural_key(&committed, NOW_MS).expires_at_s;
    assert_eq!(nk_expires_s, ms_to_s(NOW_MS + 6 * 3_600_000) + TTL_S);
    assert_eq!(
        store
            .purge_expired(nk_expires_s * 1000, 100)
            .await
            .expect("purge"),
        Some(PurgeCount::default())
    );
    let after_ms = (nk_expires_s + 1) * 1000;
    assert_eq!(
        store.purge_expired(after_ms, 100).await.expect("purge"),
        Some(PurgeCount {
            records: 0,
            natural_keys: 1
        })
    );
    assert_eq!(natural_keys(&store).await, 0);

    // An in_flight record whose lease is live at the purge (taken over just now) stays too.
    let live_until = after_ms + LEASE_MS;
    assert!(matches!(
        store
            .take_over(&in_flight.pk, "owner-1", "owner-2", live_until, after_ms)
            .await
            .expect("take over"),
        gate::store::TakeOver::Taken(_)
    ));
    assert_eq!(
        store.purge_expired(after_ms + 1, 100).await.expect("purge"),
        Some(PurgeCount::default())
    );
    assert!(present(&store, &in_flight).await);

    // The purged key is free: a new reservation of it is a fresh record.
    let again = sample_record("purge", "committed", "owner-3", after_ms);
    assert_eq!(
        store.reserve(&again, after_ms).await.expect("reserve"),
        Reservation::Reserved
    );
    assert_eq!(store.get(&again.pk).await.expect("get"), Some(again));
}

/// A record guarding an event that ends 30 days after the reserve expires the key TTL after the
/// event's end (`expires_at = max(reserve, end) + ttl`, the consumer's rule): the purge a TTL
/// after the reserve keeps it; a TTL after the end takes it.
#[tokio::test]
async fn a_record_outlives_the_event_it_guards() {
    let store = fresh_store("event_end").await;
    let end_ms = NOW_MS + 30 * DAY_MS;
    let mut r = sample_record("purge", "late-event", "owner-1", NOW_MS);
    r.expires_at_s = ms_to_s(NOW_MS).max(ms_to_s(end_ms)) + TTL_S;
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let row = BusinessRow::for_record(&r, "EFFECT-LATE", NOW_MS + 1);
    store
        .commit(&r.pk, "owner-1", "EFFECT-LATE", &row, NOW_MS + 1)
        .await
        .expect("commit");
    let ttl_after_reserve_ms = NOW_MS + (TTL_S + 1) * 1000;
    assert_eq!(
        store
            .purge_expired(ttl_after_reserve_ms, 100)
            .await
            .expect("purge"),
        Some(PurgeCount::default())
    );
    assert!(present(&store, &r).await);
    let ttl_after_end_ms = end_ms + (TTL_S + 1) * 1000;
    assert_eq!(
        store
            .purge_expired(ttl_after_end_ms, 100)
            .await
            .expect("purge"),
        Some(PurgeCount {
            records: 1,
            natural_keys: 0
        })
    );
    assert!(!present(&store, &r).await);
}

/// A batch deletes at most its limit; the next batch goes on.
#[tokio::test]
async fn the_purge_goes_in_batches() {
    let store = fresh_store("batches").await;
    for i in 0..5 {
        record_in(&store, &format!("b{i}"), "routed").await;
    }
    let after_ms = NOW_MS + (TTL_S + 1) * 1000;
    let mut counts = Vec::new();
    for _ in 0..4 {
        counts.push(
            store
                .purge_expired(after_ms, 2)
                .await
                .expect("purge")
                .expect("some")
                .records,
        );
    }
    assert_eq!(counts, vec![2, 2, 1, 0]);
}

/// The purge's scan can use the partial indexes of its migration (the planner is told to avoid a
/// sequential scan, as it would choose one on a table this small).
#[tokio::test]
async fn the_purge_reads_through_its_partial_indexes() {
    let store = fresh_store("plan").await;
    let client = store.pool().get().await.expect("connection");
    client
        .batch_execute("SET enable_seqscan = off")
        .await
        .expect("set");
    for (table, predicate, index) in [
        (
            "idempotency",
            "expires_at_s < 1 AND status <> 'in_flight' AND NOT route_pending",
            "idempotency_purgeable",
        ),
        ("natural_keys", "expires_at_s < 1", "natural_keys_expires"),
    ] {
        let plan: Vec<String> = client
            .query(
                &format!(
                    "EXPLAIN SELECT pk FROM {}.{table} WHERE {predicate} \
                     ORDER BY expires_at_s LIMIT 500 FOR UPDATE SKIP LOCKED",
                    store.schema()
                ),
                &[],
            )
            .await
            .expect("explain")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(plan.iter().any(|l| l.contains(index)), "{plan:#?}");
    }
    client
        .batch_execute("RESET enable_seqscan")
        .await
        .expect("reset");
}

/// The reconciler's run purges through `Gate::purge_expired`: every expired routed record
/// (more than one batch) in one run, the `in_flight` one kept.
#[tokio::test]
async fn the_reconcilers_run_purges_through_the_gate() {
    let store = Arc::new(fresh_store("gate").await);
    let n = PURGE_BATCH + 3;
    let client = store.pool().get().await.expect("connection");
    // Many routed expired records at once, written directly (the states above are reached
    // through the port; here only the count matters).
    client
        .execute(
            &format!(
                "INSERT INTO {}.idempotency (pk, event_key, status, fingerprint, op_key, \
                 created_at_ms, updated_at_ms, expires_at_s) \
                 SELECT 'bulk#' || i, 'k' || i, 'committed', 'f', 'op', $1, $1, $2 \
                 FROM generate_series(1, $3) AS i",
                store.schema()
            ),
            &[&NOW_MS, &(ms_to_s(NOW_MS) + TTL_S), &(n as i32)],
        )
        .await
        .expect("bulk insert");
    let in_flight = record_in(&store, "kept", "in_flight").await;
    let clock = Arc::new(ManualClock::new(NOW_MS + (TTL_S + 1) * 1000));
    let g = gate(
        store.clone(),
        "purge",
        Arc::new(CoreTerminal::new(terminal_core(&clock))),
        Arc::new(MemoryManualQueue::new()),
        clock.clone(),
    );
    let invocation = Invocation {
        request_id: "reconciler-run-1".into(),
        deadline_ms: clock.now_ms() + 60_000,
    };
    let report = g
        .purge_expired(store.as_ref(), &invocation)
        .await
        .expect("PostgreSQL purges");
    assert_eq!(
        report,
        PurgeReport {
            deleted: PurgeCount {
                records: n,
                natural_keys: 0
            },
            batches: 2,
            left_for_next_run: false,
            failed: false,
        }
    );
    assert!(present(&store, &in_flight).await);
    // A deadline already near: nothing is done, the next run goes on.
    let late = Invocation {
        request_id: "reconciler-run-2".into(),
        deadline_ms: clock.now_ms(),
    };
    let report = g
        .purge_expired(store.as_ref(), &late)
        .await
        .expect("PostgreSQL purges");
    assert_eq!(report.batches, 0);
    assert!(report.left_for_next_run);
}
