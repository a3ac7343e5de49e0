//! The invariants, checked once a schedule has run to quiescence (every retry, redelivery and
//! reconciler run done), against the terminal's, the store's and the queues' own state.
//!
//! 1. **One slot per key.** Every `Idempotency-Key` holds at most one slot at the terminal; a
//!    terminal without key support gets no claim at all. Every slot belongs to a record: the
//!    committed one with that slot id, or a `failed`/`manual` one whose event is in the manual
//!    queue (a person knows). A booking exists if and only if its record is `committed`, with
//!    the same slot id, and that slot was issued under the record's key for its container.
//! 2. **Nothing is lost.** Every delivered notification ends `committed`, `failed` or `manual`
//!    (then with an item in the manual queue), or all its copies are in the dead-letter queue
//!    (a dead-lettered message is not lost: it sits in the DLQ with its body, for a person or a
//!    redrive). No record stays `in_flight` or with its routing pending. Every mismatched body and every poison body is in the
//!    manual queue, unless all its copies are dead-lettered.
//! 3. **Exactly once into the manual queue.** Each mismatch (event key, fingerprint), each poison
//!    body (its bytes) and each event routed to a person (event key) has at most one item, plus
//!    one for each send whose mark a fault made ambiguous (the item was sent, then the sender
//!    crashed, or the send or the mark answered an error, or another worker took the record
//!    over): at-least-once with a dedup key is the honest promise across crashes. An unbooked
//!    slot (a slot the terminal issued after its record was finished, or for another container
//!    after the lease was lost) is its own case, routed once per slot: a record routed to a
//!    person because no slot was found (past the key's retention, after the window's end) while
//!    a lease-lost holder's claim was still in transit gets both items, the second naming the
//!    slot to book or cancel.
//! 4. **No double booking by hand.** No event that is `committed` is also in the manual queue for
//!    a reason other than a mismatch: a person would book a second slot.

use std::collections::{BTreeMap, BTreeSet};

use gate::gate::derive_keys;
use gate::keys::{mismatch_route_key, rejected_route_key, sha256_hex};
use gate::manual::{ManualItem, ManualReason};
use gate::notification::parse_notification;
use gate::record::{record_pk, IdempotencyRecord, RecordStatus, TmsBooking};

use super::ports::short;
use super::queue::{Msg, MsgState};
use super::schedule::{Schedule, START_MS};
use crate::terminal::IssuedSlot;

/// A time at which every generated window is open and not too far ahead: for parsing bodies
/// independently of when they were delivered.
const PARSE_AT_MS: i64 = START_MS - 7 * 24 * 3_600_000;

/// How the checker sees a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    /// A structurally valid notification.
    Event {
        /// Its event key.
        event_key: String,
        /// Its fingerprint.
        fingerprint: String,
    },
    /// A body the strict parser never accepts.
    Poison,
}

/// Classifies a body by parsing it at a time when its window is open.
pub(crate) fn classify(body: &str, terminals: &[String]) -> Class {
    match parse_notification(body, PARSE_AT_MS, terminals)
        .ok()
        .and_then(|n| derive_keys(&n).ok())
    {
        Some(k) => Class::Event {
            event_key: k.event_key,
            fingerprint: k.fingerprint,
        },
        None => Class::Poison,
    }
}

/// The identity an item is deduplicated by, computed from its content (independently of the
/// gate's own dedup key): `mismatch:{event key}:{fingerprint}`, `rejected:{sha256 of the body}`,
/// or `event:{event key}` for everything routed per event.
pub(crate) fn identity_of_item(item: &ManualItem, terminals: &[String]) -> String {
    let class = || classify(&item.original_body, terminals);
    match item.reason {
        ManualReason::Rejected => format!("rejected:{}", sha256_hex(item.original_body.as_bytes())),
        // Routed once per slot (the gate's routing key is the event key and the slot id, which
        // the detail names; a resend carries the stored item, the same detail).
        ManualReason::UnbookedSlot => format!(
            "unbooked:{}:{}",
            item.event_key.as_deref().unwrap_or("?"),
            sha256_hex(item.detail.as_bytes())
        ),
        ManualReason::Mismatch => match class() {
            Class::Event {
                event_key,
                fingerprint,
            } => format!(
                "mismatch:{}:{fingerprint}",
                item.event_key.clone().unwrap_or(event_key)
            ),
            Class::Poison => format!("mismatch:?:{}", sha256_hex(item.original_body.as_bytes())),
        },
        _ => match (&item.event_key, class()) {
            (Some(k), _) => format!("event:{k}"),
            (None, Class::Event { event_key, .. }) => format!("event:{event_key}"),
            (None, Class::Poison) => {
                format!("event:?{}", sha256_hex(item.original_body.as_bytes()))
            }
        },
    }
}

/// The slot an unbooked-slot item names: the word after the first "slot" in its detail
/// ("the terminal issued slot S under ...", "terminal answered slot S for ...").
fn slot_of_unbooked(detail: &str) -> Option<&str> {
    let mut words = detail.split_whitespace();
    words.find(|w| *w == "slot")?;
    words.next()
}

/// The record whose routing confirmation (`routed`) marks an item as routed.
pub(crate) fn pk_of_item(
    item: &ManualItem,
    integration: &str,
    terminals: &[String],
) -> Option<String> {
    match item.reason {
        ManualReason::UnbookedSlot => {
            let slot = slot_of_unbooked(&item.detail)?;
            let event_key = item.event_key.as_deref()?;
            Some(record_pk(
                integration,
                &gate::keys::unbooked_slot_route_key(event_key, slot),
            ))
        }
        ManualReason::Rejected => Some(record_pk(
            integration,
            &rejected_route_key(&item.original_body),
        )),
        ManualReason::Mismatch => match classify(&item.original_body, terminals) {
            Class::Event {
                event_key,
                fingerprint,
            } => Some(record_pk(
                integration,
                &mismatch_route_key(
                    item.event_key.as_deref().unwrap_or(&event_key),
                    &fingerprint,
                ),
            )),
            Class::Poison => None,
        },
        _ => item
            .event_key
            .as_deref()
            .map(|k| record_pk(integration, k))
            .or_else(|| match classify(&item.original_body, terminals) {
                Class::Event { event_key, .. } => Some(record_pk(integration, &event_key)),
                Class::Poison => None,
            }),
    }
}

/// Whether a body's own outcome is already durable in the store (so an operator purging its
/// message loses nothing the reconciler cannot finish).
pub(crate) fn own_record_durable(
    body: &str,
    integration: &str,
    terminals: &[String],
    get: impl Fn(&str) -> Option<IdempotencyRecord>,
) -> bool {
    match classify(body, terminals) {
        Class::Event {
            event_key,
            fingerprint,
        } => match get(&record_pk(integration, &event_key)) {
            Some(r) if r.fingerprint == fingerprint => true,
            Some(_) => get(&record_pk(
                integration,
                &mismatch_route_key(&event_key, &fingerprint),
            ))
            .is_some(),
            None => false,
        },
        Class::Poison => get(&record_pk(integration, &rejected_route_key(body))).is_some(),
    }
}

/// The world after the run.
pub(crate) struct Final<'a> {
    pub schedule: &'a Schedule,
    pub integration: &'a str,
    pub terminals: &'a [String],
    pub records: Vec<IdempotencyRecord>,
    pub bookings: Vec<TmsBooking>,
    pub slots: Vec<IssuedSlot>,
    pub items: Vec<ManualItem>,
    pub ambiguous: &'a BTreeMap<String, u32>,
    pub msgs: &'a [Msg],
}

/// Checks every invariant; returns the violations (empty when the schedule passed).
pub(crate) fn check(f: &Final<'_>) -> Vec<String> {
    let mut v = Vec::new();
    let records: BTreeMap<&str, &IdempotencyRecord> =
        f.records.iter().map(|r| (r.pk.as_str(), r)).collect();
    let bookings: BTreeMap<&str, &TmsBooking> = f
        .bookings
        .iter()
        .map(|b| (b.source_event.as_str(), b))
        .collect();
    let mut items: BTreeMap<String, Vec<&ManualItem>> = BTreeMap::new();
    for item in &f.items {
        items
            .entry(identity_of_item(item, f.terminals))
            .or_default()
            .push(item);
    }
    let count = |id: &str| items.get(id).map_or(0, Vec::len);

    // Bodies by class; copies per body.
    let classes: Vec<Class> = f
        .schedule
        .bodies
        .iter()
        .map(|b| classify(&b.text, f.terminals))
        .collect();
    let all_dead = |bodies: &[usize]| -> bool {
        let copies: Vec<&Msg> = f.msgs.iter().filter(|m| bodies.contains(&m.body)).collect();
        !copies.is_empty() && copies.iter().all(|m| m.state == MsgState::Dead)
    };
    for m in f.msgs {
        if m.state == MsgState::Live {
            v.push(format!(
                "message {} (body b{}) still on the queue at quiescence",
                m.id, m.body
            ));
        }
    }
    // event key -> fingerprint -> bodies
    let mut events: BTreeMap<String, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
    let mut poison: Vec<usize> = Vec::new();
    for (i, c) in classes.iter().enumerate() {
        if !f.msgs.iter().any(|m| m.body == i) {
            continue;
        }
        match c {
            Class::Event {
                event_key,
                fingerprint,
            } => events
                .entry(event_key.clone())
                .or_default()
                .entry(fingerprint.clone())
                .or_default()
                .push(i),
            Class::Poison => poison.push(i),
        }
    }

    // 2. Nothing is lost; no record stays in flight.
    for r in &f.records {
        if r.has_work() {
            v.push(format!(
                "record {} still {} (route_pending {}) at quiescence (owner {:?}, lease {:?}, \
                 created {})",
                short(&r.event_key),
                r.status,
                r.route_pending,
                r.lease_owner,
                r.lease_until_ms,
                r.created_at_ms
            ));
        }
    }
    for (event_key, variants) in &events {
        let pk = record_pk(f.integration, event_key);
        let event_id = format!("event:{event_key}");
        let every_body: Vec<usize> = variants.values().flatten().copied().collect();
        match records.get(pk.as_str()) {
            None => {
                let routed = items
                    .get(&event_id)
                    .is_some_and(|its| its.iter().any(|i| i.reason == ManualReason::WindowEnded));
                if !routed && !all_dead(&every_body) {
                    v.push(format!(
                        "event {} lost: no record, not in the manual queue, not dead-lettered",
                        short(event_key)
                    ));
                }
            }
            Some(r) => {
                if matches!(r.status, RecordStatus::Failed | RecordStatus::Manual)
                    && count(&event_id) == 0
                {
                    v.push(format!(
                        "event {} ended {} but is not in the manual queue",
                        short(event_key),
                        r.status
                    ));
                }
                for (fingerprint, bodies) in variants {
                    if *fingerprint == r.fingerprint {
                        continue;
                    }
                    let id = format!("mismatch:{event_key}:{fingerprint}");
                    if count(&id) == 0 && !all_dead(bodies) {
                        v.push(format!(
                            "mismatch {} / {} (bodies {:?}) never reached the manual queue",
                            short(event_key),
                            short(fingerprint),
                            bodies
                        ));
                    }
                }
            }
        }
    }
    for &b in &poison {
        let id = format!(
            "rejected:{}",
            sha256_hex(f.schedule.bodies[b].text.as_bytes())
        );
        if count(&id) == 0 && !all_dead(&[b]) {
            v.push(format!("poison body b{b} never reached the manual queue"));
        }
    }

    // 3. Exactly once into the manual queue (plus what faults made ambiguous).
    for (id, its) in &items {
        let allowed = 1 + f.ambiguous.get(id).copied().unwrap_or(0) as usize;
        if its.len() > allowed {
            v.push(format!(
                "{} reached the manual queue {} times (allowed {allowed}): reasons {:?}",
                short_id(id),
                its.len(),
                its.iter().map(|i| i.reason.code()).collect::<Vec<_>>()
            ));
        }
    }

    // 1. One slot per key; bookings if and only if committed.
    let mut by_key: BTreeMap<&str, Vec<&IssuedSlot>> = BTreeMap::new();
    for s in &f.slots {
        match s.idempotency_key.as_deref() {
            Some(k) if f.schedule.key_support => by_key.entry(k).or_default().push(s),
            _ => v.push(format!(
                "slot {} claimed {} (key support {})",
                s.slot_id,
                s.idempotency_key
                    .as_deref()
                    .map_or("without a key".to_string(), |k| format!(
                        "under {}",
                        short(k)
                    )),
                f.schedule.key_support
            )),
        }
    }
    let by_op_key: BTreeMap<&str, &IdempotencyRecord> =
        f.records.iter().map(|r| (r.op_key.as_str(), r)).collect();
    for (key, slots) in &by_key {
        if slots.len() > 1 {
            v.push(format!(
                "key {} holds {} slots: {:?}",
                short(key),
                slots.len(),
                slots.iter().map(|s| &s.slot_id).collect::<Vec<_>>()
            ));
        }
        let Some(r) = by_op_key.get(key) else {
            v.push(format!("slot under key {} has no record", short(key)));
            continue;
        };
        for s in slots {
            match r.status {
                RecordStatus::Committed if r.slot_id.as_deref() == Some(s.slot_id.as_str()) => {}
                RecordStatus::Committed => v.push(format!(
                    "slot {} under key {} is not the committed slot {:?}",
                    s.slot_id,
                    short(key),
                    r.slot_id
                )),
                // Failed / manual: a person has the event (checked above); in_flight: reported.
                _ => {}
            }
        }
    }
    let events_known: BTreeSet<&str> = events.keys().map(String::as_str).collect();
    for r in &f.records {
        if !events_known.contains(r.event_key.as_str()) {
            continue;
        }
        let booking = bookings.get(r.event_key.as_str());
        match (r.status, booking) {
            (RecordStatus::Committed, Some(b)) => {
                if r.slot_id.as_deref() != Some(b.slot_id.as_str()) {
                    v.push(format!(
                        "event {} committed with {:?} but booked with {}",
                        short(&r.event_key),
                        r.slot_id,
                        b.slot_id
                    ));
                }
                if f.schedule.key_support
                    && !f.slots.iter().any(|s| {
                        s.slot_id == b.slot_id
                            && s.idempotency_key.as_deref() == Some(r.op_key.as_str())
                            && s.equipment_number == r.container
                    })
                {
                    v.push(format!(
                        "event {} booked slot {} the terminal never issued under its key",
                        short(&r.event_key),
                        b.slot_id
                    ));
                }
            }
            (RecordStatus::Committed, None) => v.push(format!(
                "event {} committed without a TMS booking",
                short(&r.event_key)
            )),
            (status, Some(b)) => v.push(format!(
                "event {} has TMS booking {} but its record is {status}",
                short(&r.event_key),
                b.slot_id
            )),
            (_, None) => {}
        }
    }
    for b in &f.bookings {
        if !records.contains_key(record_pk(f.integration, &b.source_event).as_str()) {
            v.push(format!("TMS booking {} without a record", b.slot_id));
        }
    }

    // 4. No committed event in the manual queue (a person would book it again).
    for r in &f.records {
        if r.status != RecordStatus::Committed {
            continue;
        }
        if let Some(its) = items.get(&format!("event:{}", r.event_key)) {
            v.push(format!(
                "event {} is committed (slot {:?}) and also in the manual queue: {:?}",
                short(&r.event_key),
                r.slot_id,
                its.iter().map(|i| i.reason.code()).collect::<Vec<_>>()
            ));
        }
    }
    v
}

fn short_id(id: &str) -> String {
    id.split(':')
        .map(|p| short(p).to_string())
        .collect::<Vec<_>>()
        .join(":")
}
