//! What a person is told: the texts of [`super::Handover`] and [`super::NextStep::describe`] say
//! what is known and what is not, in the core's words (effect, server, key), never an
//! integration's.

use super::*;
use crate::keys;
use crate::record::RecordStatus;

/// 2026-06-01T06:00:00Z, epoch ms.
const NOW: i64 = 1_780_293_600_000;
const HOUR: i64 = 3_600_000;

fn record(age_ms: i64) -> IdempotencyRecord {
    let event_key = keys::sha256_hex(b"event");
    IdempotencyRecord {
        pk: format!("it#{event_key}"),
        op_key: "op-key-1".into(),
        event_key,
        status: RecordStatus::InFlight,
        fingerprint: keys::sha256_hex(b"fields"),
        request: br#"{"secret":"4711"}"#.to_vec(),
        lease_owner: Some("inv-1#0".into()),
        lease_until_ms: Some(NOW + 30_000),
        created_at_ms: NOW - age_ms,
        updated_at_ms: NOW,
        expires_at_s: NOW / 1000 + 21 * 24 * 3600,
        effect_id: None,
        effect_ids: Default::default(),
        inflight_shard: Some("00".into()),
        error: None,
        route_pending: false,
        labels: Default::default(),
    }
}

/// 23 h horizon, the event ended at 2026-06-01T05:00:00Z.
fn policy(lookup: bool) -> Policy {
    Policy {
        supports_key: true,
        supports_lookup: lookup,
        claim_horizon_ms: 23 * HOUR,
        ends_at_ms: Some(NOW - HOUR),
    }
}

const ALL: [Handover; 6] = [
    Handover::NoKeySupport,
    Handover::PastHorizonNotFound,
    Handover::PastHorizonLookupFailed,
    Handover::PastHorizonNoLookup,
    Handover::EndedNotFound,
    Handover::EndedNoLookup,
];

#[test]
fn each_hand_over_keeps_its_wire_reason() {
    let codes: Vec<&str> = ALL.iter().map(|h| h.reason().code()).collect();
    assert_eq!(
        codes,
        [
            "no_idempotency_support",
            "past_key_retention",
            "past_key_retention",
            "past_key_retention",
            "event_ended",
            "event_ended",
        ]
    );
}

#[test]
fn without_a_lookup_the_person_is_told_the_effect_is_unknown_never_that_none_exists() {
    let r = record(25 * HOUR);
    assert_eq!(
        Handover::PastHorizonNoLookup.detail(&r, &policy(false), NOW, None),
        "in_flight for 90000 s, past the claim horizon (82800 s: the server's key retention \
         minus a margin); the server has no lookup by key: whether the effect under \
         Idempotency-Key op-key-1 happened is unknown; ask the server before making it by hand \
         (a new call could make a second effect)"
    );
    assert_eq!(
        Handover::EndedNoLookup.detail(&record(2 * HOUR), &policy(false), NOW, None),
        "in_flight when its event ended (2026-06-01T05:00:00Z); the server has no lookup by \
         key: whether the effect under Idempotency-Key op-key-1 happened is unknown, and nothing \
         is sent after the event's end; ask the server"
    );
}

#[test]
fn a_lookup_that_found_nothing_or_failed_says_so() {
    let r = record(25 * HOUR);
    assert_eq!(
        Handover::PastHorizonNotFound.detail(&r, &policy(true), NOW, None),
        "in_flight for 90000 s, past the claim horizon (82800 s: the server's key retention \
         minus a margin); the server holds no effect under Idempotency-Key op-key-1, but it may \
         have forgotten the key: ask the server before making the effect by hand (a new call \
         could make a second effect)"
    );
    let failure = AnswerDetail::new("server answered 503 (12 bytes)");
    assert_eq!(
        Handover::PastHorizonLookupFailed.detail(&r, &policy(true), NOW, Some(&failure)),
        format!(
            "in_flight for 90000 s, past the claim horizon (82800 s: the server's key retention \
         minus a margin), and the lookup under Idempotency-Key op-key-1 failed (server answered \
         503 (12 bytes)): whether the effect happened is unknown; ask the server (`gatectl \
         lookup {}` shows its answer live) before making it by hand (a new call could make a \
         second effect)",
            r.event_key
        )
    );
    assert_eq!(
        Handover::EndedNotFound.detail(&record(2 * HOUR), &policy(true), NOW, None),
        "in_flight when its event ended (2026-06-01T05:00:00Z); the server holds no effect \
         under Idempotency-Key op-key-1: nothing is sent after the event's end; make the effect \
         by hand if it is still wanted"
    );
    assert_eq!(
        Handover::NoKeySupport.detail(&r, &policy(true), NOW, None),
        "the server does not honour Idempotency-Key, so the gate never sends this request (a \
         new call could make a second effect); make the effect by hand if it is still wanted"
    );
}

#[test]
fn the_texts_speak_the_cores_words_and_quote_no_request() {
    let r = record(25 * HOUR);
    let failure = AnswerDetail::new("server answered 503 (0 bytes)");
    let mut texts: Vec<String> = ALL
        .iter()
        .map(|h| h.detail(&r, &policy(true), NOW, Some(&failure)))
        .collect();
    for step in [
        NextStep::ResumeRouting,
        NextStep::Call,
        NextStep::LookUp {
            if_not_found: Handover::PastHorizonNotFound,
            if_failed: IfFailed::ToPerson(Handover::PastHorizonLookupFailed),
        },
        NextStep::LookUp {
            if_not_found: Handover::EndedNotFound,
            if_failed: IfFailed::Retry,
        },
    ]
    .into_iter()
    .chain(ALL.map(NextStep::ToPerson))
    {
        texts.push(step.describe(&r, &policy(true), NOW));
    }
    for text in &texts {
        for word in ["slot", "terminal", "claim request", "container", "4711"] {
            assert!(!text.contains(word), "{word:?} in {text:?}");
        }
    }
}

#[test]
fn describe_names_the_reason_and_what_follows_a_failed_lookup() {
    let r = record(25 * HOUR);
    assert_eq!(
        NextStep::LookUp {
            if_not_found: Handover::PastHorizonNotFound,
            if_failed: IfFailed::ToPerson(Handover::PastHorizonLookupFailed),
        }
        .describe(&r, &policy(true), NOW),
        "looks the effect up under its Idempotency-Key and commits it, never sends it again; \
         finding none, routes it to a person (past_key_retention: 25 h old, past the claim \
         horizon of 23 h, the server may have forgotten the key); if the lookup fails, routes it \
         to a person (past_key_retention: 25 h old, past the claim horizon of 23 h, the server \
         may have forgotten the key)"
    );
    assert_eq!(
        NextStep::ToPerson(Handover::PastHorizonNoLookup).describe(&r, &policy(false), NOW),
        "routes it to a person, never sending it (past_key_retention: 25 h old, past the claim \
         horizon of 23 h, and the server has no lookup by key: whether the effect happened is \
         unknown)"
    );
}
