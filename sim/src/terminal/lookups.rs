//! `GET /slots` and the lookup by key: the stored slot under a key within retention, or every
//! slot issued.

use super::keys::{normalize_key, parse_query};
use super::wire::{AppointmentEnvelope, ListedSlot, SlotEnvelope, SlotList};
use super::{Entry, SimResponse, TerminalApi, TerminalCore, PROBLEM_NOT_FOUND};

impl TerminalCore {
    pub(super) fn handle_get_slots(&self, query: Option<&str>) -> SimResponse {
        let key = query.and_then(|q| {
            parse_query(q)
                .into_iter()
                .find(|(k, _)| k == "idempotency_key")
                .map(|(_, v)| v)
        });
        let Some(raw_key) = key else {
            let st = self.lock();
            let slots: Vec<ListedSlot<'_>> = st
                .slots
                .iter()
                .map(|s| ListedSlot {
                    effect_id: &s.effect_id,
                    equipment_number: &s.equipment_number,
                    window_start: &s.window_start,
                    window_end: &s.window_end,
                    terminal: &self.config.terminal_name,
                    idempotency_key: s.idempotency_key.as_deref(),
                    issued_at_ms: s.issued_at_ms,
                })
                .collect();
            return SimResponse::json(200, &SlotList { slots });
        };
        self.lookup(&raw_key)
    }

    /// The lookup by key: `200` with the slot stored under `raw_key` (in the terminal's shape)
    /// while within retention, else `404` problem (always, without key support).
    pub(super) fn lookup(&self, raw_key: &str) -> SimResponse {
        let not_found = || {
            SimResponse::problem(
                404,
                PROBLEM_NOT_FOUND,
                "Not Found",
                "no slot is stored under this idempotency key",
            )
        };
        if !self.config.supports_idempotency_key {
            return not_found();
        }
        let key = normalize_key(raw_key);
        let now = self.clock.now_ms();
        let st = self.lock();
        match st.records.get(&key) {
            Some(Entry::Done {
                slot: Some(slot),
                stored_at_ms,
                ..
            }) if !self.is_expired(*stored_at_ms, now) => match self.config.api {
                TerminalApi::Slots => SimResponse::json(200, &SlotEnvelope { slot }),
                TerminalApi::AppointmentsV2 => {
                    SimResponse::json(200, &AppointmentEnvelope::of(slot))
                }
            },
            _ => not_found(),
        }
    }
}
