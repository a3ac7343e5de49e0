//! The simulator's JSON: the RFC 9457 problem document, the slot and appointment bodies it
//! reads and writes, and the problems every path answers (mismatch, lost answer).

use super::{SimResponse, PROBLEM_IDEMPOTENCY_MISMATCH, PROBLEM_UPSTREAM_RESPONSE_LOST};
use serde::{Deserialize, Serialize};

/// An RFC 9457 problem document, fields in the RFC's order.
#[derive(Serialize)]
pub(super) struct Problem<'a> {
    #[serde(rename = "type")]
    pub(super) problem_type: &'a str,
    pub(super) title: &'a str,
    pub(super) status: u16,
    pub(super) detail: &'a str,
}

/// A slot the simulator issued (every one, with or without a key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IssuedSlot {
    /// The slot id, e.g. `ECTD-000001` (`slot_id` on the wire: the terminal's word).
    #[serde(rename = "slot_id")]
    pub effect_id: String,
    /// The equipment (container) number as sent by the client.
    pub equipment_number: String,
    /// Window start, the RFC 3339 string as sent by the client.
    pub window_start: String,
    /// Window end, the RFC 3339 string as sent by the client.
    pub window_end: String,
    /// The (unquoted) `Idempotency-Key` the slot was claimed under, if any was honoured.
    pub idempotency_key: Option<String>,
    /// When the slot was issued, epoch milliseconds of the simulator's clock.
    pub issued_at_ms: i64,
}

/// The slot object of the `201` body and of the lookup's `{"slot": ...}`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SlotView {
    #[serde(rename = "slot_id")]
    pub(super) effect_id: String,
    pub(super) equipment_number: String,
    pub(super) window_start: String,
    pub(super) window_end: String,
    pub(super) terminal: String,
}

/// The lookup's `{"slot": {...}}`, fields in the same order as the `201` body.
#[derive(Serialize)]
pub(super) struct SlotEnvelope<'a> {
    pub(super) slot: &'a SlotView,
}

/// One entry of the listing `{"slots": [...]}`: the slot object plus key and issue time (epoch ms).
#[derive(Serialize)]
pub(super) struct ListedSlot<'a> {
    #[serde(rename = "slot_id")]
    pub(super) effect_id: &'a str,
    pub(super) equipment_number: &'a str,
    pub(super) window_start: &'a str,
    pub(super) window_end: &'a str,
    pub(super) terminal: &'a str,
    pub(super) idempotency_key: Option<&'a str>,
    pub(super) issued_at_ms: i64,
}

/// The listing `{"slots": [...]}`.
#[derive(Serialize)]
pub(super) struct SlotList<'a> {
    pub(super) slots: Vec<ListedSlot<'a>>,
}

/// The POST body.
#[derive(Debug, Deserialize)]
pub(super) struct SlotRequest {
    pub(super) equipment_number: String,
    pub(super) window_start: String,
    pub(super) window_end: String,
    pub(super) pin: String,
}

/// The `appointments-v2` POST body.
#[derive(Debug, Deserialize)]
pub(super) struct AppointmentRequest {
    pub(super) container: AppointmentContainer,
    pub(super) release: AppointmentRelease,
    pub(super) slot_window: AppointmentWindow,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct AppointmentContainer {
    pub(super) number: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct AppointmentRelease {
    pub(super) pin: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct AppointmentWindow {
    pub(super) from: String,
    pub(super) until: String,
}

/// The `appointments-v2` appointment object of the `201` body and of the lookup.
#[derive(Serialize)]
pub(super) struct AppointmentView {
    pub(super) id: String,
    pub(super) container: AppointmentContainer,
    pub(super) slot_window: AppointmentWindow,
    pub(super) terminal: String,
}

/// `{"appointment": {...}}`.
#[derive(Serialize)]
pub(super) struct AppointmentEnvelope {
    pub(super) appointment: AppointmentView,
}

impl AppointmentEnvelope {
    pub(super) fn of(slot: &SlotView) -> Self {
        Self {
            appointment: AppointmentView {
                id: slot.effect_id.clone(),
                container: AppointmentContainer {
                    number: slot.equipment_number.clone(),
                },
                slot_window: AppointmentWindow {
                    from: slot.window_start.clone(),
                    until: slot.window_end.clone(),
                },
                terminal: slot.terminal.clone(),
            },
        }
    }
}

pub(super) fn mismatch() -> SimResponse {
    SimResponse::problem(
        409,
        PROBLEM_IDEMPOTENCY_MISMATCH,
        "Conflict",
        "this Idempotency-Key was already used with a different request",
    )
}

pub(super) fn lost_response() -> SimResponse {
    SimResponse::problem(
        504,
        PROBLEM_UPSTREAM_RESPONSE_LOST,
        "Gateway Timeout",
        "upstream response lost",
    )
}
