//! The table test of [`super::decide`]: every combination of its inputs with the next step
//! written out by hand (never computed by the code under test).
//!
//! Inputs: the record (an event's record, a routing record, a record whose routing is pending),
//! key support, lookup support, the age against the claim horizon (one millisecond before it, or
//! exactly at it: at the horizon counts as past), the event's end (none, one millisecond after
//! now, exactly now: at the end counts as ended) and who asks.

use super::Handover::*;
use super::IfFailed::Retry;
use super::NextStep::*;
use super::*;
use crate::keys;
use crate::record::RecordStatus;

use self::Age::*;
use self::End::*;
use self::Kind::*;
use super::Holder::*;

/// 2026-06-01T06:00:00Z, epoch ms.
const NOW: i64 = 1_780_293_600_000;
/// 23 h, ms.
const HORIZON: i64 = 23 * 3_600_000;

const KEY: bool = true;
const NO_KEY: bool = false;
const LOOKUP: bool = true;
const NO_LOOKUP: bool = false;

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An event's record, `in_flight`.
    Plain,
    /// A routing record (its `op_key` is the `manual-route` operation's), `in_flight`.
    Routing,
    /// An event's record marked `manual` with its routing pending.
    Pending,
}

#[derive(Debug, Clone, Copy)]
enum Age {
    /// Created `HORIZON - 1` ms before now.
    Before,
    /// Created exactly `HORIZON` ms before now.
    Past,
}

#[derive(Debug, Clone, Copy)]
enum End {
    /// The event does not end.
    Endless,
    /// It ends 1 ms after now.
    Later,
    /// It ends exactly now.
    Reached,
}

fn record(kind: Kind, age: Age) -> IdempotencyRecord {
    let event_key = keys::sha256_hex(b"event");
    let op_key = match kind {
        Routing => keys::operation_key(&event_key, keys::MANUAL_ROUTE),
        Plain | Pending => keys::operation_key(&event_key, "effect"),
    };
    IdempotencyRecord {
        pk: format!("it#{event_key}"),
        event_key,
        status: match kind {
            Pending => RecordStatus::Manual,
            Plain | Routing => RecordStatus::InFlight,
        },
        fingerprint: keys::sha256_hex(b"fields"),
        request: b"{}".to_vec(),
        op_key,
        lease_owner: Some("inv-1#0".into()),
        lease_until_ms: Some(NOW + 30_000),
        created_at_ms: match age {
            Before => NOW - (HORIZON - 1),
            Past => NOW - HORIZON,
        },
        updated_at_ms: NOW,
        expires_at_s: NOW / 1000 + 21 * 24 * 3600,
        effect_id: None,
        effect_ids: Default::default(),
        inflight_shard: Some("00".into()),
        error: None,
        route_pending: matches!(kind, Pending),
        labels: Default::default(),
    }
}

fn policy(key: bool, lookup: bool, end: End) -> Policy {
    Policy {
        supports_key: key,
        supports_lookup: lookup,
        claim_horizon_ms: HORIZON,
        ends_at_ms: match end {
            Endless => None,
            Later => Some(NOW + 1),
            Reached => Some(NOW),
        },
    }
}

#[rustfmt::skip]
const TABLE: [(Kind, bool, bool, Age, End, Holder, NextStep); 144] = [
        (Plain, KEY, LOOKUP, Before, Endless, Consumer, Call),
        (Plain, KEY, LOOKUP, Before, Endless, Reconciler, Call),
        (Plain, KEY, LOOKUP, Before, Later, Consumer, Call),
        (Plain, KEY, LOOKUP, Before, Later, Reconciler, Call),
        (Plain, KEY, LOOKUP, Before, Reached, Consumer, LookUp { if_not_found: EndedNotFound, if_failed: Retry }),
        (Plain, KEY, LOOKUP, Before, Reached, Reconciler, LookUp { if_not_found: EndedNotFound, if_failed: Retry }),
        (Plain, KEY, LOOKUP, Past, Endless, Consumer, LookUp { if_not_found: PastHorizonNotFound, if_failed: Retry }),
        (Plain, KEY, LOOKUP, Past, Endless, Reconciler, LookUp { if_not_found: PastHorizonNotFound, if_failed: IfFailed::ToPerson(PastHorizonLookupFailed) }),
        (Plain, KEY, LOOKUP, Past, Later, Consumer, LookUp { if_not_found: PastHorizonNotFound, if_failed: Retry }),
        (Plain, KEY, LOOKUP, Past, Later, Reconciler, LookUp { if_not_found: PastHorizonNotFound, if_failed: IfFailed::ToPerson(PastHorizonLookupFailed) }),
        (Plain, KEY, LOOKUP, Past, Reached, Consumer, LookUp { if_not_found: PastHorizonNotFound, if_failed: Retry }),
        (Plain, KEY, LOOKUP, Past, Reached, Reconciler, LookUp { if_not_found: PastHorizonNotFound, if_failed: IfFailed::ToPerson(PastHorizonLookupFailed) }),
        (Plain, KEY, NO_LOOKUP, Before, Endless, Consumer, Call),
        (Plain, KEY, NO_LOOKUP, Before, Endless, Reconciler, Call),
        (Plain, KEY, NO_LOOKUP, Before, Later, Consumer, Call),
        (Plain, KEY, NO_LOOKUP, Before, Later, Reconciler, Call),
        (Plain, KEY, NO_LOOKUP, Before, Reached, Consumer, ToPerson(EndedNoLookup)),
        (Plain, KEY, NO_LOOKUP, Before, Reached, Reconciler, ToPerson(EndedNoLookup)),
        (Plain, KEY, NO_LOOKUP, Past, Endless, Consumer, ToPerson(PastHorizonNoLookup)),
        (Plain, KEY, NO_LOOKUP, Past, Endless, Reconciler, ToPerson(PastHorizonNoLookup)),
        (Plain, KEY, NO_LOOKUP, Past, Later, Consumer, ToPerson(PastHorizonNoLookup)),
        (Plain, KEY, NO_LOOKUP, Past, Later, Reconciler, ToPerson(PastHorizonNoLookup)),
        (Plain, KEY, NO_LOOKUP, Past, Reached, Consumer, ToPerson(PastHorizonNoLookup)),
        (Plain, KEY, NO_LOOKUP, Past, Reached, Reconciler, ToPerson(PastHorizonNoLookup)),
        (Plain, NO_KEY, LOOKUP, Before, Endless, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Before, Endless, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Before, Later, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Before, Later, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Before, Reached, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Before, Reached, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Past, Endless, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Past, Endless, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Past, Later, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Past, Later, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Past, Reached, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, LOOKUP, Past, Reached, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Before, Endless, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Before, Endless, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Before, Later, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Before, Later, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Before, Reached, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Before, Reached, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Past, Endless, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Past, Endless, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Past, Later, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Past, Later, Reconciler, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Past, Reached, Consumer, ToPerson(NoKeySupport)),
        (Plain, NO_KEY, NO_LOOKUP, Past, Reached, Reconciler, ToPerson(NoKeySupport)),
        (Routing, KEY, LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Routing, KEY, LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Routing, KEY, LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Routing, KEY, LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Routing, KEY, LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Routing, KEY, LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Routing, KEY, LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Routing, KEY, LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Routing, KEY, LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Routing, KEY, LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Routing, KEY, LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Routing, KEY, LOOKUP, Past, Reached, Reconciler, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Routing, KEY, NO_LOOKUP, Past, Reached, Reconciler, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Routing, NO_KEY, LOOKUP, Past, Reached, Reconciler, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Routing, NO_KEY, NO_LOOKUP, Past, Reached, Reconciler, ResumeRouting),
        (Pending, KEY, LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Pending, KEY, LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Pending, KEY, LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Pending, KEY, LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Pending, KEY, LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Pending, KEY, LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Pending, KEY, LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Pending, KEY, LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Pending, KEY, LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Pending, KEY, LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Pending, KEY, LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Pending, KEY, LOOKUP, Past, Reached, Reconciler, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Pending, KEY, NO_LOOKUP, Past, Reached, Reconciler, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Pending, NO_KEY, LOOKUP, Past, Reached, Reconciler, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Before, Endless, Consumer, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Before, Endless, Reconciler, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Before, Later, Consumer, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Before, Later, Reconciler, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Before, Reached, Consumer, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Before, Reached, Reconciler, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Past, Endless, Consumer, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Past, Endless, Reconciler, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Past, Later, Consumer, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Past, Later, Reconciler, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Past, Reached, Consumer, ResumeRouting),
        (Pending, NO_KEY, NO_LOOKUP, Past, Reached, Reconciler, ResumeRouting),
];

#[test]
fn every_combination_has_its_next_step() {
    let mut wrong = Vec::new();
    for (kind, key, lookup, age, end, holder, expected) in TABLE {
        let got = decide(&record(kind, age), NOW, &policy(key, lookup, end), holder);
        if got != expected {
            wrong.push(format!(
                "{kind:?} key={key} lookup={lookup} {age:?} {end:?} {holder:?}: \
                 expected {expected:?}, got {got:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_table_holds_every_combination_once() {
    let mut seen = std::collections::BTreeSet::new();
    for (kind, key, lookup, age, end, holder, _) in TABLE {
        assert!(
            seen.insert(format!(
                "{kind:?} {key} {lookup} {age:?} {end:?} {holder:?}"
            )),
            "twice: {kind:?} {key} {lookup} {age:?} {end:?} {holder:?}"
        );
    }
    assert_eq!(seen.len(), 3 * 2 * 2 * 2 * 3 * 2);
}
