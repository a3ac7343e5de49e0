//! The one decision for a record the gate holds: from the record, the time and what the
//! integration says about the record's server ([`Policy`]), the next step ([`NextStep`]). A pure
//! function ([`decide`]); the consumer and the reconciler carry it out (the held record's
//! `proceed`), and `gatectl show` prints it ([`NextStep::describe`]).
//!
//! Who asks matters in one place only: a lookup that fails. The consumer retries (the lease is
//! released and the delivery comes back; its retries are bounded by the queue's receive count,
//! then the reconciler), and so does the reconciler before the horizon (its next run, and the
//! horizon bounds it); past the horizon the reconciler hands the record to a person
//! ([`Handover::PastHorizonLookupFailed`]) instead of asking a failing server every minute
//! until the record's TTL.

use crate::effect::AnswerDetail;
use crate::manual::ManualReason;
use crate::record::is_routing_record;
use crate::record::IdempotencyRecord;

/// Who holds the record and asks what to do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// A delivery of the event: after its own reservation, or after taking an expired lease
    /// over.
    Consumer,
    /// The reconciler after taking a stranded record's expired lease over (also
    /// `gatectl reconcile`, which runs the reconciler's work on one record).
    Reconciler,
}

/// What the integration says about the server of one record: the inputs of [`decide`] besides
/// the record, the time and the holder (`Gate::policy` reads them from the integration, with
/// `GateConfig`'s settings where the integration says nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// The server honours `Idempotency-Key`
    /// ([`crate::Integration::supports_idempotency_key`], else
    /// `GateConfig::server_supports_idempotency_key`).
    pub supports_key: bool,
    /// The server can say which effect it holds under a key
    /// ([`crate::integration::lookup_for`]).
    pub supports_lookup: bool,
    /// The claim horizon, **milliseconds** of record age: the server's key retention minus a
    /// margin ([`crate::Integration::claim_horizon_ms`], else `GateConfig::claim_horizon_ms`).
    /// A record this old or older is never sent again.
    pub claim_horizon_ms: i64,
    /// The end of the event the record guards, epoch **milliseconds**
    /// ([`crate::Integration::ends_at_ms`]); `None` when it does not end. At and after it no
    /// side effect is started.
    pub ends_at_ms: Option<i64>,
}

/// What the gate does next with a record whose lease it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NextStep {
    /// Send the item a routing record stores to the manual queue (and confirm it); never the
    /// side effect.
    ResumeRouting,
    /// Send the stored request under the record's `Idempotency-Key` and settle the answer
    /// (commit an effect, release on a transient failure, a person on a permanent one). A
    /// re-send is answered with the server's first answer: it is the lookup.
    Call,
    /// Never send: look the effect up under the record's key. Found: commit it. Not found:
    /// `if_not_found`. The lookup failed (unknown): `if_failed`.
    LookUp {
        /// The hand-over when the server holds no effect under the key.
        if_not_found: Handover,
        /// What to do when the lookup fails.
        if_failed: IfFailed,
    },
    /// A person gets the record now; the server is not contacted.
    ToPerson(Handover),
}

/// What to do when a lookup fails (a transient answer: the outcome is unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfFailed {
    /// Release the lease and try again later (the delivery's retry, the reconciler's next run).
    Retry,
    /// A person gets the record, told the lookup failed.
    ToPerson(Handover),
}

/// Why a held record goes to a person, which sets what the person is told is known and what is
/// not ([`Handover::detail`]) and the manual item's reason ([`Handover::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handover {
    /// The server does not honour `Idempotency-Key`: the request is never sent by the gate.
    NoKeySupport,
    /// Past the claim horizon, and the server holds no effect under the key (which it may have
    /// forgotten).
    PastHorizonNotFound,
    /// Past the claim horizon, and the lookup failed: whether the effect happened is unknown.
    PastHorizonLookupFailed,
    /// Past the claim horizon, and the server has no lookup by key: whether the effect happened
    /// is unknown.
    PastHorizonNoLookup,
    /// The event ended, and the server holds no effect under the key.
    EndedNotFound,
    /// The event ended, and the server has no lookup by key: whether the effect happened is
    /// unknown.
    EndedNoLookup,
}

/// The next step for `record`, which the asking `holder` holds the lease of, at `now_ms` (epoch
/// ms), under `policy`. Pure: nothing read from anywhere else.
///
/// The rules, in order:
///
/// 1. A routing record, or a record whose routing to a person is marked but not confirmed: send
///    its stored item ([`NextStep::ResumeRouting`]); never the side effect.
/// 2. A server that does not honour `Idempotency-Key`: a person ([`Handover::NoKeySupport`]);
///    never sent, since a retry without a key could make a second effect.
/// 3. Before the claim horizon (age = now - `created_at` below the server's key retention minus a
///    margin) and before the event's end: send the stored request under the record's key
///    ([`NextStep::Call`]). For a first send that is the side effect; for a re-send (a
///    take-over, the reconciler) a server that honours the key answers with its first answer
///    (IETF `draft-ietf-httpapi-idempotency-key-header`: a retry after completion gets the first
///    result), so **the re-send is the lookup**: a lookup first would cost a round trip and
///    say nothing more, and a server without a lookup needs no other path.
/// 4. At or past the horizon (the server may have forgotten the key: a send could make a second
///    effect) or at or after the event's end (no side effect is started after it): never send.
///    Look the effect up under the key ([`NextStep::LookUp`]): found, commit it; not found, a
///    person. Past the horizon the horizon's reason wins over the event's end.
/// 5. Step 4 with a server that has no lookup by key ([`Policy::supports_lookup`] `false`): a
///    person at once, told that whether the effect happened is unknown
///    ([`Handover::PastHorizonNoLookup`], [`Handover::EndedNoLookup`]).
pub(crate) fn decide(
    record: &IdempotencyRecord,
    now_ms: i64,
    policy: &Policy,
    holder: Holder,
) -> NextStep {
    if record.route_pending || is_routing_record(record) {
        return NextStep::ResumeRouting;
    }
    if !policy.supports_key {
        return NextStep::ToPerson(Handover::NoKeySupport);
    }
    let past_horizon = age_ms(record, now_ms) >= policy.claim_horizon_ms;
    let ended = policy.ends_at_ms.is_some_and(|end| end <= now_ms);
    if !past_horizon && !ended {
        return NextStep::Call;
    }
    if !policy.supports_lookup {
        return NextStep::ToPerson(if past_horizon {
            Handover::PastHorizonNoLookup
        } else {
            Handover::EndedNoLookup
        });
    }
    let if_not_found = if past_horizon {
        Handover::PastHorizonNotFound
    } else {
        Handover::EndedNotFound
    };
    let if_failed = match holder {
        Holder::Reconciler if past_horizon => IfFailed::ToPerson(Handover::PastHorizonLookupFailed),
        Holder::Reconciler | Holder::Consumer => IfFailed::Retry,
    };
    NextStep::LookUp {
        if_not_found,
        if_failed,
    }
}

/// The record's age at `now_ms`, milliseconds (never negative).
fn age_ms(record: &IdempotencyRecord, now_ms: i64) -> i64 {
    now_ms.saturating_sub(record.created_at_ms).max(0)
}

/// Epoch ms as RFC 3339 UTC (`2025-06-09T10:00:00Z`); `unknown` without one.
fn end_text(ends_at_ms: Option<i64>) -> String {
    ends_at_ms
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || "unknown".to_string(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        )
}

impl Handover {
    /// The manual item's reason (its code is the wire format): `no_idempotency_support`,
    /// `past_key_retention` for the three past-horizon cases, `window_ended` for the two ended
    /// ones.
    pub fn reason(self) -> ManualReason {
        match self {
            Self::NoKeySupport => ManualReason::NoIdempotencySupport,
            Self::PastHorizonNotFound
            | Self::PastHorizonLookupFailed
            | Self::PastHorizonNoLookup => ManualReason::PastKeyRetention,
            Self::EndedNotFound | Self::EndedNoLookup => ManualReason::EventEnded,
        }
    }

    /// What a person is told (the manual item's `detail`, the record's `error`): what is known of
    /// the effect under `record`'s key at `now_ms` (epoch ms) and what is not, and what to do.
    /// `failure` is the failed lookup's answer, for [`Handover::PastHorizonLookupFailed`]: its
    /// summary in our words (never the server's text). Quotes no stored request.
    pub fn detail(
        self,
        record: &IdempotencyRecord,
        policy: &Policy,
        now_ms: i64,
        failure: Option<&AnswerDetail>,
    ) -> String {
        let key = &record.op_key;
        let past = format!(
            "in_flight for {} s, past the claim horizon ({} s: the server's key retention minus \
             a margin)",
            age_ms(record, now_ms) / 1000,
            policy.claim_horizon_ms / 1000
        );
        let ended = format!(
            "in_flight when its event ended ({})",
            end_text(policy.ends_at_ms)
        );
        let no_second = "a new call could make a second effect";
        match self {
            Self::NoKeySupport => format!(
                "the server does not honour Idempotency-Key, so the gate never sends this \
                 request ({no_second}); make the effect by hand if it is still wanted"
            ),
            Self::PastHorizonNotFound => format!(
                "{past}; the server holds no effect under Idempotency-Key {key}, but it may have \
                 forgotten the key: ask the server before making the effect by hand \
                 ({no_second})"
            ),
            Self::PastHorizonLookupFailed => format!(
                "{past}, and the lookup under Idempotency-Key {key} failed ({}): whether the \
                 effect happened is unknown; ask the server (`gatectl lookup {}` shows its \
                 answer live) before making it by hand ({no_second})",
                failure.map_or_else(|| "no answer".to_string(), AnswerDetail::to_string),
                record.event_key
            ),
            Self::PastHorizonNoLookup => format!(
                "{past}; the server has no lookup by key: whether the effect under \
                 Idempotency-Key {key} happened is unknown; ask the server before making it by \
                 hand ({no_second})"
            ),
            Self::EndedNotFound => format!(
                "{ended}; the server holds no effect under Idempotency-Key {key}: nothing is \
                 sent after the event's end; make the effect by hand if it is still wanted"
            ),
            Self::EndedNoLookup => format!(
                "{ended}; the server has no lookup by key: whether the effect under \
                 Idempotency-Key {key} happened is unknown, and nothing is sent after the \
                 event's end; ask the server"
            ),
        }
    }

    /// One line for `gatectl`: the reason's code and why, with the record's age in hours.
    fn summary(self, record: &IdempotencyRecord, policy: &Policy, now_ms: i64) -> String {
        let code = self.reason().code();
        let hours = age_ms(record, now_ms) / 3_600_000;
        let horizon_h = policy.claim_horizon_ms / 3_600_000;
        let end = end_text(policy.ends_at_ms);
        match self {
            Self::NoKeySupport => format!("{code}: the server does not honour Idempotency-Key"),
            Self::PastHorizonNotFound | Self::PastHorizonLookupFailed => format!(
                "{code}: {hours} h old, past the claim horizon of {horizon_h} h, the server may \
                 have forgotten the key"
            ),
            Self::PastHorizonNoLookup => format!(
                "{code}: {hours} h old, past the claim horizon of {horizon_h} h, and the server \
                 has no lookup by key: whether the effect happened is unknown"
            ),
            Self::EndedNotFound => format!("{code}: the event ended at {end}"),
            Self::EndedNoLookup => format!(
                "{code}: the event ended at {end}, and the server has no lookup by key: whether \
                 the effect happened is unknown"
            ),
        }
    }
}

impl NextStep {
    /// The step in words for a person (`gatectl show`, the plan of `gatectl reconcile`), as
    /// the rest of a sentence whose subject is the holder: "looks the effect up under ...".
    /// Quotes no stored request.
    pub fn describe(&self, record: &IdempotencyRecord, policy: &Policy, now_ms: i64) -> String {
        match *self {
            Self::ResumeRouting => {
                "sends its stored item to the manual queue (never the side effect)".to_string()
            }
            Self::Call => "sends the stored request under its Idempotency-Key and commits the \
                           answer (if the first send reached the server, its replay of the first \
                           answer is the lookup: no second effect)"
                .to_string(),
            Self::LookUp {
                if_not_found,
                if_failed,
            } => {
                let failed = match if_failed {
                    IfFailed::Retry => "tries again later".to_string(),
                    IfFailed::ToPerson(h) => format!(
                        "routes it to a person ({})",
                        h.summary(record, policy, now_ms)
                    ),
                };
                format!(
                    "looks the effect up under its Idempotency-Key and commits it, never sends \
                     it again; finding none, routes it to a person ({}); if the lookup fails, \
                     {failed}",
                    if_not_found.summary(record, policy, now_ms)
                )
            }
            Self::ToPerson(h) => format!(
                "routes it to a person, never sending it ({})",
                h.summary(record, policy, now_ms)
            ),
        }
    }
}

#[cfg(test)]
mod table;

#[cfg(test)]
mod texts;
