//! The invariants, checked once a schedule has run to quiescence (every retry, redelivery and
//! reconciler run done), against the terminal's, the store's and the queues' own state and the
//! store's history (`observe`: record generations, booking writes). A record that expired and
//! was reserved again at the same key starts a new **generation**. The invariants are listed
//! at [`check`].
//!
//! Checked while the run goes (`driver`, `observe`): **liveness**. A task that ends normally holds
//! no live lease (by its own clock), unless a fault explains it (an error after its reserve or
//! take-over applied, a failed release); after the faults heal and the reconciler's outage ends,
//! every record leaves `in_flight` within the schedule's bound (`driver::liveness_bound_ms`).

use std::collections::{BTreeMap, BTreeSet};

use gate::manual::{ManualItem, ManualReason};
use gate::record::{record_pk, IdempotencyRecord, RecordStatus};
use truck_slot::derive_keys;
use truck_slot::keys::{mismatch_route_key, rejected_route_key, sha256_hex};
use truck_slot::notification::parse_notification;
use truck_slot::TmsBooking;

use super::observe::Observer;
use super::schedule::{Schedule, START_MS};
use super::shared::short;
use crate::sqs::{Msg, MsgState};
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
        ManualReason::UnrecordedEffect => format!(
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
/// ("the server made effect S under ...", "server answered effect S for ...").
fn slot_of_unbooked(detail: &str) -> Option<&str> {
    let mut words = detail.split_whitespace();
    words.find(|w| *w == "slot" || *w == "effect")?;
    words.next()
}

/// The record whose routing confirmation (`routed`) marks an item as routed.
pub(crate) fn pk_of_item(
    item: &ManualItem,
    integration: &str,
    terminals: &[String],
) -> Option<String> {
    match item.reason {
        ManualReason::UnrecordedEffect => {
            let slot = slot_of_unbooked(&item.detail)?;
            let event_key = item.event_key.as_deref()?;
            Some(record_pk(
                integration,
                &truck_slot::keys::unrecorded_effect_route_key(event_key, slot),
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
    /// When each of `items` was sent, true simulated epoch ms.
    pub sent_at: Vec<i64>,
    pub ambiguous: &'a BTreeMap<String, u32>,
    pub msgs: &'a [Msg<usize>],
    /// The store's history.
    pub observer: &'a Observer,
}

/// Whether every copy of `bodies` ended in the dead-letter queue (a redriven copy counts by its
/// successor) and an injected fault, a crash or the deadline ended every receive of every copy:
/// the only way a body may end there. A body the gate itself answered with a batch item failure
/// until SQS gave up on it is not excused.
fn dead_by_faults(msgs: &[Msg<usize>], bodies: &[usize]) -> bool {
    let copies: Vec<&Msg<usize>> = msgs.iter().filter(|m| bodies.contains(&m.body)).collect();
    let ends = copies.iter().filter(|m| m.state != MsgState::Redriven);
    !copies.is_empty()
        && ends.clone().all(|m| m.state == MsgState::Dead)
        && copies
            .iter()
            .all(|m| m.receive_ends.iter().all(|e| e.excused()))
}

/// Why `bodies` are not excused by the dead-letter queue, for a violation's text.
fn dead_letter_note(msgs: &[Msg<usize>], bodies: &[usize]) -> &'static str {
    let copies: Vec<&Msg<usize>> = msgs.iter().filter(|m| bodies.contains(&m.body)).collect();
    let all_dead = !copies.is_empty()
        && copies
            .iter()
            .filter(|m| m.state != MsgState::Redriven)
            .all(|m| m.state == MsgState::Dead);
    if all_dead {
        "dead-lettered after batch item failures that no injected fault or crash explains"
    } else {
        "not dead-lettered"
    }
}

/// Checks every invariant; returns the violations (empty when the schedule passed):
///
/// 1. **One slot per key.** Every `Idempotency-Key` holds at most one slot per record generation,
///    and a key is claimed again in a later generation only for other content (a re-planned
///    notification after the first record expired), never for the same; a terminal without key
///    support gets no claim at all. Every slot belongs to its generation: committed with that
///    slot id, or `failed`/`manual` with the event in the manual queue (a person knows).
/// 2. **A TMS booking is never replaced.** Every booking is written by a commit of a generation
///    committed with that slot, and never changes or goes away (checked at every step, see
///    `observe`); the last generation is `committed` if and only if it has its booking, with the
///    same slot id, issued under its key for its container (a booking of an earlier, expired
///    generation stays).
/// 3. **Nothing is lost.** Every delivered notification ends `committed`, `failed` or `manual`
///    (then with an item in the manual queue), or all its copies are in the dead-letter queue and
///    **an injected fault, a crash or the deadline ended every receive of them** (a body the gate
///    answers with a batch item failure until SQS gives up is lost, not excused). No record stays
///    `in_flight` or with its routing pending. Every mismatched body and every poison body is in
///    the manual queue, under the same dead-letter rule.
/// 4. **Exactly once into the manual queue.** Each mismatch (event key, fingerprint), each poison
///    body (its bytes) and each event routed to a person (event key, per record generation) has
///    at most one item, plus one for each send whose mark a fault made ambiguous (the item was
///    sent, then the sender crashed, or the send or the mark answered an error, or another worker
///    took the record over): at-least-once with a dedup key is the honest promise across crashes.
///    An unbooked slot (a slot the terminal issued after its record was finished, or for another
///    container after the lease was lost) is its own case, routed once per slot: a record routed
///    to a person because no slot was found (past the key's retention, after the window's end)
///    while a lease-lost holder's claim was still in transit gets both items, the second naming
///    the slot to book or cancel.
/// 5. **No double booking by hand.** No booked event is in the manual queue for the content it
///    was booked with (an item sent while a generation with the booked fingerprint was its
///    record), except for a window that has ended: a person would book a second slot.
pub(crate) fn check(f: &Final<'_>) -> Vec<String> {
    let mut v = Vec::new();
    let obs = f.observer;
    let records: BTreeMap<&str, &IdempotencyRecord> =
        f.records.iter().map(|r| (r.pk.as_str(), r)).collect();
    let bookings: BTreeMap<&str, &TmsBooking> = f
        .bookings
        .iter()
        .map(|b| (b.source_event.as_str(), b))
        .collect();
    let mut items: BTreeMap<String, Vec<(i64, &ManualItem)>> = BTreeMap::new();
    for (item, at) in f.items.iter().zip(&f.sent_at) {
        items
            .entry(identity_of_item(item, f.terminals))
            .or_default()
            .push((*at, item));
    }
    let count = |id: &str| items.get(id).map_or(0, Vec::len);
    let gens_of = |pk: &str| obs.gens.get(pk).map_or(&[][..], Vec::as_slice);

    // Bodies by class; copies per body.
    let classes: Vec<Class> = f
        .schedule
        .bodies
        .iter()
        .map(|b| classify(&b.text, f.terminals))
        .collect();
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
        let gens = gens_of(&pk);
        match records.get(pk.as_str()) {
            None => {
                let routed = items.get(&event_id).is_some_and(|its| {
                    its.iter()
                        .any(|(_, i)| i.reason == ManualReason::EventEnded)
                });
                if !routed && !dead_by_faults(f.msgs, &every_body) {
                    v.push(format!(
                        "event {} lost: no record, not in the manual queue, {}",
                        short(event_key),
                        dead_letter_note(f.msgs, &every_body)
                    ));
                }
            }
            Some(r) => {
                for (i, g) in gens.iter().enumerate() {
                    if matches!(g.status, RecordStatus::Failed | RecordStatus::Manual)
                        && count(&event_id) == 0
                    {
                        v.push(format!(
                            "event {} ended {} (generation {i}) but is not in the manual queue",
                            short(event_key),
                            g.status
                        ));
                    }
                }
                for (fingerprint, bodies) in variants {
                    // A fingerprint some generation of the record had was the event then
                    // (a re-planned notification reserved after the first record expired).
                    if *fingerprint == r.fingerprint
                        || gens.iter().any(|g| g.fingerprint == *fingerprint)
                    {
                        continue;
                    }
                    let id = format!("mismatch:{event_key}:{fingerprint}");
                    if count(&id) == 0 && !dead_by_faults(f.msgs, bodies) {
                        v.push(format!(
                            "mismatch {} / {} (bodies {:?}) never reached the manual queue, {}",
                            short(event_key),
                            short(fingerprint),
                            bodies,
                            dead_letter_note(f.msgs, bodies)
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
        if count(&id) == 0 && !dead_by_faults(f.msgs, &[b]) {
            v.push(format!(
                "poison body b{b} never reached the manual queue, {}",
                dead_letter_note(f.msgs, &[b])
            ));
        }
    }

    // 3. Exactly once into the manual queue (plus what faults made ambiguous, plus one per
    // later generation of the record that routes it: a new reservation after one expired).
    for (id, its) in &items {
        let generations = pk_of_item(its[0].1, f.integration, f.terminals)
            .map_or(1, |pk| gens_of(&pk).len().max(1));
        let allowed = generations + f.ambiguous.get(id).copied().unwrap_or(0) as usize;
        if its.len() > allowed {
            v.push(format!(
                "{} reached the manual queue {} times (allowed {allowed}): reasons {:?}",
                short_id(id),
                its.len(),
                its.iter()
                    .map(|(_, i)| truck_slot::manual_reason_code(i.reason))
                    .collect::<Vec<_>>()
            ));
        }
    }

    // 1. One slot per key and record generation; a key claimed again only for other content
    // after its record expired; every slot committed by its generation or known to a person.
    let mut by_key: BTreeMap<&str, Vec<&IssuedSlot>> = BTreeMap::new();
    for s in &f.slots {
        match s.idempotency_key.as_deref() {
            Some(k) if f.schedule.key_support => by_key.entry(k).or_default().push(s),
            _ => v.push(format!(
                "slot {} claimed {} (key support {})",
                s.effect_id,
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
    let pk_by_op_key: BTreeMap<&str, &str> = obs
        .gens
        .iter()
        .flat_map(|(pk, gens)| gens.iter().map(move |g| (g.op_key.as_str(), pk.as_str())))
        .collect();
    for (key, slots) in &by_key {
        let Some(pk) = pk_by_op_key.get(key) else {
            v.push(format!("slot under key {} has no record", short(key)));
            continue;
        };
        let gens = gens_of(pk);
        let mut per_gen: BTreeMap<usize, Vec<&IssuedSlot>> = BTreeMap::new();
        for s in slots {
            if let Some((i, _)) = obs.gen_at(pk, s.issued_at_ms) {
                per_gen.entry(i).or_default().push(s);
            }
        }
        for (i, gen_slots) in &per_gen {
            let g = &gens[*i];
            if gen_slots.len() > 1 {
                v.push(format!(
                    "key {} holds {} slots (record generation {i}): {:?}",
                    short(key),
                    gen_slots.len(),
                    gen_slots.iter().map(|s| &s.effect_id).collect::<Vec<_>>()
                ));
            }
            if let Some((j, _)) = per_gen
                .keys()
                .map(|j| (*j, &gens[*j]))
                .find(|(j, e)| j < i && e.fingerprint == g.fingerprint)
            {
                v.push(format!(
                    "key {} claimed again for the same content after its record expired \
                     (generations {j} and {i}): {:?}",
                    short(key),
                    slots.iter().map(|s| &s.effect_id).collect::<Vec<_>>()
                ));
            }
            for s in gen_slots {
                match (&g.committed_slot, g.status) {
                    (Some(c), _) if *c == s.effect_id => {}
                    (Some(c), _) => v.push(format!(
                        "slot {} under key {} is not the committed slot {c}",
                        s.effect_id,
                        short(key),
                    )),
                    // Failed / manual: a person has the event (checked above).
                    (None, RecordStatus::Failed | RecordStatus::Manual) => {}
                    // The final generation in flight is reported above.
                    (None, RecordStatus::InFlight) if *i + 1 == gens.len() => {}
                    (None, status) => v.push(format!(
                        "slot {} under key {} belongs to record generation {i}, which ended \
                         {status} without it: nobody books it, nobody is told",
                        s.effect_id,
                        short(key),
                    )),
                }
            }
        }
    }

    // Bookings: each written by a committed generation with its slot (checked as written, with
    // "never replaced", in `observe`); the last generation committed iff it has its booking; a
    // booking was issued under its record's key for its container.
    let events_known: BTreeSet<&str> = events.keys().map(String::as_str).collect();
    for r in &f.records {
        if !events_known.contains(r.event_key.as_str()) {
            continue;
        }
        let last_gen = gens_of(&r.pk).len().saturating_sub(1);
        let booking = bookings.get(r.event_key.as_str());
        let booked_by = obs.bookings.get(&r.event_key).map(|(_, g)| *g);
        match (r.status, booking) {
            (RecordStatus::Committed, Some(b)) => {
                if r.effect_id.as_deref() != Some(b.slot_id.as_str()) {
                    v.push(format!(
                        "event {} committed with {:?} but booked with {}",
                        short(&r.event_key),
                        r.effect_id,
                        b.slot_id
                    ));
                }
            }
            (RecordStatus::Committed, None) => v.push(format!(
                "event {} committed without a TMS booking",
                short(&r.event_key)
            )),
            // Booked by an earlier generation, which expired; the booking stays.
            (_, Some(_)) if booked_by.is_some_and(|g| g < last_gen) => {}
            (status, Some(b)) => v.push(format!(
                "event {} has TMS booking {} but its record is {status}",
                short(&r.event_key),
                b.slot_id
            )),
            (_, None) => {}
        }
    }
    for b in &f.bookings {
        let pk = record_pk(f.integration, &b.source_event);
        if !records.contains_key(pk.as_str()) {
            v.push(format!("TMS booking {} without a record", b.slot_id));
            continue;
        }
        let gen = obs
            .bookings
            .get(&b.source_event)
            .and_then(|(_, g)| gens_of(&pk).get(*g));
        if f.schedule.key_support
            && !f.slots.iter().any(|s| {
                s.effect_id == b.slot_id
                    && gen.is_some_and(|g| s.idempotency_key.as_deref() == Some(g.op_key.as_str()))
                    && s.equipment_number == b.container
            })
        {
            v.push(format!(
                "event {} booked slot {} the terminal never issued under its key",
                short(&b.source_event),
                b.slot_id
            ));
        }
    }

    // 4. No booked event in the manual queue for its booked content (a person would book it
    // again): no item for the event sent while a generation with the booked fingerprint was
    // its record, except for a window that has ended (nothing to book).
    for (event_key, (booking, booked_gen)) in &obs.bookings {
        let pk = record_pk(f.integration, event_key);
        let gens = gens_of(&pk);
        let Some(booked) = gens.get(*booked_gen) else {
            continue;
        };
        let Some(its) = items.get(&format!("event:{event_key}")) else {
            continue;
        };
        let same: Vec<&str> = its
            .iter()
            .filter(|(at, i)| {
                i.reason != ManualReason::EventEnded
                    && obs
                        .gen_at(&pk, *at)
                        .is_some_and(|(_, g)| g.fingerprint == booked.fingerprint)
            })
            .map(|(_, i)| truck_slot::manual_reason_code(i.reason))
            .collect();
        if !same.is_empty() {
            v.push(format!(
                "event {} is booked (slot {}) and also in the manual queue for the same \
                 content: {same:?}",
                short(event_key),
                booking.slot_id
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
