//! The identity taken at reserve, checked at the end of a run: a body is routed
//! as a mismatch only if a record of its event with another fingerprint existed by the time the
//! item was sent. An item for a body whose every earlier record generation carries the body's own
//! fingerprint means the gate compared against a fingerprint it did not reserve (recomputed,
//! rewritten or lost): an identical redelivery must be a duplicate, never a mismatch. (The other
//! half, a reservation whose fingerprint or operation key changes while it lives, is checked at
//! every step by `observe`.)

use gate::manual::ManualReason;
use gate::record::record_pk;

use super::check::{classify, Class, Final};
use super::shared::short;

/// Mismatch items sent for bodies that match every record of their event seen by then.
pub(crate) fn false_mismatches(f: &Final<'_>) -> Vec<String> {
    let mut v = Vec::new();
    for (item, at) in f.items.iter().zip(&f.sent_at) {
        if item.reason != ManualReason::Mismatch {
            continue;
        }
        let Class::Event {
            event_key,
            fingerprint,
        } = classify(&item.original_body, f.terminals)
        else {
            continue;
        };
        let pk = record_pk(f.integration, &event_key);
        let gens = f.observer.gens.get(&pk).map_or(&[][..], Vec::as_slice);
        let seen: Vec<_> = gens.iter().filter(|g| g.first_seen_ms <= *at).collect();
        if !seen.is_empty() && seen.iter().all(|g| g.fingerprint == fingerprint) {
            v.push(format!(
                "event {} routed as a mismatch at {at} for fingerprint {}, the fingerprint of \
                 every record of it so far",
                short(&event_key),
                short(&fingerprint)
            ));
        }
    }
    v
}
