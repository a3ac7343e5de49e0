//! [`TruckSlot`]: the truck-slot path as a [`gate::Integration`]. A Portbase notification is
//! parsed strictly ([`parse_notification`]); its event is keyed by `"{notificationId}:{equipment
//! number}"`, fingerprinted by its business fields, and claimed at the terminal with the stored
//! claim request, after the gate holds the natural key (equipment number and window start) as a
//! guard; the commit writes the TMS booking.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use gate::effect::{CallOutcome, LookupOutcome};
use gate::integration::{Event, Held, Integration, Parsed, Rejection};
use gate::manual::ManualReason;
use gate::record::{natural_key_expires_at_s, IdempotencyRecord, Labels, NaturalKey, RowColumns};

use crate::keys::{claim_request, key_material, SLOT_CLAIM};
use crate::notification::{parse_notification, Notification, RejectReason};
use crate::terminal::several::TerminalPolicy;
use crate::terminal::SlotTerminal;

/// The labels of a truck-slot record and its TMS booking: the container (canonical ISO 6346),
/// the terminal code, the window's start and end (RFC 3339 UTC). The DynamoDB attributes of the
/// same names.
pub const LABELS: [&str; 4] = ["container", "terminal", "window_start", "window_end"];

/// The truck-slot integration: the terminals it books at, the terminal's slot API (one
/// terminal's client, or a [`crate::terminal::several::TerminalRouter`] for several), and each
/// terminal's policy when there are several.
#[derive(Clone)]
pub struct TruckSlot {
    terminal: Arc<dyn SlotTerminal>,
    known_terminals: Vec<String>,
    policies: BTreeMap<String, TerminalPolicy>,
}

impl TruckSlot {
    /// Books at `known_terminals` (exact codes; a notification naming another is rejected as
    /// `unknown_terminal`) through `terminal`.
    pub fn new(terminal: Arc<dyn SlotTerminal>, known_terminals: Vec<String>) -> Self {
        Self {
            terminal,
            known_terminals,
            policies: BTreeMap::new(),
        }
    }

    /// With each terminal's key support and claim horizon (`TERMINALS`): they replace the gate's
    /// single settings for records of that terminal. A terminal without key support gets its
    /// records routed to a person, never claimed.
    pub fn with_policies(mut self, policies: BTreeMap<String, TerminalPolicy>) -> Self {
        self.policies = policies;
        self
    }

    /// The terminal codes it books at.
    pub fn known_terminals(&self) -> &[String] {
        &self.known_terminals
    }
}

/// What the gate takes from a parsed notification: key material
/// `"{notificationId}:{equipment number}"`, the business fields, the claim request (holds the
/// PIN), the labels ([`LABELS`]), the window's end and the container as the subject.
///
/// # Errors
/// Only if the claim request cannot be written as canonical JSON, which a parsed notification
/// cannot cause.
pub fn event(notification: &Notification) -> Result<Event, serde_json::Error> {
    let container = notification.equipment_number.to_string();
    let window = &notification.preferred_window;
    Ok(Event {
        key_material: key_material(&notification.notification_id, &container),
        business_fields: serde_json::Value::Object(notification.business_fields.clone()),
        request: claim_request(notification)?,
        labels: Labels::from([
            ("container".to_string(), container.clone()),
            ("terminal".to_string(), notification.terminal.clone()),
            ("window_start".to_string(), window.start_rfc3339()),
            ("window_end".to_string(), window.end_rfc3339()),
        ]),
        ends_at_ms: Some(window.end.timestamp_millis()),
        subject: container,
    })
}

/// A notification's rejection as the gate routes it: the reason's code and words, `ended` for
/// [`RejectReason::WindowEnded`].
pub fn rejection(reason: &RejectReason) -> Rejection {
    Rejection {
        code: reason.code(),
        detail: reason.to_string(),
        ended: matches!(reason, RejectReason::WindowEnded { .. }),
    }
}

fn not_json(e: &serde_json::Error) -> Rejection {
    rejection(&RejectReason::NotJson(e.to_string()))
}

/// For a body rejected only because its terminal is not configured: the notification parsed as
/// if its terminal were (and, as for an ended window, the reason when its window has ended), so
/// that the gate lets its record decide if its event has a record of that very terminal (a
/// terminal removed from `TERMINALS` while its records were in flight or committed: a committed
/// event is a duplicate, one in flight is never claimed again and goes to a person once, with the
/// warning that a slot may exist; a rejection `unknown_terminal` as well would be a second item
/// for the event, silent on that slot). `None` for every other reason.
fn retired(
    body: &str,
    reason: &RejectReason,
    now_ms: i64,
) -> Option<(Notification, Option<RejectReason>)> {
    let RejectReason::UnknownTerminal = reason else {
        return None;
    };
    let terminal = serde_json::from_str::<serde_json::Value>(body)
        .ok()?
        .get("terminal")?
        .as_str()?
        .to_string();
    let known = [terminal];
    match parse_notification(body, now_ms, &known) {
        Ok(n) => Some((n, None)),
        Err(RejectReason::WindowEnded { end }) => {
            let end_ms = chrono::DateTime::parse_from_rfc3339(&end)
                .map_or(i64::MIN, |t| t.timestamp_millis());
            parse_notification(body, end_ms.saturating_sub(1), &known)
                .ok()
                .map(|n| (n, Some(RejectReason::WindowEnded { end })))
        }
        Err(_) => None,
    }
}

impl TruckSlot {
    /// For a body rejected only because its window has ended: the notification as parsed a
    /// millisecond before the window's end, so its keys (and its record) can decide; `None` for
    /// every other reason.
    fn parse_ended(&self, body: &str, reason: &RejectReason) -> Option<Notification> {
        let RejectReason::WindowEnded { end } = reason else {
            return None;
        };
        let end_ms = chrono::DateTime::parse_from_rfc3339(end)
            .ok()?
            .timestamp_millis();
        parse_notification(body, end_ms - 1, &self.known_terminals).ok()
    }
}

/// The code of a manual reason on truck-slot's manual-booking queue, in the words its readers
/// (the forwarder's manual-booking desk) know for the core's neutral reasons: `window_ended`, `terminal_key_mismatch`, `terminal_rejected`,
/// `terminal_answer_invalid`, `unbooked_slot`; the core's code for the others.
pub fn manual_reason_code(reason: ManualReason) -> &'static str {
    match reason {
        ManualReason::EventEnded => "window_ended",
        ManualReason::ServerKeyMismatch => "terminal_key_mismatch",
        ManualReason::ServerRejected => "terminal_rejected",
        ManualReason::ServerAnswerInvalid => "terminal_answer_invalid",
        ManualReason::UnrecordedEffect => "unbooked_slot",
        other => other.code(),
    }
}

/// What a manual reason means on the truck-slot path, for the person booking by hand.
pub fn manual_reason_text(reason: ManualReason) -> &'static str {
    match reason {
        ManualReason::EventEnded => "the time window had already ended: no slot is claimed for it",
        ManualReason::ServerKeyMismatch => {
            "the terminal said the key was reused with another claim request"
        }
        ManualReason::ServerRejected => "the terminal refused the claim (a permanent error)",
        ManualReason::ServerAnswerInvalid => {
            "the terminal answered with a slot for another container than asked"
        }
        ManualReason::UnrecordedEffect => {
            "the terminal issued a slot for a record already finished: nothing booked it"
        }
        ManualReason::CommittedWithoutEffectId => {
            "the record is committed without its slot id: the claim was not sent again, the slot \
             may exist"
        }
        other => other.text(),
    }
}

#[async_trait]
impl Integration for TruckSlot {
    fn operation(&self) -> &str {
        SLOT_CLAIM
    }

    fn parse(&self, body: &str, now_ms: i64) -> Parsed {
        match parse_notification(body, now_ms, &self.known_terminals) {
            Ok(n) => match event(&n) {
                Ok(e) => Parsed::Event(e),
                Err(e) => Parsed::Rejected(not_json(&e)),
            },
            Err(reason) => match self.parse_ended(body, &reason) {
                Some(n) => match event(&n) {
                    Ok(e) => Parsed::Ended(e, rejection(&reason)),
                    Err(e) => Parsed::Rejected(not_json(&e)),
                },
                None => match retired(body, &reason, now_ms) {
                    Some((n, ended)) => match event(&n) {
                        Ok(e) => Parsed::IfRecorded {
                            event: e,
                            ended: ended.as_ref().map(rejection),
                            rejection: rejection(&reason),
                            label: "terminal",
                        },
                        Err(e) => Parsed::Rejected(not_json(&e)),
                    },
                    None => Parsed::Rejected(rejection(&reason)),
                },
            },
        }
    }

    /// The claim at the record's terminal (label `terminal`).
    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let record = held.record();
        self.terminal
            .claim_at(record.label("terminal"), &record.op_key, &record.request)
            .await
    }

    /// The record's terminal's policy, with several terminals; `None` otherwise (the gate's
    /// setting). A record of a terminal since removed from `TERMINALS` goes on to the terminal
    /// port, which has no client for it and answers transient: looked up, never claimed, and past
    /// the horizon handed to a person.
    fn supports_idempotency_key(&self, record: &IdempotencyRecord) -> Option<bool> {
        self.policies
            .get(record.label("terminal"))
            .map(|p| p.supports_idempotency_key)
    }

    fn claim_horizon_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        self.policies
            .get(record.label("terminal"))
            .map(|p| p.claim_horizon_ms)
    }

    /// The `window_end` label (RFC 3339) in epoch ms; `None` when unreadable (a routing record).
    fn ends_at_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
        chrono::DateTime::parse_from_rfc3339(record.label("window_end"))
            .ok()
            .map(|end| end.timestamp_millis())
    }

    fn subject(&self, record: &IdempotencyRecord) -> String {
        record.label("container").to_string()
    }

    fn manual_reason_code(&self, reason: ManualReason) -> &'static str {
        manual_reason_code(reason)
    }

    fn manual_reason_text(&self, reason: ManualReason) -> &'static str {
        manual_reason_text(reason)
    }

    fn label_names(&self) -> &[&'static str] {
        &LABELS
    }

    /// The TMS bookings table's deployed names ([`crate::booking::BOOKING_COLUMNS`]).
    fn row_columns(&self) -> RowColumns {
        crate::booking::BOOKING_COLUMNS
    }

    /// `"{equipment number}#{window start}"`, labelled `container` and `window_start`, expiring
    /// the gate's default key TTL after the later of now and the window's end.
    fn natural_key(&self, record: &IdempotencyRecord, now_ms: i64) -> Option<NaturalKey> {
        let container = record.label("container");
        let window_start = record.label("window_start");
        Some(NaturalKey {
            key: format!("{container}#{window_start}"),
            labels: Labels::from([
                ("container".to_string(), container.to_string()),
                ("window_start".to_string(), window_start.to_string()),
            ]),
            expires_at_s: natural_key_expires_at_s(self.ends_at_ms(record), now_ms),
        })
    }

    /// The terminals' lookup by key (below).
    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for TruckSlot {
    async fn lookup(&self, held: &Held<'_>) -> LookupOutcome {
        let record = held.record();
        self.terminal
            .lookup_at(record.label("terminal"), &record.op_key, &record.request)
            .await
    }

    async fn show_lookup(&self, held: &Held<'_>) -> Option<String> {
        let record = held.record();
        self.terminal
            .show_lookup_at(record.label("terminal"), &record.op_key, &record.request)
            .await
    }
}

/// The gate's step 1 for a parsed notification (`gate::consumer::derive_keys` of its
/// [`event`] under [`SLOT_CLAIM`]): the event key, the claim's `Idempotency-Key`, the fingerprint
/// and the claim request.
///
/// # Errors
/// As [`event`]: not for a parsed notification.
pub fn derive_keys(
    notification: &Notification,
) -> Result<gate::consumer::DerivedKeys, serde_json::Error> {
    gate::consumer::derive_keys(&event(notification)?, SLOT_CLAIM)
}
