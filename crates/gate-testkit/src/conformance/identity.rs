//! Conformance case of the identity a record is reserved under: the partition
//! key, the event key, the operation key, the fingerprint, the labels, the creation time and the
//! expiry written by the reserve are the record's to the end. No later write (release, take-over,
//! effect id recorded, commit, routing mark, routing confirmation) changes or removes them, so a
//! redelivery of the same event after any of them meets the reserve's fingerprint: a duplicate,
//! never a mismatch.

use super::*;

/// What the reserve fixed, as one comparable value.
fn identity(r: &IdempotencyRecord) -> (String, String, String, String, i64, i64, Labels) {
    (
        r.pk.clone(),
        r.event_key.clone(),
        r.op_key.clone(),
        r.fingerprint.clone(),
        r.created_at_ms,
        r.expires_at_s,
        r.labels.clone(),
    )
}

async fn assert_identity(store: &dyn IdempotencyStore, reserved: &IdempotencyRecord, after: &str) {
    let now = must_get(store, &reserved.pk).await;
    assert_eq!(
        identity(&now),
        identity(reserved),
        "the reserve's identity changed after {after}"
    );
}

/// The same event reserved again (a redelivery to a fresh process: a new owner, later) meets the
/// record with the reserve's fingerprint.
async fn redelivery_meets_the_reserved_fingerprint(
    store: &dyn IdempotencyStore,
    reserved: &IdempotencyRecord,
    now_ms: i64,
) {
    let again = IdempotencyRecord {
        lease_owner: Some("owner-fresh".into()),
        lease_until_ms: Some(now_ms + LEASE_MS),
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        ..reserved.clone()
    };
    match store.reserve(&again, now_ms).await.expect("reserve") {
        Reservation::Conflict(existing) => {
            assert_eq!(existing.fingerprint, reserved.fingerprint);
            assert_eq!(existing.op_key, reserved.op_key);
        }
        other => panic!("a redelivery of {} was {other:?}", reserved.pk),
    }
}

/// Every write after the reserve keeps the reserve's identity: release, take-over, an effect id
/// recorded and the commit on one record; take-over, the routing mark and its confirmation on a
/// second; the confirmation of a routing record born marked on a third. After each ending the
/// same event reserved again conflicts with the reserve's fingerprint and operation key.
pub async fn the_reserved_identity_survives_every_write(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let t = NOW_MS;

    // Committed: reserve, release, take-over, effect id recorded, commit.
    let c = sample_record(prefix, "identity-commit", "owner-a", t);
    must_reserve(store, &c, t).await;
    store
        .release_lease(&c.pk, "owner-a", t + 1)
        .await
        .expect("release");
    assert_identity(store, &c, "release").await;
    let taken = store
        .take_over(&c.pk, "owner-a", "owner-b", t + 2 + LEASE_MS, t + 2)
        .await
        .expect("take-over");
    let TakeOver::Taken(held) = taken else {
        panic!("take-over after a release refused")
    };
    assert_eq!(identity(&held), identity(&c), "the take-over's answer");
    assert_identity(store, &c, "take-over").await;
    store
        .record_effect_id(&c.pk, "EFFECT-0", t + 3)
        .await
        .expect("record effect id");
    assert_identity(store, &c, "an effect id recorded").await;
    let row = BusinessRow::for_record(&c, "EFFECT-0", t + 4);
    let committed = store
        .commit(&c.pk, "owner-b", "EFFECT-0", &row, t + 4)
        .await
        .expect("commit");
    assert_eq!(committed, CommitOutcome::Committed);
    assert_identity(store, &c, "commit").await;
    redelivery_meets_the_reserved_fingerprint(store, &c, t + 5).await;

    // Routed to a person: reserve, take-over after expiry, mark, confirm.
    let m = sample_record(prefix, "identity-manual", "owner-a", t);
    must_reserve(store, &m, t).await;
    let later = t + LEASE_MS + 1;
    let taken = store
        .take_over(&m.pk, "owner-a", "owner-c", later + LEASE_MS, later)
        .await
        .expect("take-over");
    assert!(matches!(taken, TakeOver::Taken(_)), "{taken:?}");
    let finished = store
        .finish(
            &m.pk,
            "owner-c",
            RecordStatus::Manual,
            "past_key_retention",
            b"{\"reason\":\"past_key_retention\"}",
            FinishGuard::Lease,
            later + 1,
        )
        .await
        .expect("finish");
    assert_eq!(finished, FinishOutcome::Finished);
    assert_identity(store, &m, "the routing mark").await;
    assert!(store
        .routed(&m.pk, "owner-c", later + 2)
        .await
        .expect("routed"));
    assert_identity(store, &m, "the routing confirmation").await;
    redelivery_meets_the_reserved_fingerprint(store, &m, later + 3).await;

    // A routing record born marked (an event that had ended): confirmed.
    let mut r = sample_record(prefix, "identity-routing", "owner-a", t);
    r.status = RecordStatus::Manual;
    r.route_pending = true;
    r.request = b"{\"reason\":\"window_ended\"}".to_vec();
    r.error = Some("window_ended".into());
    must_reserve(store, &r, t).await;
    assert!(store.routed(&r.pk, "owner-a", t + 1).await.expect("routed"));
    assert_identity(store, &r, "the routing record's confirmation").await;
    redelivery_meets_the_reserved_fingerprint(store, &r, t + 2).await;
}
