//! Conformance cases of the lease: take-over rules, release then take-over, the extension before
//! a call.

use super::*;

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

/// `extend_lease` (before a call the lease left would not cover) moves only the lease and
/// `updated_at`, fenced by the owner token: a stranger is refused and changes nothing; the owner
/// extends a live lease and one that has run out but was not taken over; the retry of an
/// extension that landed (its answer lost) is recognised (`true`, the same values); after a
/// take-over the old holder is refused and the new holder's lease is untouched; a released lease
/// is refused (the holder gave it up) and can be taken over at once, an absent one is not a
/// released one; a committed
/// record and a missing one are refused; and a take-over of the extended lease waits for its new
/// end.
pub async fn extend_lease_is_fenced_by_the_owner(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let r = sample_record(prefix, "extend", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    let until = NOW_MS + LEASE_MS;

    let by_stranger = store
        .extend_lease(&r.pk, "owner-x", until + LEASE_MS, NOW_MS + 1)
        .await
        .expect("extend_lease");
    assert!(!by_stranger, "a stranger extended the lease");
    assert_eq!(must_get(store, &r.pk).await, r, "a refused extension wrote");

    // A live lease, extended by its owner.
    let extended_until = NOW_MS + 20_000 + LEASE_MS;
    assert!(store
        .extend_lease(&r.pk, "owner-a", extended_until, NOW_MS + 20_000)
        .await
        .expect("extend_lease"));
    let extended = IdempotencyRecord {
        lease_until_ms: Some(extended_until),
        updated_at_ms: NOW_MS + 20_000,
        ..r.clone()
    };
    assert_eq!(must_get(store, &r.pk).await, extended);

    // The client's retry of that write (it landed, the answer was lost) meets its own token.
    assert!(
        store
            .extend_lease(&r.pk, "owner-a", extended_until, NOW_MS + 20_000)
            .await
            .expect("extend_lease"),
        "the retry of a landed extension was not recognised"
    );
    assert_eq!(must_get(store, &r.pk).await, extended);

    // The old end has passed, the new one not: no take-over.
    let t = store
        .take_over(&r.pk, "owner-a", "owner-b", until + 1 + LEASE_MS, until + 1)
        .await
        .expect("take_over");
    assert_eq!(t, TakeOver::Refused, "took over an extended lease");

    // Run out, not taken over: still the owner's, so it may extend.
    let late = extended_until + 5;
    assert!(store
        .extend_lease(&r.pk, "owner-a", late + LEASE_MS, late)
        .await
        .expect("extend_lease"));
    assert_eq!(
        must_get(store, &r.pk).await.lease_until_ms,
        Some(late + LEASE_MS)
    );

    // Taken over after that lease: the old holder's extension is refused, nothing changes.
    let taken_at = late + LEASE_MS + 1;
    let taken = match store
        .take_over(&r.pk, "owner-a", "owner-b", taken_at + LEASE_MS, taken_at)
        .await
        .expect("take_over")
    {
        TakeOver::Taken(now) => *now,
        TakeOver::Refused => panic!("take-over of an expired lease refused"),
    };
    assert!(!store
        .extend_lease(&r.pk, "owner-a", taken_at + 2 * LEASE_MS, taken_at + 1)
        .await
        .expect("extend_lease"));
    assert_eq!(must_get(store, &r.pk).await, taken, "the old holder wrote");

    // Released by its holder (a transient failure, an extension that answered an error): an
    // extension of the same holder landing late (an attempt still queued) does not hold the
    // record again against the redelivery.
    store
        .release_lease(&r.pk, "owner-b", taken_at + 1)
        .await
        .expect("release_lease");
    let released = must_get(store, &r.pk).await;
    assert_eq!(released.lease_until_ms, Some(0), "{released:?}");
    assert!(
        !store
            .extend_lease(&r.pk, "owner-b", taken_at + 2 * LEASE_MS, taken_at + 1)
            .await
            .expect("extend_lease"),
        "a released lease was extended"
    );
    assert_eq!(
        must_get(store, &r.pk).await,
        released,
        "a released lease changed"
    );
    let taken = match store
        .take_over(
            &r.pk,
            "owner-b",
            "owner-b2",
            taken_at + 1 + LEASE_MS,
            taken_at + 1,
        )
        .await
        .expect("take_over")
    {
        TakeOver::Taken(now) => *now,
        TakeOver::Refused => panic!("take-over of a released lease refused"),
    };
    assert_eq!(taken.lease_owner.as_deref(), Some("owner-b2"));

    // Committed by the new holder: nobody extends it any more.
    let booking = BusinessRow::for_record(&taken, "EFFECT-1", taken_at + 2);
    assert_eq!(
        store
            .commit(&r.pk, "owner-b2", "EFFECT-1", &booking, taken_at + 2)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    let committed = must_get(store, &r.pk).await;
    assert!(!store
        .extend_lease(&r.pk, "owner-b2", taken_at + 3 + LEASE_MS, taken_at + 3)
        .await
        .expect("extend_lease"));
    assert_eq!(
        must_get(store, &r.pk).await,
        committed,
        "a committed record was extended"
    );

    // A record with no lease stored (none of the gate's writes leaves one; a released lease is
    // 0, not absent): not a released lease, so its owner extends it on every store.
    let bare = IdempotencyRecord {
        lease_until_ms: None,
        ..sample_record(prefix, "extend-bare", "owner-a", NOW_MS)
    };
    must_reserve(store, &bare, NOW_MS).await;
    assert!(
        store
            .extend_lease(&bare.pk, "owner-a", NOW_MS + LEASE_MS, NOW_MS)
            .await
            .expect("extend_lease"),
        "an absent lease was taken for a released one"
    );
    assert_eq!(
        must_get(store, &bare.pk).await.lease_until_ms,
        Some(NOW_MS + LEASE_MS)
    );

    // A missing record: refused, nothing created.
    let missing = format!("{prefix}#no-such-key-extend");
    assert!(!store
        .extend_lease(&missing, "owner-a", NOW_MS + LEASE_MS, NOW_MS)
        .await
        .expect("extend_lease"));
    assert_eq!(store.get(&missing).await.expect("get"), None);
}
