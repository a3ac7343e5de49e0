//! Conformance cases of the guard of signal 4 (`guard`): the natural key held by the first event
//! key before any call, whoever of that event key's holders writes it, against every other event
//! key until it expires, whatever became of its holder.

use super::*;
use gate::store::GuardOutcome;

/// A window nobody else in these cases uses.
const OTHER_WINDOW: (&str, &str) = ("2025-06-09T12:00:00Z", "2025-06-09T14:00:00Z");

async fn must_guard(
    store: &dyn IdempotencyStore,
    record: &IdempotencyRecord,
    now_ms: i64,
) -> GuardOutcome {
    store
        .guard(record, &sample_natural_key(record, now_ms), now_ms)
        .await
        .expect("guard")
}

/// The first event key holds the natural key; a second event key for the same subject and
/// window meets it (`Collision` naming the first); the first's retry, a redelivery under another
/// lease token and a take-over of its record all hold it (the same event key is the same
/// holder); another window of the same subject is another natural key; once the item has
/// expired, another event key takes it.
pub async fn guard_holds_the_natural_key_for_its_event_key(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let first = sample_record(prefix, "guard-first", "owner-a", NOW_MS);
    let second = sample_record(prefix, "guard-second", "owner-b", NOW_MS);
    let mut other_window = sample_record(prefix, "guard-other-window", "owner-c", NOW_MS);
    other_window.labels = sample_labels(OTHER_WINDOW.0, OTHER_WINDOW.1);
    assert_eq!(first.label("container"), second.label("container"));
    assert_eq!(first.label("window_start"), second.label("window_start"));
    for r in [&first, &second, &other_window] {
        must_reserve(store, r, NOW_MS).await;
    }

    assert_eq!(must_guard(store, &first, NOW_MS).await, GuardOutcome::Held);
    let collision = GuardOutcome::Collision {
        other_event_key: first.event_key.clone(),
    };
    assert_eq!(must_guard(store, &second, NOW_MS + 1).await, collision);
    // The retry of a guard that landed.
    assert_eq!(
        must_guard(store, &first, NOW_MS + 2).await,
        GuardOutcome::Held
    );
    // Its record taken over after a crash: the new holder's guard is the same event key's.
    let later = NOW_MS + LEASE_MS + 1;
    let taken = match store
        .take_over(&first.pk, "owner-a", "owner-r", later + LEASE_MS, later)
        .await
        .expect("take_over")
    {
        TakeOver::Taken(t) => *t,
        TakeOver::Refused => panic!("take-over refused"),
    };
    assert_eq!(must_guard(store, &taken, later).await, GuardOutcome::Held);
    // The second event key is still refused, as often as it asks.
    assert_eq!(must_guard(store, &second, later).await, collision);
    // Another window is another natural key.
    assert_eq!(
        must_guard(store, &other_window, NOW_MS).await,
        GuardOutcome::Held
    );

    // Past the item's TTL (epoch seconds) the natural key is free again.
    let expires_at_s = sample_natural_key(&first, later).expires_at_s;
    let past = (expires_at_s + 1) * 1_000;
    let mut third = sample_record(prefix, "guard-third", "owner-d", past);
    third.labels = first.labels.clone();
    assert_eq!(must_guard(store, &third, past).await, GuardOutcome::Held);
    assert_eq!(
        must_guard(store, &first, past).await,
        GuardOutcome::Collision {
            other_event_key: third.event_key.clone()
        },
        "the expired holder lost the natural key to the one that took it"
    );
}

/// The plain finish never releases the guard: a holder finished as `manual` (a person decides;
/// it may hold an effect nobody knows of) or `failed` through `finish` keeps the natural key, so
/// another event key for the same event still goes to a person rather than calling. A committed
/// holder keeps it likewise. (Only `finish_without_effect` releases it.)
pub async fn guard_outlives_a_failed_or_manual_holder(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let item = br#"{"reason":"terminal_rejected"}"#;
    for (i, status) in [
        RecordStatus::Failed,
        RecordStatus::Manual,
        RecordStatus::Committed,
    ]
    .into_iter()
    .enumerate()
    {
        let mut holder = sample_record(prefix, &format!("guard-holder-{i}"), "owner-a", NOW_MS);
        let mut other = sample_record(prefix, &format!("guard-other-{i}"), "owner-b", NOW_MS);
        // One window per status: three natural keys.
        let start = format!("2025-06-09T1{i}:00:00Z");
        let end = format!("2025-06-09T1{i}:30:00Z");
        holder.labels = sample_labels(&start, &end);
        other.labels = holder.labels.clone();
        must_reserve(store, &holder, NOW_MS).await;
        must_reserve(store, &other, NOW_MS).await;
        assert_eq!(must_guard(store, &holder, NOW_MS).await, GuardOutcome::Held);
        if status == RecordStatus::Committed {
            let row = BusinessRow::for_record(&holder, "EFFECT-H", NOW_MS + 1);
            let out = store
                .commit(&holder.pk, "owner-a", "EFFECT-H", &row, NOW_MS + 1)
                .await
                .expect("commit");
            assert_eq!(out, CommitOutcome::Committed);
        } else {
            let out = store
                .finish(
                    &holder.pk,
                    "owner-a",
                    status,
                    "ended",
                    item,
                    FinishGuard::Lease,
                    NOW_MS + 1,
                )
                .await
                .expect("finish");
            assert_eq!(out, FinishOutcome::Finished);
            assert!(store
                .routed(&holder.pk, "owner-a", NOW_MS + 2)
                .await
                .expect("routed"));
        }
        assert_eq!(must_get(store, &holder.pk).await.status, status);
        assert_eq!(
            must_guard(store, &other, NOW_MS + 3).await,
            GuardOutcome::Collision {
                other_event_key: holder.event_key.clone()
            },
            "a {status:?} holder gave the natural key away"
        );
    }
}

/// The release of a natural key whose record ends without an effect
/// (`finish_without_effect`): atomic with the finish and fenced like it. A holder that lost its
/// lease changes nothing; the holder's finish releases the key, so another event key for the
/// same natural key (the corrected event) holds it; the retry of that finish (its answer lost)
/// is finished and takes nothing back. A record holding an effect id is finished but keeps its
/// key; a record whose key another event key holds releases nothing of it.
pub async fn finish_without_effect_releases_the_natural_key(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let item = br#"{"reason":"server_rejected"}"#;
    let refused = |n: &str| format!("400: refused {n}");
    let finish = |r: &IdempotencyRecord, owner: &'static str, at: i64| {
        let r = r.clone();
        let error = refused(&r.event_key);
        async move {
            store
                .finish_without_effect(
                    &r,
                    owner,
                    RecordStatus::Failed,
                    &error,
                    item,
                    &sample_natural_key(&r, at),
                    at,
                )
                .await
                .expect("finish_without_effect")
        }
    };
    let windowed = |name: &str, owner: &str, hour: u8| {
        let mut r = sample_record(prefix, name, owner, NOW_MS);
        let start = format!("2025-06-10T{hour:02}:00:00Z");
        let end = format!("2025-06-10T{hour:02}:30:00Z");
        r.labels = sample_labels(&start, &end);
        r
    };

    // Released: the holder refused, then its corrected event under another event key.
    let holder = windowed("release-holder", "owner-a", 10);
    let corrected = windowed("release-corrected", "owner-b", 10);
    let third = windowed("release-third", "owner-c", 10);
    for r in [&holder, &corrected, &third] {
        must_reserve(store, r, NOW_MS).await;
    }
    assert_eq!(must_guard(store, &holder, NOW_MS).await, GuardOutcome::Held);
    let held_by = |r: &IdempotencyRecord| GuardOutcome::Collision {
        other_event_key: r.event_key.clone(),
    };
    // A writer without the lease: refused, nothing written, the key still held.
    match finish(&holder, "owner-x", NOW_MS + 1).await {
        FinishOutcome::Refused(Some(current)) => {
            assert_eq!(current.status, RecordStatus::InFlight)
        }
        other => panic!("a finish without the lease: {other:?}"),
    }
    assert_eq!(
        must_get(store, &holder.pk).await.status,
        RecordStatus::InFlight
    );
    assert_eq!(
        must_guard(store, &corrected, NOW_MS + 2).await,
        held_by(&holder),
        "a refused finish released the key"
    );
    assert_eq!(
        finish(&holder, "owner-a", NOW_MS + 3).await,
        FinishOutcome::Finished
    );
    let after = must_get(store, &holder.pk).await;
    assert_eq!(
        (after.status, after.route_pending),
        (RecordStatus::Failed, true)
    );
    assert_eq!(
        must_guard(store, &corrected, NOW_MS + 4).await,
        GuardOutcome::Held,
        "the corrected event met the released key as a collision"
    );
    // The retry of the finish that landed: finished, and the corrected event keeps the key.
    assert_eq!(
        finish(&holder, "owner-a", NOW_MS + 5).await,
        FinishOutcome::Finished
    );
    assert_eq!(
        must_guard(store, &third, NOW_MS + 6).await,
        held_by(&corrected)
    );
    assert_eq!(
        must_guard(store, &holder, NOW_MS + 7).await,
        held_by(&corrected)
    );

    // An effect id recorded (a claim in transit): finished, the key kept.
    let with_effect = windowed("release-effect", "owner-a", 11);
    let other = windowed("release-effect-other", "owner-b", 11);
    for r in [&with_effect, &other] {
        must_reserve(store, r, NOW_MS).await;
    }
    assert_eq!(
        must_guard(store, &with_effect, NOW_MS).await,
        GuardOutcome::Held
    );
    store
        .record_effect_id(&with_effect.pk, "EFFECT-T", NOW_MS + 1)
        .await
        .expect("record_effect_id");
    assert_eq!(
        finish(&with_effect, "owner-a", NOW_MS + 2).await,
        FinishOutcome::Finished
    );
    assert_eq!(
        must_get(store, &with_effect.pk).await.status,
        RecordStatus::Failed
    );
    assert_eq!(
        must_guard(store, &other, NOW_MS + 3).await,
        held_by(&with_effect),
        "a record holding an effect id gave its key away"
    );

    // The key another event key holds: the finish lands, their key stays theirs.
    let ours = windowed("release-not-ours", "owner-a", 12);
    let theirs = windowed("release-theirs", "owner-b", 12);
    let late = windowed("release-late", "owner-c", 12);
    for r in [&ours, &theirs, &late] {
        must_reserve(store, r, NOW_MS).await;
    }
    assert_eq!(must_guard(store, &theirs, NOW_MS).await, GuardOutcome::Held);
    assert_eq!(
        finish(&ours, "owner-a", NOW_MS + 1).await,
        FinishOutcome::Finished
    );
    assert_eq!(must_guard(store, &late, NOW_MS + 2).await, held_by(&theirs));

    // No key stored at all: the finish lands and creates none.
    let lone = windowed("release-lone", "owner-a", 13);
    let next = windowed("release-next", "owner-b", 13);
    must_reserve(store, &lone, NOW_MS).await;
    assert_eq!(
        finish(&lone, "owner-a", NOW_MS + 1).await,
        FinishOutcome::Finished
    );
    assert_eq!(
        must_guard(store, &next, NOW_MS + 2).await,
        GuardOutcome::Held
    );
}
