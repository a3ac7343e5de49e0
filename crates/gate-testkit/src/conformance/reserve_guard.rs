//! Conformance cases of the reserve with the guard (`reserve_with_guard`, the consumer's step 2
//! for a new record it is to call): whatever the store does in one request or two, the outcome is
//! exactly the reserve's followed, where it reserved, by the guard's.

use super::*;
use gate::store::{GuardOutcome, ReserveAndGuard};

async fn reserve_guarded(
    store: &dyn IdempotencyStore,
    record: &IdempotencyRecord,
    now_ms: i64,
) -> ReserveAndGuard {
    store
        .reserve_with_guard(record, Some(&sample_natural_key(record, now_ms)), now_ms)
        .await
        .expect("reserve_with_guard")
}

fn reserved(guard: GuardOutcome) -> ReserveAndGuard {
    ReserveAndGuard {
        reservation: Reservation::Reserved,
        guard: Some(Ok(guard)),
    }
}

fn conflict(existing: &IdempotencyRecord) -> ReserveAndGuard {
    ReserveAndGuard {
        reservation: Reservation::Conflict(Box::new(existing.clone())),
        guard: None,
    }
}

/// A sample record of case `name` for the window starting at 2025-06-09 `hour`:00 (one natural
/// key per hour: the cases below must not meet each other's guards).
fn in_window(prefix: &str, name: &str, owner: &str, now_ms: i64, hour: u8) -> IdempotencyRecord {
    let mut r = sample_record(prefix, name, owner, now_ms);
    r.labels = sample_labels(
        &format!("2025-06-09T{hour:02}:00:00Z"),
        &format!("2025-06-09T{hour:02}:30:00Z"),
    );
    r
}

/// A new key: the record is stored as given and the natural key held for its event key, in one
/// call; another event key for the same natural key then collides with it. Its retry (the same
/// reservation: a write that landed and lost its answer) answers the same. Without a natural key
/// it is the reserve alone: no guard asked, none written. A second event key reserving anew for a
/// natural key the first holds is reserved (its lease is ours) and collides. A natural-key item
/// the store refuses leaves the record reserved and the guard's answer the refusal.
pub async fn reserve_with_guard_reserves_and_guards(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let first = in_window(prefix, "rg-first", "owner-a", NOW_MS, 15);
    let second = in_window(prefix, "rg-second", "owner-b", NOW_MS, 15);
    assert_eq!(
        reserve_guarded(store, &first, NOW_MS).await,
        reserved(GuardOutcome::Held)
    );
    assert_eq!(must_get(store, &first.pk).await, first);
    // The retry of the call that landed: its own reservation, its own guard.
    assert_eq!(
        reserve_guarded(store, &first, NOW_MS + 3).await,
        reserved(GuardOutcome::Held)
    );
    assert_eq!(must_get(store, &first.pk).await, first);

    // Another event key for the same natural key: reserved (an in-flight record under its own
    // lease, for the gate to route to a person), and refused the natural key, naming the first.
    let collision = GuardOutcome::Collision {
        other_event_key: first.event_key.clone(),
    };
    assert_eq!(
        reserve_guarded(store, &second, NOW_MS + 1).await,
        reserved(collision.clone())
    );
    assert_eq!(must_get(store, &second.pk).await, second);
    // Its retry: its own reservation, and the same collision.
    assert_eq!(
        reserve_guarded(store, &second, NOW_MS + 2).await,
        reserved(collision.clone())
    );

    // A natural-key item the store refuses (a label named like a store attribute): the record
    // is reserved, the guard answers the refusal, nothing of it is written.
    let refused = in_window(prefix, "rg-refused", "owner-e", NOW_MS, 14);
    let mut bad_key = sample_natural_key(&refused, NOW_MS);
    bad_key
        .labels
        .insert("expires_at".to_string(), "never".to_string());
    let out = store
        .reserve_with_guard(&refused, Some(&bad_key), NOW_MS)
        .await
        .expect("reserve_with_guard");
    assert_eq!(out.reservation, Reservation::Reserved);
    assert!(
        matches!(out.guard, Some(Err(StoreError::Refused(_)))),
        "{:?}",
        out.guard
    );
    assert_eq!(must_get(store, &refused.pk).await, refused);
    let other = in_window(prefix, "rg-refused-other", "owner-f", NOW_MS, 14);
    assert_eq!(
        store
            .guard(&other, &sample_natural_key(&other, NOW_MS), NOW_MS)
            .await,
        Ok(GuardOutcome::Held),
        "a refused natural key was written"
    );

    // No natural key: the reserve alone.
    let plain = in_window(prefix, "rg-plain", "owner-c", NOW_MS, 16);
    let out = store
        .reserve_with_guard(&plain, None, NOW_MS)
        .await
        .expect("reserve_with_guard");
    assert_eq!(
        out,
        ReserveAndGuard {
            reservation: Reservation::Reserved,
            guard: None
        }
    );
    let other = in_window(prefix, "rg-plain-other", "owner-d", NOW_MS, 16);
    assert_eq!(
        store
            .guard(&other, &sample_natural_key(&other, NOW_MS), NOW_MS)
            .await,
        Ok(GuardOutcome::Held),
        "a reserve without a natural key wrote a guard"
    );
}

/// Where the reserve does not reserve, the guard is not written: a duplicate meeting a live
/// lease (its first holder died before its guard), a duplicate of a finished record, and an
/// expired record with work left each come back as the conflict with the record there, and the
/// natural key stays free for whoever calls first.
pub async fn reserve_with_guard_writes_no_guard_on_a_conflict(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let now_s = ms_to_s(NOW_MS);
    // A holder that reserved and died before its guard; its duplicate under another token.
    let holder = in_window(prefix, "rg-live", "owner-a", NOW_MS, 17);
    must_reserve(store, &holder, NOW_MS).await;
    let duplicate = in_window(prefix, "rg-live", "owner-b", NOW_MS + 1, 17);
    assert_eq!(
        reserve_guarded(store, &duplicate, NOW_MS + 1).await,
        conflict(&holder)
    );
    // A finished (committed) record, not expired.
    let done = in_window(prefix, "rg-done", "owner-a", NOW_MS, 18);
    must_reserve(store, &done, NOW_MS).await;
    let row = BusinessRow::for_record(&done, "EFFECT-RG", NOW_MS + 1);
    assert_eq!(
        store
            .commit(&done.pk, "owner-a", "EFFECT-RG", &row, NOW_MS + 1)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    let done_now = must_get(store, &done.pk).await;
    let again = in_window(prefix, "rg-done", "owner-b", NOW_MS + 2, 18);
    assert_eq!(
        reserve_guarded(store, &again, NOW_MS + 2).await,
        conflict(&done_now)
    );
    // An expired record with work left (in flight, its lease long gone): a conflict, to be taken
    // over, never replaced.
    let stranded = IdempotencyRecord {
        expires_at_s: now_s,
        // Not shard "07": `stale_in_flight_paginates` owns that shard on a shared table.
        inflight_shard: Some("14".into()),
        ..in_window(
            prefix,
            "rg-stranded",
            "owner-old",
            NOW_MS - TTL_S * 1000,
            19,
        )
    };
    must_reserve(store, &stranded, NOW_MS - TTL_S * 1000).await;
    let fresh = in_window(prefix, "rg-stranded", "owner-new", NOW_MS + 1000, 19);
    assert_eq!(
        reserve_guarded(store, &fresh, NOW_MS + 1000).await,
        conflict(&stranded)
    );

    // None of them wrote a guard: each natural key is free for another event key.
    for (name, hour) in [("rg-live-x", 17), ("rg-done-x", 18), ("rg-stranded-x", 19)] {
        let other = in_window(prefix, name, "owner-x", NOW_MS + 1000, hour);
        assert_eq!(
            store
                .guard(
                    &other,
                    &sample_natural_key(&other, NOW_MS + 1000),
                    NOW_MS + 1000
                )
                .await,
            Ok(GuardOutcome::Held),
            "a conflicting reserve wrote the guard of {name}"
        );
    }
}

/// The take-over of an expired record with nothing left to do: the record is replaced and the
/// guard written with it; a natural key whose item has expired is taken from its old holder, as
/// the guard takes it. The lease of the reservation fences as the reserve's does: once it is
/// taken over, its first holder cannot commit, and the new holder (the same event key) meets
/// its own guard.
pub async fn reserve_with_guard_replaces_expired_and_fences_its_lease(
    store: Arc<dyn Store>,
    prefix: &str,
) {
    let store = store.as_ref();
    let now_s = ms_to_s(NOW_MS);
    let old = IdempotencyRecord {
        status: RecordStatus::Committed,
        effect_id: Some("EFFECT-OLD".into()),
        effect_ids: set(&["EFFECT-OLD"]),
        lease_owner: None,
        lease_until_ms: None,
        inflight_shard: None,
        expires_at_s: now_s,
        ..in_window(prefix, "rg-expired", "owner-old", NOW_MS - TTL_S * 1000, 20)
    };
    must_reserve(store, &old, NOW_MS - TTL_S * 1000).await;
    // The same second as its expiry: still live, a conflict, no guard.
    let early = in_window(prefix, "rg-expired", "owner-new", NOW_MS + 999, 20);
    assert_eq!(
        reserve_guarded(store, &early, NOW_MS + 999).await,
        conflict(&old)
    );
    // One second later: replaced, and guarded.
    let fresh = in_window(prefix, "rg-expired", "owner-new", NOW_MS + 1000, 20);
    assert_eq!(
        reserve_guarded(store, &fresh, NOW_MS + 1000).await,
        reserved(GuardOutcome::Held)
    );
    assert_eq!(must_get(store, &fresh.pk).await, fresh);

    // Its lease taken over once expired: the old holder is fenced, the new one holds the guard.
    let later = NOW_MS + 1000 + LEASE_MS + 1;
    let taken = match store
        .take_over(&fresh.pk, "owner-new", "owner-r", later + LEASE_MS, later)
        .await
        .expect("take_over")
    {
        TakeOver::Taken(t) => *t,
        TakeOver::Refused => panic!("take-over refused"),
    };
    let row = BusinessRow::for_record(&fresh, "EFFECT-NEW", later + 1);
    assert!(matches!(
        store
            .commit(&fresh.pk, "owner-new", "EFFECT-NEW", &row, later + 1)
            .await
            .expect("commit"),
        CommitOutcome::Refused(_)
    ));
    assert_eq!(
        store
            .guard(&taken, &sample_natural_key(&taken, later), later)
            .await,
        Ok(GuardOutcome::Held)
    );
    assert_eq!(
        store
            .commit(&fresh.pk, "owner-r", "EFFECT-NEW", &row, later + 1)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );

    // Past the natural key's expiry (epoch seconds), a new event key takes it in its reserve.
    let expires_at_s = sample_natural_key(&fresh, later).expires_at_s;
    let past = (expires_at_s + 1) * 1_000;
    let third = in_window(prefix, "rg-expired-third", "owner-t", past, 20);
    assert_eq!(
        reserve_guarded(store, &third, past).await,
        reserved(GuardOutcome::Held)
    );
    assert_eq!(
        store
            .guard(&taken, &sample_natural_key(&taken, past), past)
            .await,
        Ok(GuardOutcome::Collision {
            other_event_key: third.event_key.clone()
        }),
        "the expired holder kept the natural key"
    );
}

/// 16 tasks at once: 8 copies of one event (one key, 8 lease tokens) and 8 other event keys for
/// the same natural key, all through the reserve with the guard. Exactly one copy reserves, the
/// other 7 conflict with its record and write nothing; of the 9 reservations exactly one holds
/// the natural key and the 8 others collide with it.
pub async fn concurrent_reserve_with_guard_one_holder(store: Arc<dyn Store>, prefix: &str) {
    let mut records = Vec::new();
    for i in 0..8 {
        records.push(in_window(
            prefix,
            "rg-race",
            &format!("copy-{i}"),
            NOW_MS,
            21,
        ));
        records.push(in_window(
            prefix,
            &format!("rg-race-other-{i}"),
            &format!("other-{i}"),
            NOW_MS,
            21,
        ));
    }
    let tasks: Vec<_> = records
        .iter()
        .cloned()
        .map(|r| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let out = reserve_guarded(store.as_ref(), &r, NOW_MS).await;
                (r, out)
            })
        })
        .collect();
    let mut outs = Vec::new();
    for t in tasks {
        outs.push(t.await.expect("task"));
    }
    let copies: Vec<_> = outs
        .iter()
        .filter(|(r, _)| {
            r.lease_owner
                .as_deref()
                .is_some_and(|o| o.starts_with("copy-"))
        })
        .collect();
    let winners: Vec<_> = copies
        .iter()
        .filter(|(_, o)| o.reservation == Reservation::Reserved)
        .collect();
    assert_eq!(winners.len(), 1, "copies reserved: {copies:?}");
    let winner = &winners[0].0;
    for (r, o) in &copies {
        if r.lease_owner != winner.lease_owner {
            assert_eq!(*o, conflict(winner), "a copy that lost");
        }
    }
    let reservations: Vec<_> = outs
        .iter()
        .filter(|(_, o)| o.reservation == Reservation::Reserved)
        .collect();
    assert_eq!(reservations.len(), 9);
    let holders: Vec<_> = reservations
        .iter()
        .filter(|(_, o)| o.guard == Some(Ok(GuardOutcome::Held)))
        .collect();
    assert_eq!(holders.len(), 1, "{reservations:?}");
    let holder_key = holders[0].0.event_key.clone();
    for (r, o) in &reservations {
        if r.event_key != holder_key {
            assert_eq!(
                o.guard,
                Some(Ok(GuardOutcome::Collision {
                    other_event_key: holder_key.clone()
                })),
                "{}",
                r.pk
            );
        }
    }
}
