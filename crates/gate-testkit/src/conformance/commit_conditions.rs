//! Conformance case: each condition of the commit transaction fails alone and both together
//! The commit has two conditions: the record's (held by this owner) and the
//! business row's (none exists for the event); the natural key is not in the commit (its guard
//! was held before the call). Whatever fails, the record's refusal decides first, then the
//! business row's.

use std::sync::Arc;

use super::{must_get, must_reserve, sample_labels, sample_record};
use super::{LEASE_MS, NOW_MS};
use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::{CommitOutcome, Store, StoreError, TakeOver};

/// The window of the cases' records.
const FREE: (&str, &str) = ("2025-06-09T16:00:00Z", "2025-06-09T18:00:00Z");

/// Which conditions of the commit fail.
#[derive(Debug, Clone, Copy)]
struct Refusals {
    record: bool,
    booking: bool,
}

/// One commit of a record `name` (reserved by `owner-a`) whose conditions fail as `refusals`
/// say; asserts the right outcome and what is stored after it.
async fn commit_with(store: &dyn Store, prefix: &str, name: &str, refusals: Refusals) {
    let (start, end) = FREE;
    let mut r = sample_record(prefix, name, "owner-a", NOW_MS);
    r.labels = sample_labels(start, end);
    must_reserve(store, &r, NOW_MS).await;
    let now = NOW_MS + LEASE_MS + 2;
    let mut held = r.clone();
    if refusals.record {
        // owner-a's lease expired and owner-b took the record over.
        held = match store
            .take_over(&r.pk, "owner-a", "owner-b", now + LEASE_MS, now - 1)
            .await
            .expect("take_over")
        {
            TakeOver::Taken(t) => *t,
            TakeOver::Refused => panic!("{name}: take-over refused"),
        };
    }
    let orphan_effect = format!("EFFECT-ORPHAN-{name}");
    if refusals.booking {
        // A business row for the same event key, committed under another integration (another
        // pk, another natural key, one per case): the booking's condition fails for ours.
        let mut other = IdempotencyRecord {
            pk: format!("{prefix}-{name}#{}", r.event_key),
            ..sample_record(prefix, name, "owner-z", NOW_MS)
        };
        other.labels = sample_labels(FREE.0, FREE.1);
        must_reserve(store, &other, NOW_MS).await;
        let row = BusinessRow::for_record(&other, &orphan_effect, NOW_MS + 1);
        let out = store
            .commit(&other.pk, "owner-z", &orphan_effect, &row, NOW_MS + 1)
            .await
            .expect("commit of the orphan's row");
        assert_eq!(out, CommitOutcome::Committed, "{name}");
    }
    let effect = format!("EFFECT-{name}");
    let row = BusinessRow::for_record(&r, &effect, now);
    let out = store.commit(&r.pk, "owner-a", &effect, &row, now).await;
    let booking = store
        .business_row(&r.event_key)
        .await
        .expect("booking")
        .map(|b| b.effect_id);
    let orphan_booking = refusals.booking.then(|| orphan_effect.clone());
    if refusals.record {
        // The record decides: refused with the record as it is, nothing written.
        match out {
            Ok(CommitOutcome::Refused(existing)) => assert_eq!(*existing, held, "{name}"),
            other => panic!("{name} ({refusals:?}): {other:?}, want Refused"),
        }
        assert_eq!(must_get(store, &r.pk).await, held, "{name}");
        assert_eq!(booking, orphan_booking, "{name}");
    } else if refusals.booking {
        // A business row outlived its record: a person decides, nothing written.
        assert!(
            matches!(out, Err(StoreError::Corrupt(_))),
            "{name} ({refusals:?}): {out:?}, want Corrupt"
        );
        assert_eq!(must_get(store, &r.pk).await, held, "{name}");
        assert_eq!(booking, orphan_booking, "{name}");
    } else {
        assert_eq!(out.expect("commit"), CommitOutcome::Committed, "{name}");
        let after = must_get(store, &r.pk).await;
        assert_eq!(after.status, RecordStatus::Committed, "{name}");
        assert_eq!(after.effect_id.as_deref(), Some(effect.as_str()), "{name}");
        assert_eq!(booking.as_deref(), Some(effect.as_str()), "{name}");
    }
}

/// Each condition of the commit fails alone and both together; a commit refused by nothing is
/// committed. See the module docs for the right outcomes.
pub async fn commit_conditions_alone_and_together(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    for (name, record, booking) in [
        ("cc-none", false, false),
        ("cc-record", true, false),
        ("cc-booking", false, true),
        ("cc-record-booking", true, true),
    ] {
        commit_with(store, prefix, name, Refusals { record, booking }).await;
    }
}
