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

/// The rule for a holder that ended without an effect: the guard is never released. A holder
/// finished as `manual` (a person decides; it may hold an effect nobody knows of) or `failed`
/// (the server refused it) keeps the natural key, so another event key for the same event still
/// goes to a person rather than calling. A committed holder keeps it likewise.
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
