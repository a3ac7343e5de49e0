//! Conformance cases for writes that race: where a database with transactions
//! (PostgreSQL under READ COMMITTED, the default, with snapshots per statement, row locks and
//! waits) could answer differently from DynamoDB's single-item conditions, the value every
//! adapter must give is stated here once, and checked on each: the memory store (one lock),
//! DynamoDB (moto serialises; the service orders writes per item) and PostgreSQL.
//!
//! The answers a write gives under a race are the ones it gives in some serial order: a fence
//! re-checked on the newest version, never on a snapshot a concurrent write has outdated; no
//! lost update; the record returned beside a refused write is the one that refused it.

use std::sync::Arc;

use super::{sample_natural_key, sample_record, LEASE_MS, NOW_MS, TTL_S};
use gate::clock::ms_to_s;
use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::{CommitOutcome, GuardOutcome, Reservation, Store, TakeOver};

/// How many times each race is run (each on its own key), to meet more interleavings.
const ROUNDS: usize = 6;

/// The old holder commits while a second holder takes its expired lease over, at once. Right
/// value on every adapter: exactly one takes effect. Either the commit is `Committed` (the
/// record `committed` with its effect id and the business row written) and the take-over
/// `Refused`; or the take-over is `Taken` and the commit `Refused` with the record
/// `in_flight` under the new holder, and no business row. Never both, never neither.
pub async fn concurrent_take_over_and_commit_one_wins(store: Arc<dyn Store>, prefix: &str) {
    let expired = NOW_MS + LEASE_MS + 1;
    for round in 0..ROUNDS {
        let r = sample_record(prefix, &format!("fence-{round}"), "owner-a", NOW_MS);
        assert_eq!(
            store.reserve(&r, NOW_MS).await.expect("reserve"),
            Reservation::Reserved
        );
        let booking = BusinessRow::for_record(&r, "EFFECT-A", expired);
        let commit = {
            let (store, r, booking) = (Arc::clone(&store), r.clone(), booking.clone());
            tokio::spawn(async move {
                store
                    .commit(&r.pk, "owner-a", "EFFECT-A", &booking, expired)
                    .await
                    .expect("commit")
            })
        };
        let take_over = {
            let (store, pk) = (Arc::clone(&store), r.pk.clone());
            tokio::spawn(async move {
                store
                    .take_over(&pk, "owner-a", "owner-b", expired + LEASE_MS, expired)
                    .await
                    .expect("take_over")
            })
        };
        let (commit, take_over) = (commit.await.expect("task"), take_over.await.expect("task"));
        let stored = store.get(&r.pk).await.expect("get").expect("record");
        let row = store.business_row(&r.event_key).await.expect("booking");
        match (&commit, &take_over) {
            (CommitOutcome::Committed, TakeOver::Refused) => {
                assert_eq!(stored.status, RecordStatus::Committed);
                assert_eq!(stored.effect_id.as_deref(), Some("EFFECT-A"));
                assert_eq!(stored.lease_owner.as_deref(), Some("owner-a"));
                assert_eq!(row.map(|b| b.effect_id).as_deref(), Some("EFFECT-A"));
            }
            (CommitOutcome::Refused(seen), TakeOver::Taken(taken)) => {
                assert_eq!(stored.status, RecordStatus::InFlight);
                assert_eq!(stored.lease_owner.as_deref(), Some("owner-b"));
                assert_eq!(
                    **seen, stored,
                    "the refusal returns the record that refused it"
                );
                assert_eq!(**taken, stored);
                assert_eq!(row, None, "a refused commit wrote a business row");
            }
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        }
    }
}

/// Eight effect ids recorded on one record at once. Right value on every adapter: all eight
/// in `effect_ids` (no lost update: each append applies to the newest version), and the key
/// counted once more by `multi_effect_keys`.
pub async fn concurrent_record_effect_id_loses_none(store: Arc<dyn Store>, prefix: &str) {
    let r = sample_record(prefix, "effect-race", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let before = store.multi_effect_keys().await.expect("multi_effect_keys");
    let effects: Vec<String> = (0..8).map(|i| format!("EFFECT-RACE-{i}")).collect();
    let mut tasks = Vec::new();
    for effect in effects.clone() {
        let (store, pk) = (Arc::clone(&store), r.pk.clone());
        tasks.push(tokio::spawn(async move {
            store
                .record_effect_id(&pk, &effect, NOW_MS + 1)
                .await
                .expect("record_effect_id")
                .expect("the record after the write")
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let stored = store.get(&r.pk).await.expect("get").expect("record");
    assert_eq!(
        stored.effect_ids,
        effects.into_iter().collect(),
        "an effect id was lost"
    );
    assert_eq!(
        store.multi_effect_keys().await.expect("multi_effect_keys"),
        before + 1
    );
}

/// Eight reserves at once over an expired record with nothing left to do (committed, past its
/// TTL). Right value on every adapter: exactly one `Reserved`; the seven others a `Conflict`
/// carrying the winner's record (never the expired one, which is gone).
pub async fn concurrent_reserve_over_expired_one_winner(store: Arc<dyn Store>, prefix: &str) {
    let old_ms = NOW_MS - TTL_S * 1000 - 10_000;
    let old = IdempotencyRecord {
        status: RecordStatus::Committed,
        effect_id: Some("EFFECT-OLD".into()),
        effect_ids: ["EFFECT-OLD".to_string()].into(),
        lease_until_ms: None,
        inflight_shard: None,
        request: Vec::new(),
        ..sample_record(prefix, "expired-race", "owner-old", old_ms)
    };
    assert!(
        old.is_expired(NOW_MS),
        "{} < {}",
        old.expires_at_s,
        ms_to_s(NOW_MS)
    );
    assert_eq!(
        store.reserve(&old, old_ms).await.expect("reserve"),
        Reservation::Reserved
    );
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = Arc::clone(&store);
        let record = sample_record(prefix, "expired-race", &format!("owner-{i}"), NOW_MS);
        tasks.push(tokio::spawn(async move {
            let outcome = store.reserve(&record, NOW_MS).await.expect("reserve");
            (record, outcome)
        }));
    }
    let mut winners = Vec::new();
    let mut seen = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            (record, Reservation::Reserved) => winners.push(record),
            (_, Reservation::Conflict(existing)) => seen.push(*existing),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one reserve replaces the expired record"
    );
    assert_eq!(seen.len(), 7);
    for existing in &seen {
        assert_eq!(
            *existing, winners[0],
            "a conflict returned another record than the winner's"
        );
    }
    let stored = store.get(&old.pk).await.expect("get").expect("record");
    assert_eq!(stored, winners[0]);
}

/// Two event keys of one natural key put its guard at once (two records of one event racing to
/// call). Right value on every adapter: exactly one holds it and the other meets a
/// `Collision` naming that one (never both, never neither); the item then names the holder.
pub async fn concurrent_guard_one_holder(store: Arc<dyn Store>, prefix: &str) {
    for round in 0..ROUNDS {
        let records: Vec<IdempotencyRecord> = ["a", "b"]
            .iter()
            .map(|n| {
                let mut r =
                    sample_record(prefix, &format!("nk-race-{round}-{n}"), "owner-a", NOW_MS);
                // One natural key for the round: the same subject and window start.
                r.labels
                    .insert("window_start".into(), format!("2025-06-09T0{round}:00:00Z"));
                r
            })
            .collect();
        let mut tasks = Vec::new();
        for r in records.clone() {
            let store = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let nk = sample_natural_key(&r, NOW_MS);
                store.guard(&r, &nk, NOW_MS).await.expect("guard")
            }));
        }
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.expect("task"));
        }
        let keys: Vec<&str> = records.iter().map(|r| r.event_key.as_str()).collect();
        let holder = match (&outcomes[0], &outcomes[1]) {
            (GuardOutcome::Held, GuardOutcome::Collision { other_event_key }) => {
                assert_eq!(other_event_key, keys[0]);
                0
            }
            (GuardOutcome::Collision { other_event_key }, GuardOutcome::Held) => {
                assert_eq!(other_event_key, keys[1]);
                1
            }
            other => panic!("round {round}: not exactly one holder: {other:?}"),
        };
        // Asked again, both get the same answer.
        let loser = &records[1 - holder];
        let again = store
            .guard(loser, &sample_natural_key(loser, NOW_MS), NOW_MS + 1)
            .await
            .expect("guard");
        assert_eq!(
            again,
            GuardOutcome::Collision {
                other_event_key: keys[holder].to_string()
            }
        );
    }
}
