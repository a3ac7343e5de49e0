//! The store conformance suite (feature `testkit`): one set of cases that every
//! [`IdempotencyStore`] implementation must pass, so the in-memory store and the DynamoDB store
//! cannot drift.
//!
//! Each case is a `pub async fn(store, prefix)`: `prefix` makes every key unique to the run (it
//! becomes the integration part of `pk` and is hashed into the event keys), so cases can share
//! tables. [`stale_in_flight_paginates`] additionally expects its shard (`"07"`) of the `InFlight`
//! index to hold no other records created before [`NOW_MS`], i.e. fresh tables. Cases panic on
//! failure (they are test code).
//!
//! All times are simulated around [`NOW_MS`] (epoch ms); `expires_at_s` is epoch seconds.

use std::collections::BTreeSet;
use std::sync::Arc;

use sha2::{Digest, Sha256};

mod commit_conditions;
mod concurrency;
pub use commit_conditions::commit_conditions_alone_and_in_pairs;
pub use concurrency::{
    concurrent_natural_key_one_holder, concurrent_record_slot_id_loses_none,
    concurrent_reserve_over_expired_one_winner, concurrent_take_over_and_commit_one_wins,
};

use crate::clock::ms_to_s;
use crate::record::{
    natural_key_expires_at_s, BusinessRow, IdempotencyRecord, Labels, NaturalKey, RecordStatus,
};
use crate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, IdempotencyStore, InFlightEntry, Reservation, Store,
    StoreError, TakeOver,
};

/// The suite's "now": 2025-06-09T04:00:00Z in epoch **milliseconds**.
pub const NOW_MS: i64 = 1_749_441_600_000;

/// The lease length the cases use, **milliseconds**.
pub const LEASE_MS: i64 = 30_000;

/// The TTL the cases use, **seconds**: the gate's default key TTL, 21 days
/// ([`crate::consumer::DEFAULT_KEY_TTL_S`]).
pub const TTL_S: i64 = crate::consumer::DEFAULT_KEY_TTL_S;

/// The event key for case `name` in run `prefix`: lowercase hex SHA-256, like a real one.
pub fn event_key(prefix: &str, name: &str) -> String {
    hex::encode(Sha256::digest(format!("{prefix}/{name}").as_bytes()))
}

/// The labels of the sample records: the truck-slot path's four (`container`, `terminal`,
/// `window_start`, `window_end`, RFC 3339), with the window given.
pub fn sample_labels(window_start: &str, window_end: &str) -> Labels {
    Labels::from([
        ("container".to_string(), "CSQU3054383".to_string()),
        ("terminal".to_string(), "ECT-DELTA".to_string()),
        ("window_start".to_string(), window_start.to_string()),
        ("window_end".to_string(), window_end.to_string()),
    ])
}

/// The natural key of a sample row, as the truck-slot path builds it: `"{container}#{window
/// start}"`, labelled with both, expiring [`natural_key_expires_at_s`] after the window's end.
pub fn sample_natural_key(row: &BusinessRow) -> NaturalKey {
    let end_ms = chrono::DateTime::parse_from_rfc3339(row.label("window_end"))
        .ok()
        .map(|t| t.timestamp_millis());
    NaturalKey {
        key: format!("{}#{}", row.label("container"), row.label("window_start")),
        labels: Labels::from([
            ("container".to_string(), row.label("container").to_string()),
            (
                "window_start".to_string(),
                row.label("window_start").to_string(),
            ),
        ]),
        expires_at_s: natural_key_expires_at_s(end_ms, row.booked_at_ms),
    }
}

/// A fresh `in_flight` record for case `name`: `pk = "{prefix}#{event_key}"`, leased by `owner`
/// until `now_ms + LEASE_MS`, created at `now_ms`, expiring `TTL_S` seconds later.
pub fn sample_record(prefix: &str, name: &str, owner: &str, now_ms: i64) -> IdempotencyRecord {
    let event_key = event_key(prefix, name);
    IdempotencyRecord {
        pk: format!("{prefix}#{event_key}"),
        op_key: format!("{event_key}:slot-claim"),
        inflight_shard: Some(crate::record::inflight_shard(&event_key)),
        event_key,
        status: RecordStatus::InFlight,
        fingerprint: hex::encode(Sha256::digest(name.as_bytes())),
        request: format!("{{\"equipment_number\":\"CSQU3054383\",\"pin\":\"4711-{name}\"}}")
            .into_bytes(),
        lease_owner: Some(owner.to_string()),
        lease_until_ms: Some(now_ms + LEASE_MS),
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        expires_at_s: ms_to_s(now_ms) + TTL_S,
        slot_id: None,
        slot_ids: BTreeSet::new(),
        error: None,
        route_pending: false,
        labels: sample_labels("2025-06-09T08:00:00Z", "2025-06-09T10:00:00Z"),
    }
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

async fn must_reserve(store: &dyn IdempotencyStore, record: &IdempotencyRecord, now_ms: i64) {
    assert_eq!(
        store.reserve(record, now_ms).await.expect("reserve"),
        Reservation::Reserved,
        "reserve of a new key {}",
        record.pk
    );
}

async fn must_get(store: &dyn IdempotencyStore, pk: &str) -> IdempotencyRecord {
    store
        .get(pk)
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("record {pk} missing"))
}

/// A new key is reserved and stored exactly as given; a second reserve of the key is a conflict
/// that returns the stored record with every field, in the same call. Both a minimal record
/// (optional fields absent) and one with every optional field set round-trip.
pub async fn reserve_new_key_then_conflict(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let first = sample_record(prefix, "reserve-new", "owner-a", NOW_MS);
    must_reserve(store, &first, NOW_MS).await;
    assert_eq!(must_get(store, &first.pk).await, first);

    let second = IdempotencyRecord {
        lease_owner: Some("owner-b".into()),
        fingerprint: "other".into(),
        ..sample_record(prefix, "reserve-new", "owner-b", NOW_MS + 5)
    };
    match store.reserve(&second, NOW_MS + 5).await.expect("reserve") {
        Reservation::Conflict(existing) => assert_eq!(*existing, first),
        Reservation::Reserved => panic!("a live key was reserved twice"),
    }
    assert_eq!(
        must_get(store, &first.pk).await,
        first,
        "conflict changed the record"
    );

    // Every optional field set (a record as it may look after take-overs and slot records).
    let full = IdempotencyRecord {
        slot_id: Some("SLOT-FULL-1".into()),
        slot_ids: set(&["SLOT-FULL-1", "SLOT-FULL-2"]),
        error: Some("an earlier error".into()),
        request: vec![0, 159, 146, 150, 255],
        ..sample_record(prefix, "reserve-full", "owner-a", NOW_MS)
    };
    must_reserve(store, &full, NOW_MS).await;
    let other = sample_record(prefix, "reserve-full", "owner-b", NOW_MS + 1);
    match store.reserve(&other, NOW_MS + 1).await.expect("reserve") {
        Reservation::Conflict(existing) => assert_eq!(*existing, full),
        Reservation::Reserved => panic!("a live key was reserved twice"),
    }
}

/// The retry of a reserve whose write landed (the client lost the answer and sent the same
/// request again) meets its own reservation: that is `Reserved`, not a conflict, and changes
/// nothing. A reservation by another acquisition of the same event (another lease owner) is
/// still a conflict, even with the same fingerprint.
pub async fn reserve_retry_meets_own_write(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let mine = sample_record(prefix, "reserve-retry", "owner-a#0", NOW_MS);
    must_reserve(store, &mine, NOW_MS).await;
    // The SDK's retry, some seconds later, of the very same request.
    assert_eq!(
        store.reserve(&mine, NOW_MS + 4_000).await.expect("reserve"),
        Reservation::Reserved,
        "the retry of our own landed reserve is a successful reserve"
    );
    assert_eq!(must_get(store, &mine.pk).await, mine);
    // Another copy of the event in the same invocation: another lease token.
    let copy = sample_record(prefix, "reserve-retry", "owner-a#1", NOW_MS);
    match store.reserve(&copy, NOW_MS + 5).await.expect("reserve") {
        Reservation::Conflict(existing) => assert_eq!(*existing, mine),
        Reservation::Reserved => panic!("another acquisition counted as our own write"),
    }
}

/// A record whose TTL has passed but that is still stored counts as absent: reserve overwrites
/// it. The boundary is in epoch seconds: `expires_at == now_s` is still live.
pub async fn reserve_overwrites_expired(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let now_s = ms_to_s(NOW_MS);
    let old = IdempotencyRecord {
        status: RecordStatus::Committed,
        slot_id: Some("SLOT-OLD".into()),
        slot_ids: set(&["SLOT-OLD"]),
        lease_owner: None,
        lease_until_ms: None,
        inflight_shard: None,
        expires_at_s: now_s,
        ..sample_record(prefix, "expired", "owner-old", NOW_MS - TTL_S * 1000)
    };
    must_reserve(store, &old, NOW_MS - TTL_S * 1000).await;

    // Same second as expires_at: still live (`expires_at < now` is false), milliseconds ignored.
    let fresh = sample_record(prefix, "expired", "owner-new", NOW_MS + 999);
    match store.reserve(&fresh, NOW_MS + 999).await.expect("reserve") {
        Reservation::Conflict(existing) => assert_eq!(*existing, old),
        Reservation::Reserved => panic!("reserved over a record expiring this very second"),
    }
    // One second later: expired, overwritten.
    let fresh = sample_record(prefix, "expired", "owner-new", NOW_MS + 1000);
    must_reserve(store, &fresh, NOW_MS + 1000).await;
    let stored = must_get(store, &fresh.pk).await;
    assert_eq!(stored, fresh);
    assert_eq!(
        stored.slot_ids,
        BTreeSet::new(),
        "old slot ids must not survive"
    );

    // An expired record that still has work (`in_flight`, or a routing not yet confirmed) is a
    // conflict: whoever meets it takes it over with its history (creation time, operation key,
    // stored request), never starts afresh under a key the terminal may have forgotten.
    for (name, status, pending) in [
        ("expired-in-flight", RecordStatus::InFlight, false),
        ("expired-routing", RecordStatus::Manual, true),
    ] {
        let stranded = IdempotencyRecord {
            status,
            route_pending: pending,
            expires_at_s: now_s,
            // Not shard "07": `stale_in_flight_paginates` owns that shard on a shared table.
            inflight_shard: Some("14".into()),
            ..sample_record(prefix, name, "owner-old", NOW_MS - TTL_S * 1000)
        };
        must_reserve(store, &stranded, NOW_MS - TTL_S * 1000).await;
        let fresh = sample_record(prefix, name, "owner-new", NOW_MS + 1000);
        match store.reserve(&fresh, NOW_MS + 1000).await.expect("reserve") {
            Reservation::Conflict(existing) => assert_eq!(*existing, stranded),
            Reservation::Reserved => panic!("an expired record with work left was replaced"),
        }
        assert_eq!(must_get(store, &fresh.pk).await, stranded);
    }
}

/// 16 tasks reserve one key at once: exactly one is `Reserved`, the 15 others get a conflict
/// carrying the winner's record.
pub async fn concurrent_reserve_one_winner(store: Arc<dyn Store>, prefix: &str) {
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = Arc::clone(&store);
        let record = sample_record(prefix, "race", &format!("owner-{i:02}"), NOW_MS);
        tasks.push(tokio::spawn(async move {
            let outcome = store.reserve(&record, NOW_MS).await.expect("reserve");
            (record.lease_owner.clone(), outcome)
        }));
    }
    let mut winners = Vec::new();
    let mut conflict_owners = Vec::new();
    for task in tasks {
        let (owner, outcome) = task.await.expect("task");
        match outcome {
            Reservation::Reserved => winners.push(owner),
            Reservation::Conflict(existing) => conflict_owners.push(existing.lease_owner.clone()),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one reserve wins: {winners:?}");
    assert_eq!(conflict_owners.len(), 15);
    assert!(
        conflict_owners.iter().all(|o| *o == winners[0]),
        "every conflict returns the winner's record: {conflict_owners:?} vs {winners:?}"
    );
    let pk = sample_record(prefix, "race", "x", NOW_MS).pk;
    assert_eq!(
        store
            .get(&pk)
            .await
            .expect("get")
            .expect("record")
            .lease_owner,
        winners[0]
    );
}

/// Take-over: refused while the lease is live (also at `now == lease_until`), refused for a
/// wrong old owner, allowed after expiry (only the lease and `updated_at` change), then refused
/// for a second taker naming the old owner. Refused on a missing record and on a record that left
/// `in_flight`.
pub async fn take_over_rules(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "take-over", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let until = NOW_MS + LEASE_MS;
    let new_until = until + 1 + LEASE_MS;

    let t = store
        .take_over(&r.pk, "owner-a", "owner-b", new_until, NOW_MS + 1)
        .await;
    assert_eq!(t.expect("take_over"), TakeOver::Refused, "live lease");
    let t = store
        .take_over(&r.pk, "owner-a", "owner-b", new_until, until)
        .await;
    assert_eq!(
        t.expect("take_over"),
        TakeOver::Refused,
        "lease live at now == lease_until"
    );
    let t = store
        .take_over(&r.pk, "owner-x", "owner-b", new_until, until + 1)
        .await;
    assert_eq!(t.expect("take_over"), TakeOver::Refused, "wrong old owner");

    let t = store
        .take_over(&r.pk, "owner-a", "owner-b", new_until, until + 1)
        .await;
    let expected = IdempotencyRecord {
        lease_owner: Some("owner-b".into()),
        lease_until_ms: Some(new_until),
        updated_at_ms: until + 1,
        ..r.clone()
    };
    match t.expect("take_over") {
        TakeOver::Taken(now) => assert_eq!(*now, expected),
        TakeOver::Refused => panic!("take-over of an expired lease refused"),
    }
    assert_eq!(must_get(store, &r.pk).await, expected);

    // The client's retry of that take-over (its write landed, the answer was lost) meets its own
    // lease: taken, nothing changes.
    let t = store
        .take_over(&r.pk, "owner-a", "owner-b", new_until, until + 3)
        .await;
    assert_eq!(
        t.expect("take_over"),
        TakeOver::Taken(Box::new(expected.clone())),
        "retry of a landed take-over"
    );

    let t = store
        .take_over(&r.pk, "owner-a", "owner-c", new_until + 5, until + 2)
        .await;
    assert_eq!(t.expect("take_over"), TakeOver::Refused, "second taker");
    assert_eq!(must_get(store, &r.pk).await, expected);

    let missing = format!("{prefix}#no-such-key");
    let t = store
        .take_over(&missing, "owner-a", "owner-b", new_until, until + 1)
        .await;
    assert_eq!(t.expect("take_over"), TakeOver::Refused, "missing record");
    assert_eq!(store.get(&missing).await.expect("get"), None);

    // A routing whose send is not confirmed can be taken over once its lease expires (the
    // sender died); once confirmed, the record has no work left and is never taken over.
    let done = sample_record(prefix, "take-over-done", "owner-a", NOW_MS);
    must_reserve(store, &done, NOW_MS).await;
    assert_eq!(
        store
            .finish(
                &done.pk,
                "owner-a",
                RecordStatus::Manual,
                "by hand",
                b"{}",
                FinishGuard::Lease,
                NOW_MS + 1
            )
            .await
            .expect("finish"),
        FinishOutcome::Finished
    );
    let t = store
        .take_over(&done.pk, "owner-a", "owner-b", new_until, NOW_MS + 2)
        .await;
    assert_eq!(
        t.expect("take_over"),
        TakeOver::Refused,
        "live routing lease"
    );
    let t = store
        .take_over(&done.pk, "owner-a", "owner-b", new_until, until + 1)
        .await;
    match t.expect("take_over") {
        TakeOver::Taken(r) => {
            assert_eq!(r.status, RecordStatus::Manual);
            assert!(r.route_pending);
            assert_eq!(r.lease_owner.as_deref(), Some("owner-b"));
        }
        TakeOver::Refused => panic!("a stranded routing was not taken over"),
    }
    assert!(store
        .routed(&done.pk, "owner-b", until + 2)
        .await
        .expect("routed"));
    let t = store
        .take_over(&done.pk, "owner-b", "owner-c", new_until + 9, new_until + 1)
        .await;
    assert_eq!(
        t.expect("take_over"),
        TakeOver::Refused,
        "record with no work left"
    );
}

/// Commit writes the record (`committed`, `slot_id`, `slot_ids`, the holder kept as
/// `lease_owner`, no `lease_until`, no `inflight_shard`, no stored request, `updated_at` = commit
/// time, the rest unchanged) and the booking, in one call.
pub async fn commit_writes_record_and_booking(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "commit", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let booking = BusinessRow::for_record(&r, "SLOT-1", NOW_MS + 10);
    match store
        .commit(
            &r.pk,
            "owner-a",
            "SLOT-1",
            &booking,
            Some(&sample_natural_key(&booking)),
            NOW_MS + 10,
        )
        .await
        .expect("commit")
    {
        CommitOutcome::Committed => {
            let c = store.get(&r.pk).await.expect("get").expect("record");
            assert_eq!(c.pk, r.pk);
            assert_eq!(c.fingerprint, r.fingerprint);
            assert!(
                c.request.is_empty(),
                "the stored request outlived the commit"
            );
            assert_eq!(c.created_at_ms, r.created_at_ms);
            assert_eq!(c.expires_at_s, r.expires_at_s);
            assert_eq!(c.event_key, r.event_key);
            assert_eq!(c.status, RecordStatus::Committed);
            assert_eq!(c.slot_id.as_deref(), Some("SLOT-1"));
            assert!(c.slot_ids.contains("SLOT-1"));
            assert_eq!(c.lease_owner.as_deref(), Some("owner-a"));
            assert_eq!(c.lease_until_ms, None);
            assert_eq!(c.inflight_shard, None);
            assert_eq!(c.updated_at_ms, NOW_MS + 10);
        }
        other => panic!("commit not plainly committed: {other:?}"),
    }
    let expected = IdempotencyRecord {
        status: RecordStatus::Committed,
        slot_id: Some("SLOT-1".into()),
        slot_ids: set(&["SLOT-1"]),
        request: Vec::new(),
        lease_until_ms: None,
        inflight_shard: None,
        updated_at_ms: NOW_MS + 10,
        ..r.clone()
    };
    assert_eq!(must_get(store, &r.pk).await, expected);
    assert_eq!(
        store.booking(&r.event_key).await.expect("booking"),
        Some(booking)
    );
}

/// Commit is fenced by the lease: a holder whose lease was taken over is `Refused` with the
/// record as it is (still `in_flight`, the new holder's) and writes nothing; so is a commit on a
/// record that is no longer `in_flight` (after a commit, and after `finish`), which writes no
/// (second) booking. The retry of a commit that landed (same holder, same slot) is `Committed`
/// and writes nothing again. Commit without any record is `Corrupt`. A booking that outlived
/// its record makes the whole transaction fail (`Corrupt`) and leaves the record `in_flight`.
pub async fn commit_not_in_flight(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "commit-twice", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    // owner-a's lease expires and owner-b takes over: owner-a's commit is refused.
    let taken = match store
        .take_over(
            &r.pk,
            "owner-a",
            "owner-b",
            NOW_MS + 2 * LEASE_MS,
            NOW_MS + LEASE_MS + 1,
        )
        .await
        .expect("take_over")
    {
        TakeOver::Taken(t) => *t,
        TakeOver::Refused => panic!("take-over refused"),
    };
    let stale = BusinessRow::for_record(&r, "SLOT-0", NOW_MS + LEASE_MS + 2);
    match store
        .commit(
            &r.pk,
            "owner-a",
            "SLOT-0",
            &stale,
            Some(&sample_natural_key(&stale)),
            NOW_MS + LEASE_MS + 2,
        )
        .await
        .expect("commit")
    {
        CommitOutcome::Refused(existing) => assert_eq!(*existing, taken),
        CommitOutcome::Committed | CommitOutcome::CommittedCollision { .. } => {
            panic!("a holder that lost its lease committed")
        }
    }
    assert_eq!(must_get(store, &r.pk).await, taken);
    assert_eq!(store.booking(&r.event_key).await.expect("booking"), None);

    let first = BusinessRow::for_record(&r, "SLOT-1", NOW_MS + LEASE_MS + 10);
    let out = store
        .commit(
            &r.pk,
            "owner-b",
            "SLOT-1",
            &first,
            Some(&sample_natural_key(&first)),
            NOW_MS + LEASE_MS + 10,
        )
        .await;
    assert!(matches!(out.expect("commit"), CommitOutcome::Committed));
    let committed = must_get(store, &r.pk).await;
    // The retry of that very commit (its answer lost): committed, nothing written again.
    let out = store
        .commit(
            &r.pk,
            "owner-b",
            "SLOT-1",
            &first,
            Some(&sample_natural_key(&first)),
            NOW_MS + LEASE_MS + 15,
        )
        .await;
    assert!(matches!(out.expect("commit"), CommitOutcome::Committed));
    assert_eq!(must_get(store, &r.pk).await, committed);

    let second = BusinessRow::for_record(&r, "SLOT-2", NOW_MS + LEASE_MS + 20);
    match store
        .commit(
            &r.pk,
            "owner-b",
            "SLOT-2",
            &second,
            Some(&sample_natural_key(&second)),
            NOW_MS + LEASE_MS + 20,
        )
        .await
        .expect("commit")
    {
        CommitOutcome::Refused(existing) => assert_eq!(*existing, committed),
        CommitOutcome::Committed | CommitOutcome::CommittedCollision { .. } => {
            panic!("committed twice")
        }
    }
    assert_eq!(must_get(store, &r.pk).await, committed);
    assert_eq!(
        store.booking(&r.event_key).await.expect("booking"),
        Some(first)
    );

    // A failed record.
    let f = sample_record(prefix, "commit-failed", "owner-a", NOW_MS);
    must_reserve(store, &f, NOW_MS).await;
    assert_eq!(
        store
            .finish(
                &f.pk,
                "owner-a",
                RecordStatus::Failed,
                "terminal answered 400",
                b"{}",
                FinishGuard::Lease,
                NOW_MS + 1
            )
            .await
            .expect("finish"),
        FinishOutcome::Finished
    );
    let failed = must_get(store, &f.pk).await;
    let b = BusinessRow::for_record(&f, "SLOT-F", NOW_MS + 2);
    match store
        .commit(
            &f.pk,
            "owner-a",
            "SLOT-F",
            &b,
            Some(&sample_natural_key(&b)),
            NOW_MS + 2,
        )
        .await
        .expect("commit")
    {
        CommitOutcome::Refused(existing) => {
            assert_eq!(*existing, failed);
            assert_eq!(existing.status, RecordStatus::Failed);
        }
        CommitOutcome::Committed | CommitOutcome::CommittedCollision { .. } => {
            panic!("committed a failed record")
        }
    }
    assert_eq!(store.booking(&f.event_key).await.expect("booking"), None);

    // No record at all.
    let ghost = sample_record(prefix, "commit-ghost", "owner-a", NOW_MS);
    let b = BusinessRow::for_record(&ghost, "SLOT-G", NOW_MS);
    let out = store
        .commit(
            &ghost.pk,
            "owner-a",
            "SLOT-G",
            &b,
            Some(&sample_natural_key(&b)),
            NOW_MS,
        )
        .await;
    assert!(matches!(out, Err(StoreError::Corrupt(_))), "{out:?}");
    assert_eq!(
        store.booking(&ghost.event_key).await.expect("booking"),
        None
    );
    assert_eq!(store.get(&ghost.pk).await.expect("get"), None);

    // A booking without its record: the same event key under another integration (another pk).
    let orphan = IdempotencyRecord {
        pk: format!("{prefix}-other#{}", r.event_key),
        ..sample_record(prefix, "commit-twice", "owner-z", NOW_MS)
    };
    must_reserve(store, &orphan, NOW_MS).await;
    let b = BusinessRow::for_record(&orphan, "SLOT-Z", NOW_MS + 30);
    let out = store
        .commit(
            &orphan.pk,
            "owner-z",
            "SLOT-Z",
            &b,
            Some(&sample_natural_key(&b)),
            NOW_MS + 30,
        )
        .await;
    assert!(matches!(out, Err(StoreError::Corrupt(_))), "{out:?}");
    assert_eq!(
        must_get(store, &orphan.pk).await,
        orphan,
        "transaction not atomic"
    );
    assert_eq!(
        store
            .booking(&r.event_key)
            .await
            .expect("booking")
            .map(|b| b.effect_id),
        Some("SLOT-1".to_string())
    );
}

/// Two holders commit one record at once with different slots: exactly one `Committed`, the
/// other `Refused` carrying the winner's slot (or, on a real table under contention, a
/// `TransactionConflict` after the retries); exactly one booking, with the winner's slot.
pub async fn concurrent_commit_one_winner(store: Arc<dyn Store>, prefix: &str) {
    let r = sample_record(prefix, "commit-race", "owner-a", NOW_MS);
    must_reserve(store.as_ref(), &r, NOW_MS).await;
    let mut tasks = Vec::new();
    for slot in ["SLOT-A", "SLOT-B"] {
        let store = Arc::clone(&store);
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let booking = BusinessRow::for_record(&r, slot, NOW_MS + 10);
            let out = store
                .commit(
                    &r.pk,
                    "owner-a",
                    slot,
                    &booking,
                    Some(&sample_natural_key(&booking)),
                    NOW_MS + 10,
                )
                .await;
            (slot, out)
        }));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            (slot, Ok(CommitOutcome::Committed)) => winners.push(slot),
            (_, Ok(CommitOutcome::Refused(existing))) => losers.push(existing.slot_id.clone()),
            (_, Err(StoreError::TransactionConflict(_))) => losers.push(None),
            (_, Err(e)) => panic!("commit failed: {e}"),
            (_, Ok(CommitOutcome::CommittedCollision { other_event_key })) => {
                panic!("one record's commits collided with {other_event_key}")
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one commit wins");
    assert_eq!(losers.len(), 1);
    if let Some(seen) = &losers[0] {
        assert_eq!(seen, winners[0], "the loser sees the winner's slot");
    }
    let stored = must_get(store.as_ref(), &r.pk).await;
    assert_eq!(stored.slot_id.as_deref(), Some(winners[0]));
    assert_eq!(stored.slot_ids, set(&[winners[0]]));
    let booking = store
        .booking(&r.event_key)
        .await
        .expect("booking")
        .expect("a booking");
    assert_eq!(booking.effect_id, winners[0]);
}

/// `release_lease` by the owner sets `lease_until` to 0 and keeps the record `in_flight`, so a
/// take-over succeeds at once; by another owner it is a no-op.
pub async fn release_lease_then_take_over(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "release", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;

    store
        .release_lease(&r.pk, "owner-x", NOW_MS + 1)
        .await
        .expect("release");
    assert_eq!(
        must_get(store, &r.pk).await,
        r,
        "a stranger released the lease"
    );

    store
        .release_lease(&r.pk, "owner-a", NOW_MS + 2)
        .await
        .expect("release");
    let released = must_get(store, &r.pk).await;
    assert_eq!(
        released,
        IdempotencyRecord {
            lease_until_ms: Some(0),
            updated_at_ms: NOW_MS + 2,
            ..r.clone()
        }
    );
    assert!(!released.lease_is_live(NOW_MS + 3));

    let t = store
        .take_over(
            &r.pk,
            "owner-a",
            "owner-b",
            NOW_MS + 3 + LEASE_MS,
            NOW_MS + 3,
        )
        .await;
    match t.expect("take_over") {
        TakeOver::Taken(now) => {
            assert_eq!(now.lease_owner.as_deref(), Some("owner-b"));
            assert_eq!(now.lease_until_ms, Some(NOW_MS + 3 + LEASE_MS));
            assert_eq!(now.status, RecordStatus::InFlight);
        }
        TakeOver::Refused => panic!("take-over right after release refused"),
    }

    // Releasing a missing record is fine and creates nothing.
    let missing = format!("{prefix}#no-such-key-release");
    store
        .release_lease(&missing, "owner-a", NOW_MS)
        .await
        .expect("release");
    assert_eq!(store.get(&missing).await.expect("get"), None);
}

/// `finish` by the holder ends an `in_flight` record as `failed` or `manual` with the error and
/// its routing pending: the stored request replaced by the manual item, `route_pending` set, the
/// lease and `inflight_shard` kept. By another owner it is refused with the record as it is; the
/// retry of a finish that landed is `Finished` and changes nothing; a second finish as another
/// status is refused. `routed` by a stranger is refused; by the holder it removes the pending
/// mark, the item, `lease_until` and `inflight_shard` (keeping `lease_owner` as the last holder);
/// a second `routed` is refused and changes nothing. [`FinishGuard::LeaseAndNoSlot`] refuses a
/// record that holds a slot id.
pub async fn finish_rules(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let item = br#"{"reason":"terminal_rejected"}"#;
    for (name, status) in [
        ("finish-failed", RecordStatus::Failed),
        ("finish-manual", RecordStatus::Manual),
    ] {
        let r = sample_record(prefix, name, "owner-a", NOW_MS);
        must_reserve(store, &r, NOW_MS).await;
        let done = store
            .finish(
                &r.pk,
                "owner-x",
                status,
                "nope",
                item,
                FinishGuard::Lease,
                NOW_MS + 1,
            )
            .await;
        assert_eq!(
            done.expect("finish"),
            FinishOutcome::Refused(Some(Box::new(r.clone()))),
            "a stranger finished the record"
        );
        assert_eq!(must_get(store, &r.pk).await, r);

        let finish = || {
            store.finish(
                &r.pk,
                "owner-a",
                status,
                "terminal answered 422",
                item,
                FinishGuard::Lease,
                NOW_MS + 2,
            )
        };
        assert_eq!(finish().await.expect("finish"), FinishOutcome::Finished);
        let pending = IdempotencyRecord {
            status,
            error: Some("terminal answered 422".into()),
            request: item.to_vec(),
            route_pending: true,
            updated_at_ms: NOW_MS + 2,
            ..r.clone()
        };
        assert_eq!(must_get(store, &r.pk).await, pending);
        // The client's retry of the landed finish.
        assert_eq!(finish().await.expect("finish"), FinishOutcome::Finished);
        assert_eq!(must_get(store, &r.pk).await, pending);

        let other = if status == RecordStatus::Failed {
            RecordStatus::Manual
        } else {
            RecordStatus::Failed
        };
        let again = store
            .finish(
                &r.pk,
                "owner-a",
                other,
                "again",
                item,
                FinishGuard::Lease,
                NOW_MS + 3,
            )
            .await;
        assert_eq!(
            again.expect("finish"),
            FinishOutcome::Refused(Some(Box::new(pending.clone()))),
            "finished twice"
        );

        assert!(!store
            .routed(&r.pk, "owner-x", NOW_MS + 4)
            .await
            .expect("routed"));
        assert_eq!(must_get(store, &r.pk).await, pending);
        assert!(store
            .routed(&r.pk, "owner-a", NOW_MS + 5)
            .await
            .expect("routed"));
        let routed = IdempotencyRecord {
            request: Vec::new(),
            route_pending: false,
            lease_until_ms: None,
            inflight_shard: None,
            updated_at_ms: NOW_MS + 5,
            ..pending.clone()
        };
        assert_eq!(must_get(store, &r.pk).await, routed);
        assert!(!store
            .routed(&r.pk, "owner-a", NOW_MS + 6)
            .await
            .expect("routed"));
        assert_eq!(must_get(store, &r.pk).await, routed);
    }

    // The no-slot guard: a slot id recorded while the holder decided to route.
    let r = sample_record(prefix, "finish-guard", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    store
        .record_slot_id(&r.pk, "SLOT-LATE", NOW_MS + 1)
        .await
        .expect("record_slot_id");
    let with_slot = must_get(store, &r.pk).await;
    let done = store
        .finish(
            &r.pk,
            "owner-a",
            RecordStatus::Manual,
            "past retention",
            item,
            FinishGuard::LeaseAndNoSlot,
            NOW_MS + 2,
        )
        .await;
    assert_eq!(
        done.expect("finish"),
        FinishOutcome::Refused(Some(Box::new(with_slot.clone())))
    );
    assert_eq!(must_get(store, &r.pk).await, with_slot);

    let missing = format!("{prefix}#no-such-key-finish");
    let done = store
        .finish(
            &missing,
            "owner-a",
            RecordStatus::Failed,
            "x",
            item,
            FinishGuard::Lease,
            NOW_MS,
        )
        .await;
    assert_eq!(done.expect("finish"), FinishOutcome::Refused(None));
    assert_eq!(store.get(&missing).await.expect("get"), None);
}

/// `record_slot_id` accumulates distinct slot ids (a string set) whatever the state, leaves
/// `slot_id` alone, and creates nothing for a missing record.
pub async fn record_slot_id_accumulates(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "slot-ids", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let before = store.multi_slot_keys().await.expect("multi_slot_keys");
    let after = store
        .record_slot_id(&r.pk, "SLOT-0", NOW_MS + 1)
        .await
        .expect("record_slot_id")
        .expect("the record after the write");
    assert_eq!(after.slot_ids, set(&["SLOT-0"]));
    assert_eq!(after.status, RecordStatus::InFlight);
    assert_eq!(must_get(store, &r.pk).await.slot_ids, set(&["SLOT-0"]));

    let b = BusinessRow::for_record(&r, "SLOT-1", NOW_MS + 2);
    let out = store
        .commit(
            &r.pk,
            "owner-a",
            "SLOT-1",
            &b,
            Some(&sample_natural_key(&b)),
            NOW_MS + 2,
        )
        .await
        .expect("commit");
    assert!(matches!(out, CommitOutcome::Committed));
    let mut counts = Vec::new();
    for slot in ["SLOT-2", "SLOT-2", "SLOT-3", "SLOT-1"] {
        counts.push(
            store
                .record_slot_id(&r.pk, slot, NOW_MS + 3)
                .await
                .expect("record_slot_id")
                .map_or(0, |r| r.slot_ids.len()),
        );
    }
    assert_eq!(counts, vec![3, 3, 4, 4]);
    // The record is now found by the distinct-slot signal, without a scan.
    assert_eq!(
        store.multi_slot_keys().await.expect("multi_slot_keys"),
        before + 1
    );
    let stored = must_get(store, &r.pk).await;
    assert_eq!(
        stored.slot_ids,
        set(&["SLOT-0", "SLOT-1", "SLOT-2", "SLOT-3"])
    );
    assert_eq!(stored.slot_id.as_deref(), Some("SLOT-1"));
    assert_eq!(stored.status, RecordStatus::Committed);
    assert_eq!(stored.updated_at_ms, NOW_MS + 3);

    let missing = format!("{prefix}#no-such-key-slots");
    let none = store
        .record_slot_id(&missing, "SLOT-9", NOW_MS)
        .await
        .expect("record_slot_id");
    assert_eq!(none, None);
    assert_eq!(store.get(&missing).await.expect("get"), None);
}

/// `stale_in_flight` on shard `"07"`: 5 stale `in_flight` records, limit 2, give pages of 2, 2
/// and 1, oldest first, the last without a cursor, each entry exactly the record's
/// [`InFlightEntry`] (so a projection that drops one of its attributes fails here). Absent: a record created at or after the
/// bound, committed and failed records (they left the sparse index), and other shards.
pub async fn stale_in_flight_paginates(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let shard = "07";
    let base = NOW_MS - 10 * 60_000;
    let in_shard = |name: &str, created: i64| IdempotencyRecord {
        inflight_shard: Some(shard.to_string()),
        ..sample_record(prefix, name, "owner-a", created)
    };
    // Reserved newest first, so insertion order is not the answer.
    let mut expected = Vec::new();
    for i in (0..5).rev() {
        let r = in_shard(&format!("stale-{i}"), base + i * 1000);
        must_reserve(store, &r, NOW_MS).await;
        expected.push(InFlightEntry::from(&r));
    }
    expected.reverse();
    let bound = base + 5 * 1000;
    must_reserve(store, &in_shard("stale-too-new", bound), NOW_MS).await;
    let committed = in_shard("stale-committed", base - 500);
    must_reserve(store, &committed, NOW_MS).await;
    let b = BusinessRow::for_record(&committed, "SLOT-C", NOW_MS);
    let out = store
        .commit(
            &committed.pk,
            "owner-a",
            "SLOT-C",
            &b,
            Some(&sample_natural_key(&b)),
            NOW_MS,
        )
        .await
        .expect("commit");
    assert!(matches!(out, CommitOutcome::Committed));
    let failed = in_shard("stale-failed", base - 400);
    must_reserve(store, &failed, NOW_MS).await;
    let out = store
        .finish(
            &failed.pk,
            "owner-a",
            RecordStatus::Failed,
            "x",
            b"{}",
            FinishGuard::Lease,
            NOW_MS,
        )
        .await
        .expect("finish");
    assert_eq!(out, FinishOutcome::Finished);
    assert!(store
        .routed(&failed.pk, "owner-a", NOW_MS)
        .await
        .expect("routed"));
    let other_shard = IdempotencyRecord {
        inflight_shard: Some("08".into()),
        ..sample_record(prefix, "stale-other-shard", "owner-a", base - 300)
    };
    must_reserve(store, &other_shard, NOW_MS).await;

    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .stale_in_flight(shard, bound, cursor, 2)
            .await
            .expect("stale_in_flight");
        assert!(page.entries.len() <= 2, "page over the limit");
        pages.push(page.entries);
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
        assert!(pages.len() < 10, "pagination does not end");
    }
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![2, 2, 1], "pages");
    let got: Vec<InFlightEntry> = pages.into_iter().flatten().collect();
    assert_eq!(
        got, expected,
        "oldest first, exactly the stale in_flight records"
    );

    let all = store
        .stale_in_flight(shard, bound, None, 100)
        .await
        .expect("stale_in_flight");
    assert_eq!(all.entries, expected);
    assert_eq!(all.cursor, None);
    let none = store
        .stale_in_flight(shard, base, None, 100)
        .await
        .expect("stale_in_flight");
    assert!(none.entries.is_empty(), "created_before is exclusive");
}

/// Data minimisation (issue 13): the stored claim request holds the release PIN and is never sent
/// again once a record leaves `in_flight`, so `commit` and `finish` (as `failed` and as `manual`)
/// remove it; a record still `in_flight` keeps it (a take-over resends it), also after a lease
/// release and a take-over; a commit refused because the record was finished returns it without.
pub async fn finished_records_hold_no_request(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let held = sample_record(prefix, "minimise-held", "owner-a", NOW_MS);
    must_reserve(store, &held, NOW_MS).await;
    store
        .release_lease(&held.pk, "owner-a", NOW_MS + 1)
        .await
        .expect("release");
    match store
        .take_over(
            &held.pk,
            "owner-a",
            "owner-b",
            NOW_MS + LEASE_MS,
            NOW_MS + 2,
        )
        .await
        .expect("take over")
    {
        TakeOver::Taken(r) => assert_eq!(r.request, held.request, "in_flight keeps it"),
        TakeOver::Refused => panic!("take-over of a released lease refused"),
    }
    assert_eq!(must_get(store, &held.pk).await.request, held.request);

    let committed = sample_record(prefix, "minimise-commit", "owner-a", NOW_MS);
    must_reserve(store, &committed, NOW_MS).await;
    let booking = BusinessRow::for_record(&committed, "SLOT-M", NOW_MS + 1);
    let out = store
        .commit(
            &committed.pk,
            "owner-a",
            "SLOT-M",
            &booking,
            Some(&sample_natural_key(&booking)),
            NOW_MS + 1,
        )
        .await;
    assert!(matches!(out.expect("commit"), CommitOutcome::Committed));
    assert!(must_get(store, &committed.pk).await.request.is_empty());

    for (name, status) in [
        ("minimise-failed", RecordStatus::Failed),
        ("minimise-manual", RecordStatus::Manual),
    ] {
        let r = sample_record(prefix, name, "owner-a", NOW_MS);
        must_reserve(store, &r, NOW_MS).await;
        // Marked: the claim request is replaced by the manual item until the send is confirmed.
        let item = br#"{"reason":"past_key_retention"}"#;
        assert_eq!(
            store
                .finish(
                    &r.pk,
                    "owner-a",
                    status,
                    "routed",
                    item,
                    FinishGuard::Lease,
                    NOW_MS + 1
                )
                .await
                .expect("finish"),
            FinishOutcome::Finished
        );
        assert_eq!(must_get(store, &r.pk).await.request, item.to_vec());
        assert!(store
            .routed(&r.pk, "owner-a", NOW_MS + 2)
            .await
            .expect("routed"));
        let finished = must_get(store, &r.pk).await;
        assert_eq!(finished.status, status);
        assert!(
            finished.request.is_empty(),
            "{name}: the request outlived the routing"
        );
        let b = BusinessRow::for_record(&r, "SLOT-X", NOW_MS + 3);
        match store
            .commit(
                &r.pk,
                "owner-a",
                "SLOT-X",
                &b,
                Some(&sample_natural_key(&b)),
                NOW_MS + 3,
            )
            .await
            .expect("commit")
        {
            CommitOutcome::Refused(existing) => assert!(existing.request.is_empty()),
            CommitOutcome::Committed | CommitOutcome::CommittedCollision { .. } => {
                panic!("committed a finished record")
            }
        }
    }
}

/// Signal 4: two event keys committed for one equipment number and window start. The first
/// commit writes the natural-key item; the second meets it, is retried without it, commits (record
/// and booking) and names the first event key; a retried first commit is still plain `Committed`;
/// another window of the same container is no collision.
pub async fn natural_key_collision_is_reported(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let first = sample_record(prefix, "nk-first", "owner-a", NOW_MS);
    let second = sample_record(prefix, "nk-second", "owner-b", NOW_MS);
    let mut other_window = sample_record(prefix, "nk-other-window", "owner-c", NOW_MS);
    other_window.labels = sample_labels("2025-06-09T12:00:00Z", "2025-06-09T14:00:00Z");
    assert_eq!(first.label("container"), second.label("container"));
    for r in [&first, &second, &other_window] {
        must_reserve(store, r, NOW_MS).await;
    }
    let commit = |r: &IdempotencyRecord, owner: &'static str, slot: &'static str| {
        let booking = BusinessRow::for_record(r, slot, NOW_MS + 10);
        let pk = r.pk.clone();
        async move {
            store
                .commit(
                    &pk,
                    owner,
                    slot,
                    &booking,
                    Some(&sample_natural_key(&booking)),
                    NOW_MS + 10,
                )
                .await
                .expect("commit")
        }
    };
    assert_eq!(
        commit(&first, "owner-a", "SLOT-A").await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&second, "owner-b", "SLOT-B").await,
        CommitOutcome::CommittedCollision {
            other_event_key: first.event_key.clone()
        }
    );
    let b = must_get(store, &second.pk).await;
    assert_eq!(b.status, RecordStatus::Committed);
    assert_eq!(b.slot_id.as_deref(), Some("SLOT-B"));
    assert_eq!(
        store
            .booking(&second.event_key)
            .await
            .expect("booking")
            .map(|b| b.effect_id),
        Some("SLOT-B".to_string())
    );
    // The first commit's retry recognises itself, collision-free.
    assert_eq!(
        commit(&first, "owner-a", "SLOT-A").await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&other_window, "owner-c", "SLOT-C").await,
        CommitOutcome::Committed
    );
}

/// A holder that lost its lease recorded its slot id on the record (`record_slot_id`); the new
/// holder commits another slot: committed, both ids in `slot_ids`, and the key counted by
/// `multi_slot_keys` (the terminal issued two slots for one key).
pub async fn commit_over_another_recorded_slot_is_counted(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "two-slots", "owner-b", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let before = store.multi_slot_keys().await.expect("multi_slot_keys");
    store
        .record_slot_id(&r.pk, "SLOT-LOST-LEASE", NOW_MS + 1)
        .await
        .expect("record_slot_id");
    assert_eq!(
        store.multi_slot_keys().await.expect("multi_slot_keys"),
        before,
        "one slot id is not two"
    );
    let b = BusinessRow::for_record(&r, "SLOT-NEW", NOW_MS + 2);
    let out = store
        .commit(
            &r.pk,
            "owner-b",
            "SLOT-NEW",
            &b,
            Some(&sample_natural_key(&b)),
            NOW_MS + 2,
        )
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    let stored = must_get(store, &r.pk).await;
    assert_eq!(stored.status, RecordStatus::Committed);
    assert_eq!(stored.slot_id.as_deref(), Some("SLOT-NEW"));
    assert_eq!(stored.slot_ids, set(&["SLOT-LOST-LEASE", "SLOT-NEW"]));
    assert_eq!(
        store.multi_slot_keys().await.expect("multi_slot_keys"),
        before + 1
    );
}

/// Calls `$crate::$callback!(ARGS; case, case, ...)` with every case of the suite: the one list
/// that [`run_all`] and [`store_conformance_tests!`](crate::store_conformance_tests) expand, so a
/// new case cannot be left out of one of them.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conformance_cases {
    ($callback:ident!($($args:tt)*)) => {
        $crate::$callback! {
            $($args)*;
            reserve_new_key_then_conflict,
            reserve_retry_meets_own_write,
            reserve_overwrites_expired,
            concurrent_reserve_one_winner,
            take_over_rules,
            commit_writes_record_and_booking,
            commit_not_in_flight,
            concurrent_commit_one_winner,
            release_lease_then_take_over,
            finish_rules,
            record_slot_id_accumulates,
            finished_records_hold_no_request,
            commit_over_another_recorded_slot_is_counted,
            natural_key_collision_is_reported,
            commit_conditions_alone_and_in_pairs,
            concurrent_take_over_and_commit_one_wins,
            concurrent_record_slot_id_loses_none,
            concurrent_reserve_over_expired_one_winner,
            concurrent_natural_key_one_holder,
            stale_in_flight_paginates
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __run_conformance_cases {
    ($store:ident, $prefix:ident; $($name:ident),*) => {
        $(
            $crate::conformance::$name(
                ::std::sync::Arc::clone(&$store),
                &format!("{}-{}", $prefix, stringify!($name)),
            )
            .await;
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test_fns {
    ($case:ident => $store:expr; $($name:ident),*) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let $case: &str = stringify!($name);
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $store;
                $crate::conformance::$name(store, $case).await;
            }
        )*
    };
}

/// Runs every case in turn on one store (one table pair), each under its own prefix
/// (`"{prefix}-{case}"`): the cases must not disturb each other's keys.
pub async fn run_all(store: Arc<dyn Store>, prefix: &str) {
    crate::__with_conformance_cases!(__run_conformance_cases!(store, prefix));
}

/// One `#[tokio::test]` per conformance case, plus `run_all_on_one_store`: the whole suite for a
/// store implementation in one line. `$case` names a `&str` (the case's name) the store expression
/// may use, e.g. for a fresh table per case:
///
/// ```ignore
/// gate::store_conformance_tests!(case => Arc::new(fresh_store(case).await));
/// ```
///
/// The expression is evaluated once per test (inside an async test function) and must give an
/// `Arc<dyn Store>` (the write path and the index of one store).
#[macro_export]
macro_rules! store_conformance_tests {
    ($case:ident => $store:expr) => {
        $crate::__with_conformance_cases!(__conformance_test_fns!($case => $store));

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn run_all_on_one_store() {
            let $case: &str = "run_all";
            let store: ::std::sync::Arc<dyn $crate::store::Store> = $store;
            $crate::conformance::run_all(store, "all").await;
        }
    };
}
