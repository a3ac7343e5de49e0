//! Conformance cases of the reserve (step 2): a new key, the retry of a landed write, an
//! expired record, concurrent reserves.

use super::*;

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

    // Every optional field set (a record as it may look after take-overs and effect records).
    let full = IdempotencyRecord {
        effect_id: Some("EFFECT-FULL-1".into()),
        effect_ids: set(&["EFFECT-FULL-1", "EFFECT-FULL-2"]),
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
        effect_id: Some("EFFECT-OLD".into()),
        effect_ids: set(&["EFFECT-OLD"]),
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
        stored.effect_ids,
        BTreeSet::new(),
        "old effect ids must not survive"
    );

    // An expired record that still has work (`in_flight`, or a routing not yet confirmed) is a
    // conflict: whoever meets it takes it over with its history (creation time, operation key,
    // stored request), never starts afresh under a key the server may have forgotten.
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
