//! Conformance cases of the commit (step 4) and of what it records: the fenced transaction with
//! the business row, concurrent commits, effect ids recorded by a holder that lost its lease.

use super::*;

/// Commit writes the record (`committed`, `effect_id`, `effect_ids`, the holder kept as
/// `lease_owner`, no `lease_until`, no `inflight_shard`, no stored request, `updated_at` = commit
/// time, the rest unchanged) and the booking, in one call.
pub async fn commit_writes_record_and_booking(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "commit", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let booking = BusinessRow::for_record(&r, "EFFECT-1", NOW_MS + 10);
    match store
        .commit(&r.pk, "owner-a", "EFFECT-1", &booking, NOW_MS + 10)
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
            assert_eq!(c.effect_id.as_deref(), Some("EFFECT-1"));
            assert!(c.effect_ids.contains("EFFECT-1"));
            assert_eq!(c.lease_owner.as_deref(), Some("owner-a"));
            assert_eq!(c.lease_until_ms, None);
            assert_eq!(c.inflight_shard, None);
            assert_eq!(c.updated_at_ms, NOW_MS + 10);
        }
        other => panic!("commit not plainly committed: {other:?}"),
    }
    let expected = IdempotencyRecord {
        status: RecordStatus::Committed,
        effect_id: Some("EFFECT-1".into()),
        effect_ids: set(&["EFFECT-1"]),
        request: Vec::new(),
        lease_until_ms: None,
        inflight_shard: None,
        updated_at_ms: NOW_MS + 10,
        ..r.clone()
    };
    assert_eq!(must_get(store, &r.pk).await, expected);
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
        Some(booking)
    );
}

/// Commit is fenced by the lease: a holder whose lease was taken over is `Refused` with the
/// record as it is (still `in_flight`, the new holder's) and writes nothing; so is a commit on a
/// record that is no longer `in_flight` (after a commit, and after `finish`), which writes no
/// (second) booking. The retry of a commit that landed (same holder, same effect) is `Committed`
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
    let stale = BusinessRow::for_record(&r, "EFFECT-0", NOW_MS + LEASE_MS + 2);
    match store
        .commit(&r.pk, "owner-a", "EFFECT-0", &stale, NOW_MS + LEASE_MS + 2)
        .await
        .expect("commit")
    {
        CommitOutcome::Refused(existing) => assert_eq!(*existing, taken),
        CommitOutcome::Committed => {
            panic!("a holder that lost its lease committed")
        }
    }
    assert_eq!(must_get(store, &r.pk).await, taken);
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
        None
    );

    let first = BusinessRow::for_record(&r, "EFFECT-1", NOW_MS + LEASE_MS + 10);
    let out = store
        .commit(&r.pk, "owner-b", "EFFECT-1", &first, NOW_MS + LEASE_MS + 10)
        .await;
    assert!(matches!(out.expect("commit"), CommitOutcome::Committed));
    let committed = must_get(store, &r.pk).await;
    // The retry of that very commit (its answer lost): committed, nothing written again.
    let out = store
        .commit(&r.pk, "owner-b", "EFFECT-1", &first, NOW_MS + LEASE_MS + 15)
        .await;
    assert!(matches!(out.expect("commit"), CommitOutcome::Committed));
    assert_eq!(must_get(store, &r.pk).await, committed);

    let second = BusinessRow::for_record(&r, "EFFECT-2", NOW_MS + LEASE_MS + 20);
    match store
        .commit(
            &r.pk,
            "owner-b",
            "EFFECT-2",
            &second,
            NOW_MS + LEASE_MS + 20,
        )
        .await
        .expect("commit")
    {
        CommitOutcome::Refused(existing) => assert_eq!(*existing, committed),
        CommitOutcome::Committed => {
            panic!("committed twice")
        }
    }
    assert_eq!(must_get(store, &r.pk).await, committed);
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
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
                "server answered 400",
                b"{}",
                FinishGuard::Lease,
                NOW_MS + 1
            )
            .await
            .expect("finish"),
        FinishOutcome::Finished
    );
    let failed = must_get(store, &f.pk).await;
    let b = BusinessRow::for_record(&f, "EFFECT-F", NOW_MS + 2);
    match store
        .commit(&f.pk, "owner-a", "EFFECT-F", &b, NOW_MS + 2)
        .await
        .expect("commit")
    {
        CommitOutcome::Refused(existing) => {
            assert_eq!(*existing, failed);
            assert_eq!(existing.status, RecordStatus::Failed);
        }
        CommitOutcome::Committed => {
            panic!("committed a failed record")
        }
    }
    assert_eq!(
        store.business_row(&f.event_key).await.expect("booking"),
        None
    );

    // No record at all.
    let ghost = sample_record(prefix, "commit-ghost", "owner-a", NOW_MS);
    let b = BusinessRow::for_record(&ghost, "EFFECT-G", NOW_MS);
    let out = store
        .commit(&ghost.pk, "owner-a", "EFFECT-G", &b, NOW_MS)
        .await;
    assert!(matches!(out, Err(StoreError::Corrupt(_))), "{out:?}");
    assert_eq!(
        store.business_row(&ghost.event_key).await.expect("booking"),
        None
    );
    assert_eq!(store.get(&ghost.pk).await.expect("get"), None);

    // A booking without its record: the same event key under another integration (another pk).
    let orphan = IdempotencyRecord {
        pk: format!("{prefix}-other#{}", r.event_key),
        ..sample_record(prefix, "commit-twice", "owner-z", NOW_MS)
    };
    must_reserve(store, &orphan, NOW_MS).await;
    let b = BusinessRow::for_record(&orphan, "EFFECT-Z", NOW_MS + 30);
    let out = store
        .commit(&orphan.pk, "owner-z", "EFFECT-Z", &b, NOW_MS + 30)
        .await;
    assert!(matches!(out, Err(StoreError::Corrupt(_))), "{out:?}");
    assert_eq!(
        must_get(store, &orphan.pk).await,
        orphan,
        "transaction not atomic"
    );
    assert_eq!(
        store
            .business_row(&r.event_key)
            .await
            .expect("booking")
            .map(|b| b.effect_id),
        Some("EFFECT-1".to_string())
    );
}

/// Two holders commit one record at once with different effects: exactly one `Committed`, the
/// other `Refused` carrying the winner's effect (or, on a real table under contention, a
/// `TransactionConflict` after the retries); exactly one booking, with the winner's effect.
pub async fn concurrent_commit_one_winner(store: Arc<dyn Store>, prefix: &str) {
    let r = sample_record(prefix, "commit-race", "owner-a", NOW_MS);
    must_reserve(store.as_ref(), &r, NOW_MS).await;
    let mut tasks = Vec::new();
    for effect in ["EFFECT-A", "EFFECT-B"] {
        let store = Arc::clone(&store);
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let booking = BusinessRow::for_record(&r, effect, NOW_MS + 10);
            let out = store
                .commit(&r.pk, "owner-a", effect, &booking, NOW_MS + 10)
                .await;
            (effect, out)
        }));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            (effect, Ok(CommitOutcome::Committed)) => winners.push(effect),
            (_, Ok(CommitOutcome::Refused(existing))) => losers.push(existing.effect_id.clone()),
            (_, Err(StoreError::TransactionConflict(_))) => losers.push(None),
            (_, Err(e)) => panic!("commit failed: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one commit wins");
    assert_eq!(losers.len(), 1);
    if let Some(seen) = &losers[0] {
        assert_eq!(seen, winners[0], "the loser sees the winner's effect");
    }
    let stored = must_get(store.as_ref(), &r.pk).await;
    assert_eq!(stored.effect_id.as_deref(), Some(winners[0]));
    assert_eq!(stored.effect_ids, set(&[winners[0]]));
    let booking = store
        .business_row(&r.event_key)
        .await
        .expect("booking")
        .expect("a booking");
    assert_eq!(booking.effect_id, winners[0]);
}

/// `record_effect_id` accumulates distinct effect ids (a string set) whatever the state, leaves
/// `effect_id` alone, and creates nothing for a missing record.
pub async fn record_effect_id_accumulates(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "effect-ids", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let before = store.multi_effect_keys().await.expect("multi_effect_keys");
    let after = store
        .record_effect_id(&r.pk, "EFFECT-0", NOW_MS + 1)
        .await
        .expect("record_effect_id")
        .expect("the record after the write");
    assert_eq!(after.effect_ids, set(&["EFFECT-0"]));
    assert_eq!(after.status, RecordStatus::InFlight);
    assert_eq!(must_get(store, &r.pk).await.effect_ids, set(&["EFFECT-0"]));

    let b = BusinessRow::for_record(&r, "EFFECT-1", NOW_MS + 2);
    let out = store
        .commit(&r.pk, "owner-a", "EFFECT-1", &b, NOW_MS + 2)
        .await
        .expect("commit");
    assert!(matches!(out, CommitOutcome::Committed));
    let mut counts = Vec::new();
    for effect in ["EFFECT-2", "EFFECT-2", "EFFECT-3", "EFFECT-1"] {
        counts.push(
            store
                .record_effect_id(&r.pk, effect, NOW_MS + 3)
                .await
                .expect("record_effect_id")
                .map_or(0, |r| r.effect_ids.len()),
        );
    }
    assert_eq!(counts, vec![3, 3, 4, 4]);
    // The record is now found by the distinct-effect signal, without a scan.
    assert_eq!(
        store.multi_effect_keys().await.expect("multi_effect_keys"),
        before + 1
    );
    let stored = must_get(store, &r.pk).await;
    assert_eq!(
        stored.effect_ids,
        set(&["EFFECT-0", "EFFECT-1", "EFFECT-2", "EFFECT-3"])
    );
    assert_eq!(stored.effect_id.as_deref(), Some("EFFECT-1"));
    assert_eq!(stored.status, RecordStatus::Committed);
    assert_eq!(stored.updated_at_ms, NOW_MS + 3);

    let missing = format!("{prefix}#no-such-key-effects");
    let none = store
        .record_effect_id(&missing, "EFFECT-9", NOW_MS)
        .await
        .expect("record_effect_id");
    assert_eq!(none, None);
    assert_eq!(store.get(&missing).await.expect("get"), None);
}

/// A holder that lost its lease recorded its effect id on the record (`record_effect_id`); the new
/// holder commits another effect: committed, both ids in `effect_ids`, and the key counted by
/// `multi_effect_keys` (the server issued two effects for one key).
pub async fn commit_over_another_recorded_effect_is_counted(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "two-effects", "owner-b", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let before = store.multi_effect_keys().await.expect("multi_effect_keys");
    store
        .record_effect_id(&r.pk, "EFFECT-LOST-LEASE", NOW_MS + 1)
        .await
        .expect("record_effect_id");
    assert_eq!(
        store.multi_effect_keys().await.expect("multi_effect_keys"),
        before,
        "one effect id is not two"
    );
    let b = BusinessRow::for_record(&r, "EFFECT-NEW", NOW_MS + 2);
    let out = store
        .commit(&r.pk, "owner-b", "EFFECT-NEW", &b, NOW_MS + 2)
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    let stored = must_get(store, &r.pk).await;
    assert_eq!(stored.status, RecordStatus::Committed);
    assert_eq!(stored.effect_id.as_deref(), Some("EFFECT-NEW"));
    assert_eq!(stored.effect_ids, set(&["EFFECT-LOST-LEASE", "EFFECT-NEW"]));
    assert_eq!(
        store.multi_effect_keys().await.expect("multi_effect_keys"),
        before + 1
    );
}
