//! What the checker needs to know about the run's history, not only its end: the simulation
//! watches the store after every step that touched it (every store call is its own step, so
//! nothing is missed between two looks) and keeps
//!
//! * every **generation** of every record: a record replaced after it expired (a new reservation
//!   at the same key, a routing record for an ended window) starts a new generation; a take-over
//!   does not;
//! * every **TMS booking write**: a booking, once written, is never replaced or removed (the
//!   invariant of `check`; the bookings table has no TTL, a commit's booking is conditional on
//!   there being none);
//! * the **reserved identity**: a reservation (its `created_at`) never changes its fingerprint
//!   or its operation key;
//! * **liveness**: after the faults heal (and the reconciler's outage ends), every record leaves
//!   `in_flight` within [`Observer::bound_ms`] of when it entered it or of the heal, whichever is
//!   later.

use std::collections::{BTreeMap, BTreeSet};

use gate::record::{IdempotencyRecord, RecordStatus};
use truck_slot::TmsBooking;

use super::shared::short;

/// One generation of one record (one reservation and what became of it).
#[derive(Debug, Clone)]
pub(crate) struct Gen {
    /// When the simulation first saw it, true simulated epoch ms.
    pub first_seen_ms: i64,
    /// Its `created_at`, epoch ms by the reserving host's clock.
    pub created_at_ms: i64,
    /// Its fingerprint.
    pub fingerprint: String,
    /// Its operation key.
    pub op_key: String,
    /// The slot it was committed with, if it was.
    pub committed_slot: Option<String>,
    /// Its state when last seen.
    pub status: RecordStatus,
    /// Since when it has work (`in_flight`, or a routing not yet confirmed), true ms, while it
    /// has.
    pub in_flight_since: Option<i64>,
}

/// The store's history as the simulation saw it.
#[derive(Debug, Default)]
pub(crate) struct Observer {
    last_calls: Option<u64>,
    /// Generations per record `pk`, oldest first.
    pub gens: BTreeMap<String, Vec<Gen>>,
    /// Every booking as first written, and the generation (index into `gens[pk]`) that wrote it.
    pub bookings: BTreeMap<String, (TmsBooking, usize)>,
    /// Violations seen during the run (booking replaced, liveness bound exceeded), each once.
    pub violations: Vec<String>,
    /// From when the liveness bound applies: the heal, or the end of a reconciler outage, true ms.
    pub settled_ms: i64,
    /// The liveness bound, ms.
    pub bound_ms: i64,
    /// The longest a record stayed `in_flight` past `settled_ms` (or past entering it), ms.
    pub longest_ms: i64,
    /// Record generations already reported as past the bound.
    late: BTreeSet<(String, usize)>,
    /// Records replaced by a new generation so far.
    pub replaced: u64,
}

impl Observer {
    /// An observer whose liveness bound is `bound_ms` from `settled_ms` on.
    pub fn new(settled_ms: i64, bound_ms: i64) -> Self {
        Self {
            settled_ms,
            bound_ms,
            ..Self::default()
        }
    }

    /// Whether the store was called since the last look (`calls` is its call counter).
    pub fn stale(&self, calls: u64) -> bool {
        self.last_calls != Some(calls)
    }

    /// Looks at the store at true time `now`; `calls` is the store's call counter after the look.
    pub fn look(
        &mut self,
        now: i64,
        integration: &str,
        records: &[IdempotencyRecord],
        bookings: &[TmsBooking],
        calls: u64,
    ) {
        self.last_calls = Some(calls);
        let mut found = Vec::new();
        for r in records {
            let gens = self.gens.entry(r.pk.clone()).or_default();
            // The identity a reserve wrote is the record's to the end: the same reservation
            // (its `created_at`) with another fingerprint or operation key was rewritten.
            if let Some(g) = gens.last() {
                if g.created_at_ms == r.created_at_ms
                    && (g.fingerprint != r.fingerprint || g.op_key != r.op_key)
                {
                    found.push(format!(
                        "record {} changed its reserved identity: fingerprint {} -> {}, \
                         operation key {} -> {}",
                        short(&r.event_key),
                        short(&g.fingerprint),
                        short(&r.fingerprint),
                        short(&g.op_key),
                        short(&r.op_key)
                    ));
                }
            }
            let new_gen = match gens.last() {
                None => true,
                Some(g) => {
                    g.created_at_ms != r.created_at_ms
                        || g.fingerprint != r.fingerprint
                        || g.op_key != r.op_key
                        || (g.status != RecordStatus::InFlight
                            && r.status == RecordStatus::InFlight)
                }
            };
            if new_gen {
                if !gens.is_empty() {
                    self.replaced += 1;
                }
                gens.push(Gen {
                    first_seen_ms: now,
                    created_at_ms: r.created_at_ms,
                    fingerprint: r.fingerprint.clone(),
                    op_key: r.op_key.clone(),
                    committed_slot: None,
                    status: r.status,
                    in_flight_since: None,
                });
            }
            let index = gens.len() - 1;
            let Some(g) = gens.last_mut() else { continue };
            g.status = r.status;
            if r.status == RecordStatus::Committed {
                g.committed_slot.clone_from(&r.effect_id);
            }
            match (r.has_work(), g.in_flight_since) {
                (true, None) => g.in_flight_since = Some(now),
                (true, Some(since)) => {
                    let over = now - since.max(self.settled_ms);
                    if over > self.longest_ms {
                        self.longest_ms = over;
                    }
                    if over > self.bound_ms && self.late.insert((r.pk.clone(), index)) {
                        found.push(format!(
                            "record {} still in_flight {} s after the faults healed or it \
                             entered in_flight (liveness bound {} s)",
                            short(&r.event_key),
                            over / 1000,
                            self.bound_ms / 1000
                        ));
                    }
                }
                (_, Some(_)) => g.in_flight_since = None,
                _ => {}
            }
        }
        for line in found {
            self.note(line);
        }
        for b in bookings {
            let pk = gate::record::record_pk(integration, &b.source_event);
            let gen = self.gens.get(&pk).map_or(0, |g| g.len().saturating_sub(1));
            match self.bookings.get(&b.source_event) {
                None => {
                    let committed = self
                        .gens
                        .get(&pk)
                        .and_then(|g| g.last())
                        .and_then(|g| g.committed_slot.as_deref());
                    if committed != Some(b.slot_id.as_str()) {
                        self.note(format!(
                            "TMS booking {} for event {} written while its record is not \
                             committed with that slot ({committed:?})",
                            b.slot_id,
                            short(&b.source_event)
                        ));
                    }
                    self.bookings
                        .insert(b.source_event.clone(), (b.clone(), gen));
                }
                Some((first, _)) if first != b => {
                    let line = format!(
                        "TMS booking for event {} replaced: slot {} booked at {} became slot {} \
                         booked at {}",
                        short(&b.source_event),
                        first.slot_id,
                        first.booked_at_ms,
                        b.slot_id,
                        b.booked_at_ms
                    );
                    self.note(line);
                }
                Some(_) => {}
            }
        }
        let present: Vec<&str> = bookings.iter().map(|b| b.source_event.as_str()).collect();
        let gone: Vec<String> = self
            .bookings
            .keys()
            .filter(|k| !present.contains(&k.as_str()))
            .cloned()
            .collect();
        for k in gone {
            self.note(format!("TMS booking for event {} removed", short(&k)));
        }
    }

    fn note(&mut self, line: String) {
        if !self.violations.contains(&line) {
            self.violations.push(line);
        }
    }

    /// The generation of `pk` live at true time `at_ms` (the last one first seen by then; the
    /// first one if none was).
    pub fn gen_at(&self, pk: &str, at_ms: i64) -> Option<(usize, &Gen)> {
        let gens = self.gens.get(pk)?;
        let i = gens
            .iter()
            .rposition(|g| g.first_seen_ms <= at_ms)
            .unwrap_or(0);
        gens.get(i).map(|g| (i, g))
    }
}
