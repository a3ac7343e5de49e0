//! Conformance cases of routing a record to a person (`finish`, `routed`) and of data
//! minimisation (no stored request once a record is finished).

use super::*;

/// `finish` by the holder ends an `in_flight` record as `failed` or `manual` with the error and
/// its routing pending: the stored request replaced by the manual item, `route_pending` set, the
/// lease and `inflight_shard` kept. By another owner it is refused with the record as it is; the
/// retry of a finish that landed is `Finished` and changes nothing; a second finish as another
/// status is refused. `routed` by a stranger is refused; by the holder it removes the pending
/// mark, the item, `lease_until` and `inflight_shard` (keeping `lease_owner` as the last holder);
/// a second `routed` is refused and changes nothing. [`FinishGuard::LeaseAndNoEffect`] refuses a
/// record that holds an effect id.
pub async fn finish_rules(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let item = br#"{"reason":"server_rejected"}"#;
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
                "server answered 422",
                item,
                FinishGuard::Lease,
                NOW_MS + 2,
            )
        };
        assert_eq!(finish().await.expect("finish"), FinishOutcome::Finished);
        let pending = IdempotencyRecord {
            status,
            error: Some("server answered 422".into()),
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

    // The no-effect guard: an effect id recorded while the holder decided to route.
    let r = sample_record(prefix, "finish-guard", "owner-a", NOW_MS);
    must_reserve(store, &r, NOW_MS).await;
    store
        .record_effect_id(&r.pk, "EFFECT-LATE", NOW_MS + 1)
        .await
        .expect("record_effect_id");
    let with_effect = must_get(store, &r.pk).await;
    let done = store
        .finish(
            &r.pk,
            "owner-a",
            RecordStatus::Manual,
            "past retention",
            item,
            FinishGuard::LeaseAndNoEffect,
            NOW_MS + 2,
        )
        .await;
    assert_eq!(
        done.expect("finish"),
        FinishOutcome::Refused(Some(Box::new(with_effect.clone())))
    );
    assert_eq!(must_get(store, &r.pk).await, with_effect);

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

/// Data minimisation: the stored request may hold secrets (the release PIN on the
/// truck-slot path) and is never sent
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
    let booking = BusinessRow::for_record(&committed, "EFFECT-M", NOW_MS + 1);
    let out = store
        .commit(&committed.pk, "owner-a", "EFFECT-M", &booking, NOW_MS + 1)
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
        let b = BusinessRow::for_record(&r, "EFFECT-X", NOW_MS + 3);
        match store
            .commit(&r.pk, "owner-a", "EFFECT-X", &b, NOW_MS + 3)
            .await
            .expect("commit")
        {
            CommitOutcome::Refused(existing) => assert!(existing.request.is_empty()),
            CommitOutcome::Committed => {
                panic!("committed a finished record")
            }
        }
    }
}
