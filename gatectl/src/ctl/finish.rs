//! `finish` and `cancel`: a stranded `in_flight` record committed or handed to a person by hand,
//! through the gate's fenced writes.

use gate::consumer::RecordOutcome;
use gate::operator::OperatorError;
use serde_json::json;
use truck_slot::terminal::{LookupOutcome, SlotClaim};

use super::{approve, event_key_arg, Confirm, Ctl, Output};
use crate::error::CtlError;
use crate::render::cut;

impl Ctl {
    pub(super) fn refusal(&self, e: OperatorError, action: &str) -> CtlError {
        match e {
            OperatorError::Refused(r) => CtlError::Refused(r.to_string()),
            OperatorError::Store(e) => CtlError::store(e, action, self.table()),
        }
    }

    pub(super) async fn finish(
        &self,
        key: &str,
        slot_id: Option<&str>,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        let r = self.record(&event_key_arg(key)?).await?;
        let now = self.now();
        self.gate
            .operator_check(&r, "finish", now)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        let (slot, source) = match slot_id {
            Some(id) if !slot_id_acceptable(id) => {
                return Err(CtlError::Refused(format!(
                    "--slot-id {:?} is not a slot id: 1 to {} printable ASCII characters, not \
                     blank (as the gate accepts from a terminal); nothing written",
                    cut(id, 40),
                    truck_slot::terminal::MAX_SLOT_ID_CHARS
                )))
            }
            Some(id) => (
                SlotClaim {
                    slot_id: id.to_string(),
                    equipment_number: None,
                },
                "given with --slot-id",
            ),
            None => {
                self.need_terminal("finish --from-terminal")?;
                match self.look_up(&r.event_key).await?.1 {
                    LookupOutcome::Found(slot) => (slot, "found at the terminal"),
                    LookupOutcome::NotFound => {
                        return Err(CtlError::NotFound(format!(
                            "the terminal holds no slot under operation key {}: nothing to \
                             finish; `gatectl reconcile {}` claims with the same key, or \
                             `gatectl cancel` hands it to a person",
                            r.op_key, r.event_key
                        )))
                    }
                    LookupOutcome::Transient(why) => {
                        return Err(CtlError::Failed(format!("terminal lookup: {why}")))
                    }
                }
            }
        };
        gate::operator::operator_check_slot(&r, &slot.slot_id)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        let plan = format!(
            "finish {}: take over the lease of {} (expired), commit slot {} ({source}) and write \
             the TMS booking for {} at {} ({} .. {}); the record leaves the InFlight index",
            r.event_key,
            r.lease_owner.as_deref().unwrap_or("nobody"),
            slot.slot_id,
            r.label("container"),
            r.label("terminal"),
            r.label("window_start"),
            r.label("window_end")
        );
        let plan_json = json!({"action": "finish", "event_key": r.event_key, "slot_id": slot.slot_id,
                               "source": source, "dry_run": dry_run});
        if let Some(dry_run) = approve(&plan, plan_json, dry_run, confirm)? {
            return Ok(dry_run);
        }
        let invocation = self.invocation();
        let outcome = self
            .gate
            .operator_finish(&r, slot.clone(), &invocation)
            .await
            .map_err(|e| self.refusal(e, "dynamodb:UpdateItem"))?;
        let (detail, result) = match &outcome {
            RecordOutcome::Committed {
                slot_id,
                natural_key_collision,
            } => (
                format!(
                    "committed slot {slot_id} ({source}){}",
                    natural_key_collision
                        .as_deref()
                        .map(|k| format!("; natural-key collision with event key {k}"))
                        .unwrap_or_default()
                ),
                Ok(()),
            ),
            other => {
                let d = format!(
                    "finish of slot {} ended as {} {}",
                    slot.slot_id,
                    other.code(),
                    other.detail()
                );
                (d.clone(), Err(d))
            }
        };
        self.audit(&r.pk, "finish", detail.clone()).await?;
        match result {
            Ok(()) => Ok(Output::ok(
                format!("{detail}; lease token {}\n", invocation.request_id),
                json!({"action": "finish", "event_key": r.event_key, "outcome": outcome.code(),
                       "slot_id": slot.slot_id, "owner": invocation.request_id}),
            )),
            Err(d) if matches!(outcome, RecordOutcome::Retry(_)) => Err(CtlError::Failed(d)),
            Err(d) => Err(CtlError::Refused(d)),
        }
    }

    pub(super) async fn cancel(
        &self,
        key: &str,
        reason: &str,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        let r = self.record(&event_key_arg(key)?).await?;
        let now = self.now();
        self.gate
            .operator_check(&r, "cancel", now)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        if !r.slot_ids.is_empty() {
            return Err(CtlError::Refused(
                gate::operator::Refusal::SlotRecorded {
                    slot_ids: r.slot_ids.iter().cloned().collect(),
                }
                .to_string(),
            ));
        }
        let detail = format!("cancelled by {}: {reason}", self.who);
        let plan = format!(
            "cancel {}: take over the lease of {} (expired), mark it failed ({detail}), send its \
             stored claim request to the manual-booking queue (reason cancelled, to book by hand \
             or drop) and take it out of the InFlight index",
            r.event_key,
            r.lease_owner.as_deref().unwrap_or("nobody")
        );
        let plan_json = json!({"action": "cancel", "event_key": r.event_key, "error": detail,
                               "dry_run": dry_run});
        if let Some(dry_run) = approve(&plan, plan_json, dry_run, confirm)? {
            return Ok(dry_run);
        }
        let invocation = self.invocation();
        let outcome = self
            .gate
            .operator_cancel(&r, &detail, &invocation)
            .await
            .map_err(|e| self.refusal(e, "dynamodb:UpdateItem"))?;
        let ok = matches!(outcome, RecordOutcome::Manual(_));
        let audit = if ok {
            format!("marked failed and sent to the manual-booking queue: {reason}")
        } else {
            format!("cancel ended as {} {}", outcome.code(), outcome.detail())
        };
        self.audit(&r.pk, "cancel", audit.clone()).await?;
        if ok {
            Ok(Output::ok(
                format!("{}: {audit}\n", r.event_key),
                json!({"action": "cancel", "event_key": r.event_key, "outcome": outcome.code(),
                       "error": detail, "owner": invocation.request_id}),
            ))
        } else if matches!(outcome, RecordOutcome::Retry(_)) {
            Err(CtlError::Failed(audit))
        } else {
            Err(CtlError::Refused(audit))
        }
    }
}

/// Whether `--slot-id` could be a slot id: the rules the gate applies to a terminal's answer
/// (`truck_slot::terminal`: not blank, at most `MAX_SLOT_ID_CHARS`, printable ASCII or space), so that a
/// pasted line break, an empty argument or a whole paragraph is not committed and booked.
fn slot_id_acceptable(slot_id: &str) -> bool {
    !slot_id.trim().is_empty()
        && slot_id.len() <= truck_slot::terminal::MAX_SLOT_ID_CHARS
        && slot_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}
