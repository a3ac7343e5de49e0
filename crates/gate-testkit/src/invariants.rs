//! The checkers of a run's end state, for any integration: the gate's safety invariants
//! ([`exactly_once_violations`]) and its liveness ([`liveness_violations`]).

use std::collections::{BTreeMap, BTreeSet};

use gate::manual::{ManualItem, ManualReason};
use gate::record::{IdempotencyRecord, RecordStatus};

/// The gate's safety invariants over the end state of a run, for any integration; each violation
/// in words (empty: none). `effects` is what the side effect's server made, by `Idempotency-Key`
/// (the record's `op_key`), in order.
///
/// 1. **At most one effect per key**: the server made at most one effect under each key.
/// 2. **A committed record is its effect**: it holds one effect id, the one its server made under
///    its key, and its business row names the same effect and labels.
/// 3. **A business row has its committed record**: no row without a record committed with it.
/// 4. **Never also by hand**: no item in the manual queue names a committed event, except as a
///    mismatch (another body under the same event key) or an unbooked effect.
pub fn exactly_once_violations(
    records: &[IdempotencyRecord],
    rows: &[gate::record::BusinessRow],
    manual: &[ManualItem],
    effects: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut v = Vec::new();
    for (key, made) in effects {
        if made.len() > 1 {
            v.push(format!("key {key}: {} effects {made:?}", made.len()));
        }
    }
    let committed: BTreeMap<&str, &IdempotencyRecord> = records
        .iter()
        .filter(|r| r.status == RecordStatus::Committed)
        .map(|r| (r.event_key.as_str(), r))
        .collect();
    for r in committed.values() {
        let made = effects
            .get(&r.op_key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if r.effect_id.is_none() || made.first() != r.effect_id.as_ref() || r.effect_ids.len() != 1
        {
            v.push(format!(
                "event {}: committed {:?} (ids {:?}), the server made {made:?}",
                r.event_key, r.effect_id, r.effect_ids
            ));
        }
        match rows.iter().find(|b| b.source_event == r.event_key) {
            Some(b) if Some(&b.effect_id) == r.effect_id.as_ref() && b.labels == r.labels => {}
            other => v.push(format!("event {}: business row {other:?}", r.event_key)),
        }
    }
    for b in rows {
        if !committed.contains_key(b.source_event.as_str()) {
            v.push(format!(
                "business row of {} without a committed record",
                b.source_event
            ));
        }
    }
    for item in manual {
        let by_hand = !matches!(
            item.reason,
            ManualReason::Mismatch | ManualReason::UnrecordedEffect
        );
        if let Some(key) = item
            .event_key
            .as_deref()
            .filter(|k| by_hand && committed.contains_key(k))
        {
            v.push(format!(
                "event {key} committed and in the manual queue ({})",
                item.reason.code()
            ));
        }
    }
    v
}

/// What a run delivered, for [`liveness_violations`]: each event (its event key) with the
/// bodies delivered for it by fingerprint, and the bodies the integration rejected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Event key to (fingerprint to one body with that fingerprint).
    pub events: BTreeMap<String, BTreeMap<String, String>>,
    /// Bodies the integration's parse rejected.
    pub rejected: BTreeSet<String>,
}

/// The gate's liveness over the end state of a run, after the reconciler ran past every lease;
/// each violation in words (empty: none).
///
/// 1. **Nothing left in flight**: no record is `in_flight` or has a routing not yet confirmed.
/// 2. **Every event ends committed, failed or with a person**: each delivered event key has a
///    record, `committed`, or `failed`/`manual` with a manual item naming its event key.
/// 3. **Every other body of an event reaches a person**: each delivered fingerprint other than
///    the record's is in a `mismatch` item with the event key and that body.
/// 4. **Every rejected body reaches a person**: a `rejected` or `window_ended` item carries it.
///
/// A person may get an item more than once (a crash between the send and its confirmation sends
/// it again under the same dedup key), never zero times.
pub fn liveness_violations(
    records: &[IdempotencyRecord],
    manual: &[ManualItem],
    delivered: &Delivered,
) -> Vec<String> {
    let mut v = Vec::new();
    for r in records.iter().filter(|r| r.has_work()) {
        v.push(format!(
            "record {} still has work: {} (route pending: {})",
            r.event_key, r.status, r.route_pending
        ));
    }
    let by_key: BTreeMap<&str, &IdempotencyRecord> =
        records.iter().map(|r| (r.event_key.as_str(), r)).collect();
    let has_item = |key: &str, pred: &dyn Fn(&ManualItem) -> bool| {
        manual
            .iter()
            .any(|i| i.event_key.as_deref() == Some(key) && pred(i))
    };
    for (key, bodies) in &delivered.events {
        let Some(r) = by_key.get(key.as_str()) else {
            v.push(format!("event {key}: no record"));
            continue;
        };
        match r.status {
            RecordStatus::Committed => {}
            RecordStatus::Failed | RecordStatus::Manual => {
                if !has_item(key, &|i| i.reason != ManualReason::Mismatch) {
                    v.push(format!("event {key}: {} but no person has it", r.status));
                }
            }
            RecordStatus::InFlight => {}
        }
        if !bodies.contains_key(&r.fingerprint) {
            v.push(format!(
                "event {key}: the record's fingerprint is none of the bodies delivered"
            ));
        }
        for (fingerprint, body) in bodies.iter().filter(|(f, _)| **f != r.fingerprint) {
            let reached = has_item(key, &|i| {
                i.reason == ManualReason::Mismatch && i.original_body == *body
            });
            if !reached {
                v.push(format!(
                    "event {key}: the body with fingerprint {fingerprint} reached no person"
                ));
            }
        }
    }
    for body in &delivered.rejected {
        let reached = manual.iter().any(|i| {
            matches!(i.reason, ManualReason::Rejected | ManualReason::EventEnded)
                && i.original_body == *body
        });
        if !reached {
            v.push(format!(
                "a rejected body ({} bytes) reached no person",
                body.len()
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, status: RecordStatus, fingerprint: &str) -> IdempotencyRecord {
        IdempotencyRecord {
            pk: format!("t#{key}"),
            event_key: key.to_string(),
            status,
            fingerprint: fingerprint.to_string(),
            request: Vec::new(),
            op_key: format!("op-{key}"),
            lease_owner: None,
            lease_until_ms: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            expires_at_s: 0,
            effect_id: None,
            effect_ids: Default::default(),
            inflight_shard: None,
            error: None,
            route_pending: false,
            labels: Default::default(),
        }
    }

    fn item(reason: ManualReason, key: Option<&str>, body: &str) -> ManualItem {
        ManualItem {
            reason,
            detail: String::new(),
            original_body: body.to_string(),
            event_key: key.map(str::to_string),
            message_id: "m".to_string(),
            original_body_cut: None,
        }
    }

    /// The liveness checker is not vacuous: each of its four rules reports, and a run that
    /// keeps them all is clean.
    #[test]
    fn liveness_reports_what_was_left_or_lost() {
        let delivered = Delivered {
            events: BTreeMap::from([
                (
                    "a".to_string(),
                    BTreeMap::from([("fa".to_string(), "A".to_string())]),
                ),
                (
                    "b".to_string(),
                    BTreeMap::from([
                        ("fb".to_string(), "B".to_string()),
                        ("fb2".to_string(), "B2".to_string()),
                    ]),
                ),
                (
                    "c".to_string(),
                    BTreeMap::from([("fc".to_string(), "C".to_string())]),
                ),
            ]),
            rejected: BTreeSet::from(["poison".to_string()]),
        };
        let records = vec![
            record("a", RecordStatus::Committed, "fa"),
            record("b", RecordStatus::Manual, "fb"),
            record("c", RecordStatus::InFlight, "fc"),
        ];
        let v = liveness_violations(&records, &[], &delivered);
        assert_eq!(v.len(), 4, "{v:#?}");
        assert!(v[0].starts_with("record c still has work"));
        assert_eq!(v[1], "event b: manual but no person has it");
        assert_eq!(
            v[2],
            "event b: the body with fingerprint fb2 reached no person"
        );
        assert_eq!(v[3], "a rejected body (6 bytes) reached no person");

        let records = vec![
            record("a", RecordStatus::Committed, "fa"),
            record("b", RecordStatus::Manual, "fb"),
            record("c", RecordStatus::Failed, "fc"),
        ];
        let manual = vec![
            item(ManualReason::NoIdempotencySupport, Some("b"), "B"),
            item(ManualReason::Mismatch, Some("b"), "B2"),
            item(ManualReason::ServerRejected, Some("c"), "C"),
            item(ManualReason::Rejected, None, "poison"),
        ];
        assert_eq!(
            liveness_violations(&records, &manual, &delivered),
            Vec::<String>::new()
        );
        // An event without a record, and a record of a body never delivered.
        let v = liveness_violations(&records[..1], &manual, &delivered);
        assert_eq!(
            v,
            vec![
                "event b: no record".to_string(),
                "event c: no record".to_string()
            ]
        );
        let odd = vec![record("a", RecordStatus::Committed, "other")];
        let v = liveness_violations(
            &odd,
            &manual,
            &Delivered {
                events: BTreeMap::from([(
                    "a".to_string(),
                    BTreeMap::from([("fa".to_string(), "A".to_string())]),
                )]),
                rejected: BTreeSet::new(),
            },
        );
        assert_eq!(v.len(), 2, "{v:#?}");
    }
}
