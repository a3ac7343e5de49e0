//! The invariants a sustained run checks at its end, those of the deterministic simulation that
//! apply to a run without faults, and the property the replay exists for: no queue growth.

use std::collections::BTreeMap;

use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};

use super::config::{SustainedConfig, START_MS};
use super::feed::QueueState;
use crate::stores::INTEGRATION;
use crate::terminal::IssuedSlot;

/// What a sustained run left behind, for [`check`].
pub(super) struct RunEnd<'a> {
    pub config: &'a SustainedConfig,
    /// Distinct notifications.
    pub events: usize,
    /// Messages sent (events and redeliveries).
    pub messages: usize,
    /// Redeliveries sent.
    pub redeliveries: usize,
    /// Each event's body.
    pub bodies: &'a [String],
    /// The slots the terminal issued.
    pub slots: &'a [IssuedSlot],
    /// The store's records and bookings.
    pub records: Vec<IdempotencyRecord>,
    pub bookings: Vec<BusinessRow>,
    /// The queue's end state and counters.
    pub queue: &'a QueueState,
    /// Items in the manual queue.
    pub manual_items: usize,
    /// The backlog's mean per simulated minute of arrivals.
    pub per_minute: &'a [f64],
    /// Whether the backlog grew.
    pub queue_grew: bool,
    /// Seconds from the last arrival until the queue was empty.
    pub drained_after_s: f64,
}

/// The violated invariants, in the order of the module docs of `sustained` (empty: all held).
pub(super) fn check(end: &RunEnd<'_>) -> Vec<String> {
    let mut violations = Vec::new();
    let terminals = vec!["ECT-DELTA".to_string()];
    let (records, bookings, st, config) = (&end.records, &end.bookings, end.queue, end.config);
    let (events, slots) = (end.events, end.slots);
    let keys: Vec<gate::consumer::DerivedKeys> = end
        .bodies
        .iter()
        .filter_map(|b| {
            truck_slot::notification::parse_notification(b, START_MS, &terminals)
                .ok()
                .and_then(|n| truck_slot::derive_keys(&n).ok())
        })
        .collect();
    if keys.len() != events {
        violations.push(format!(
            "{} of {events} generated bodies did not parse",
            events - keys.len()
        ));
    }
    // 1. One slot per key.
    let mut slots_by_key: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in slots {
        match &s.idempotency_key {
            Some(k) => slots_by_key.entry(k).or_default().push(&s.effect_id),
            None => violations.push(format!("slot {} issued without a key", s.effect_id)),
        }
    }
    if slots.len() != events {
        violations.push(format!(
            "the terminal issued {} slots for {events} notifications",
            slots.len()
        ));
    }
    let by_pk: BTreeMap<&str, &IdempotencyRecord> =
        records.iter().map(|r| (r.pk.as_str(), r)).collect();
    let bookings_by_event: BTreeMap<&str, &BusinessRow> = bookings
        .iter()
        .map(|b| (b.source_event.as_str(), b))
        .collect();
    for k in &keys {
        let issued = slots_by_key
            .get(k.op_key.as_str())
            .cloned()
            .unwrap_or_default();
        if issued.len() != 1 {
            violations.push(format!(
                "key {}: {} slots issued",
                &k.op_key[..12.min(k.op_key.len())],
                issued.len()
            ));
        }
        // 2. A booking per committed record, with the slot issued under its key.
        let pk = gate::record::record_pk(INTEGRATION, &k.event_key);
        match by_pk.get(pk.as_str()) {
            Some(r) if r.status == RecordStatus::Committed && !r.has_work() => {
                let booked = bookings_by_event.get(k.event_key.as_str());
                let slot = r.effect_id.as_deref();
                if booked.map(|b| b.effect_id.as_str()) != slot || issued.first().copied() != slot {
                    violations.push(format!(
                        "event {}: record slot {slot:?}, booking {:?}, issued {issued:?}",
                        &k.event_key[..12],
                        booked.map(|b| &b.effect_id)
                    ));
                }
            }
            Some(r) => violations.push(format!(
                "event {}: record {:?} (route pending {})",
                &k.event_key[..12],
                r.status,
                r.route_pending
            )),
            None => violations.push(format!("event {}: no record", &k.event_key[..12])),
        }
    }
    if bookings.len() != events {
        violations.push(format!(
            "{} TMS bookings for {events} notifications",
            bookings.len()
        ));
    }
    // 3. Nothing lost.
    if st.acked != end.messages || !st.visible.is_empty() || !st.delayed.is_empty() {
        violations.push(format!(
            "{} of {} messages acknowledged; {} visible, {} waiting to be visible again",
            st.acked,
            end.messages,
            st.visible.len(),
            st.delayed.len()
        ));
    }
    let unacked = (0..events)
        .filter(|e| !st.acked_events.contains_key(e))
        .count();
    if unacked > 0 {
        violations.push(format!("{unacked} notifications never acknowledged"));
    }
    if st.failed_receives > 0 {
        violations.push(format!(
            "{} receives ended in a batch item failure",
            st.failed_receives
        ));
    }
    let in_flight = records.iter().filter(|r| r.has_work()).count();
    if in_flight > 0 {
        violations.push(format!("{in_flight} records left in_flight"));
    }
    // 4. Nothing routed to a person.
    let items = end.manual_items;
    if items > 0 {
        violations.push(format!("{items} items in the manual queue"));
    }
    // 5. Redeliveries answered as duplicates, without a claim.
    let redeliveries = end.redeliveries;
    let duplicates = st.outcomes.get("duplicate").copied().unwrap_or(0);
    if duplicates != redeliveries {
        violations.push(format!(
            "{duplicates} duplicate outcomes for {redeliveries} redeliveries"
        ));
    }
    // No queue growth.
    if end.queue_grew {
        violations.push(format!(
            "the backlog grew: mean {:.1} in the first minute, {:.1} in the last",
            end.per_minute.first().copied().unwrap_or(0.0),
            end.per_minute.last().copied().unwrap_or(0.0)
        ));
    }
    let drained_after_s = end.drained_after_s;
    if drained_after_s > config.drain_bound_s as f64 {
        violations.push(format!(
            "the queue drained {drained_after_s:.1} s after the last arrival (bound {} s)",
            config.drain_bound_s
        ));
    }
    violations
}
