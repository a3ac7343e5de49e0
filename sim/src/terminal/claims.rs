//! `POST /slots` under an `Idempotency-Key`: the key's decision (new, replay, in flight,
//! mismatch), the claim made once, its stored answer, the drawn failures and losses.

use std::sync::Arc;
use std::time::Duration;

use super::keys::{fingerprint, normalize_key};
use super::wire::{
    lost_response, mismatch, AppointmentEnvelope, AppointmentRequest, IssuedSlot, SlotRequest,
    SlotView,
};
use super::{
    Decision, Entry, Fingerprint, Inner, SimResponse, TerminalApi, TerminalCore,
    PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT, PROBLEM_INVALID_REQUEST, PROBLEM_SERVICE_UNAVAILABLE,
};
use rand::Rng;
use tokio::sync::Notify;

impl TerminalCore {
    /// Whether this POST fails before taking the key (forced first, then `error_rate`).
    pub(super) fn draw_failure(&self, st: &mut Inner) -> bool {
        if st.forced_failures > 0 {
            st.forced_failures -= 1;
            return true;
        }
        self.config.error_rate > 0.0 && st.rng.random::<f64>() < self.config.error_rate
    }

    /// Whether the response of a POST that ran is lost (forced first, then `lose_response_rate`).
    pub(super) fn draw_loss(&self, st: &mut Inner) -> bool {
        if st.forced_losses > 0 {
            st.forced_losses -= 1;
            return true;
        }
        self.config.lose_response_rate > 0.0
            && st.rng.random::<f64>() < self.config.lose_response_rate
    }

    pub(super) async fn sleep_latency(&self) {
        if self.config.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.config.latency_ms)).await;
        }
    }

    pub(super) async fn handle_post(
        &self,
        path: &str,
        idempotency_key: Option<&str>,
        body: &[u8],
    ) -> SimResponse {
        let failed = {
            let mut st = self.lock();
            self.draw_failure(&mut st)
        };
        if failed {
            return SimResponse::problem(
                503,
                PROBLEM_SERVICE_UNAVAILABLE,
                "Service Unavailable",
                "the terminal failed before processing the request; it was not recorded",
            );
        }
        let key = match idempotency_key {
            Some(raw) if self.config.supports_idempotency_key => {
                let key = normalize_key(raw);
                if key.is_empty() {
                    return SimResponse::problem(
                        400,
                        PROBLEM_INVALID_REQUEST,
                        "Bad Request",
                        "the Idempotency-Key header is empty",
                    );
                }
                key
            }
            _ => return self.run_unkeyed(body).await,
        };
        let fingerprint = fingerprint(&key, "POST", path, body);
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.in_flight_wait_ms);
        loop {
            let decision = {
                let mut st = self.lock();
                self.decide(&mut st, &key, &fingerprint)
            };
            match decision {
                Decision::Replay(response) => return response,
                Decision::Mismatch => return mismatch(),
                Decision::Claimed { notify, token } => {
                    return self
                        .run_claimed(&key, fingerprint, token, notify, body)
                        .await;
                }
                Decision::Wait { notify, token } => {
                    // A `Notified` receives `notify_waiters` calls from its creation on; re-check
                    // after creating it so a completion in between is not missed.
                    let notified = notify.notified();
                    let still_in_flight = matches!(
                        self.lock().records.get(&key),
                        Some(Entry::InFlight { token: t, .. }) if *t == token
                    );
                    if !still_in_flight {
                        continue;
                    }
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return SimResponse::problem(
                            409,
                            PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT,
                            "Conflict",
                            "a request with this Idempotency-Key is still being processed; \
                             retry later",
                        );
                    }
                }
            }
        }
    }

    pub(super) fn decide(&self, st: &mut Inner, key: &str, fp: &Fingerprint) -> Decision {
        let now = self.clock.now_ms();
        match st.records.get(key) {
            Some(Entry::Done {
                fingerprint,
                response,
                stored_at_ms,
                ..
            }) if !self.is_expired(*stored_at_ms, now) => {
                if fingerprint == fp {
                    Decision::Replay(response.clone())
                } else {
                    Decision::Mismatch
                }
            }
            Some(Entry::InFlight {
                fingerprint,
                notify,
                token,
            }) => {
                if fingerprint == fp {
                    Decision::Wait {
                        notify: Arc::clone(notify),
                        token: *token,
                    }
                } else {
                    Decision::Mismatch
                }
            }
            // No record, or an expired one: the key is new.
            _ => {
                let token = st.next_token;
                st.next_token = st.next_token.wrapping_add(1);
                let notify = Arc::new(Notify::new());
                st.records.insert(
                    key.to_string(),
                    Entry::InFlight {
                        fingerprint: *fp,
                        notify: Arc::clone(&notify),
                        token,
                    },
                );
                Decision::Claimed { notify, token }
            }
        }
    }

    pub(super) async fn run_claimed(
        &self,
        key: &str,
        fingerprint: Fingerprint,
        token: u64,
        notify: Arc<Notify>,
        body: &[u8],
    ) -> SimResponse {
        let mut guard = ClaimGuard {
            core: self,
            key,
            token,
            notify: Arc::clone(&notify),
            armed: true,
        };
        self.sleep_latency().await;
        let (response, lost) = {
            let mut st = self.lock();
            let (response, slot) = self.execute(&mut st, body, Some(key));
            st.records.insert(
                key.to_string(),
                Entry::Done {
                    fingerprint,
                    response: response.clone(),
                    stored_at_ms: self.clock.now_ms(),
                    slot,
                },
            );
            let lost = self.draw_loss(&mut st);
            (response, lost)
        };
        guard.armed = false;
        drop(guard);
        notify.notify_waiters();
        if lost {
            lost_response()
        } else {
            response
        }
    }

    pub(super) async fn run_unkeyed(&self, body: &[u8]) -> SimResponse {
        self.sleep_latency().await;
        let mut st = self.lock();
        let (response, _) = self.execute(&mut st, body, None);
        if self.draw_loss(&mut st) {
            lost_response()
        } else {
            response
        }
    }

    /// Validates the body and issues a slot. Returns the response and, on success, the slot.
    pub(super) fn execute(
        &self,
        st: &mut Inner,
        body: &[u8],
        key: Option<&str>,
    ) -> (SimResponse, Option<SlotView>) {
        let bad = |detail: &str| {
            (
                SimResponse::problem(400, PROBLEM_INVALID_REQUEST, "Bad Request", detail),
                None,
            )
        };
        let parsed = match self.config.api {
            TerminalApi::Slots => serde_json::from_slice::<SlotRequest>(body),
            TerminalApi::AppointmentsV2 => {
                serde_json::from_slice::<AppointmentRequest>(body).map(|a| SlotRequest {
                    equipment_number: a.container.number,
                    window_start: a.slot_window.from,
                    window_end: a.slot_window.until,
                    pin: a.release.pin,
                })
            }
        };
        let req: SlotRequest = match parsed {
            Ok(req) => req,
            Err(e) => return bad(&format!("invalid slot request body: {e}")),
        };
        if req.equipment_number.trim().is_empty() {
            return bad("equipment_number must not be empty");
        }
        if req.pin.is_empty() {
            return bad("pin must not be empty");
        }
        if chrono::DateTime::parse_from_rfc3339(&req.window_start).is_err() {
            return bad("window_start is not an RFC 3339 date-time");
        }
        if chrono::DateTime::parse_from_rfc3339(&req.window_end).is_err() {
            return bad("window_end is not an RFC 3339 date-time");
        }
        let effect_id = format!("{}-{:06}", self.config.slot_prefix, st.slots.len() + 1);
        st.slots.push(IssuedSlot {
            effect_id: effect_id.clone(),
            equipment_number: req.equipment_number.clone(),
            window_start: req.window_start.clone(),
            window_end: req.window_end.clone(),
            idempotency_key: key.map(str::to_string),
            issued_at_ms: self.clock.now_ms(),
        });
        tracing::debug!(%effect_id, "slot issued");
        let view = SlotView {
            effect_id,
            equipment_number: req.equipment_number,
            window_start: req.window_start,
            window_end: req.window_end,
            terminal: self.config.terminal_name.clone(),
        };
        let response = match self.config.api {
            TerminalApi::Slots => SimResponse::json(201, &view),
            TerminalApi::AppointmentsV2 => SimResponse::json(201, &AppointmentEnvelope::of(&view)),
        };
        (response, Some(view))
    }
}

/// Removes an in-flight record and wakes its waiters if the claiming request is dropped
/// (cancelled) before it stored its response, so the key does not stay stuck in flight.
pub(super) struct ClaimGuard<'a> {
    core: &'a TerminalCore,
    key: &'a str,
    token: u64,
    notify: Arc<Notify>,
    armed: bool,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.core.lock();
        if matches!(st.records.get(self.key), Some(Entry::InFlight { token, .. }) if *token == self.token)
        {
            st.records.remove(self.key);
        }
        drop(st);
        self.notify.notify_waiters();
    }
}
