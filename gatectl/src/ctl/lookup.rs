//! `lookup`: the effect the server holds under a record's operation key, read-only.

use gate::record::RecordStatus;
use serde_json::json;
use truck_slot::terminal::LookupOutcome;

use super::{event_key_arg, Ctl, Output};
use crate::error::CtlError;

impl Ctl {
    pub(super) async fn lookup(&self, key: &str) -> Result<Output, CtlError> {
        self.need_terminal("lookup")?;
        let (r, found) = self.look_up(&event_key_arg(key)?).await?;
        match found {
            LookupOutcome::Found(slot) => {
                let verdict = match (r.status, r.slot_id.as_deref()) {
                    (RecordStatus::Committed, Some(s)) if s == slot.slot_id => {
                        "the committed slot".to_string()
                    }
                    (RecordStatus::Committed, committed) => format!(
                        "NOT the committed slot ({}): cancel it at the terminal",
                        committed.unwrap_or("none")
                    ),
                    (RecordStatus::InFlight, _) => format!(
                        "not committed yet: `gatectl finish {} --from-terminal` commits it",
                        r.event_key
                    ),
                    (status, _) => format!(
                        "the record is {status}: nothing books this slot; book it by hand from \
                         the manual-booking queue, or cancel it at the terminal"
                    ),
                };
                let text = format!(
                    "the terminal holds slot {} under operation key {}{}: {verdict}\n",
                    slot.slot_id,
                    r.op_key,
                    slot.equipment_number
                        .as_deref()
                        .map(|e| format!(" (for {e})"))
                        .unwrap_or_default()
                );
                Ok(Output::ok(
                    text,
                    json!({"event_key": r.event_key, "op_key": r.op_key, "found": true,
                           "slot_id": slot.slot_id, "equipment_number": slot.equipment_number,
                           "record_status": r.status.as_str(), "record_slot_id": r.slot_id,
                           "verdict": verdict}),
                ))
            }
            LookupOutcome::NotFound => Err(CtlError::NotFound(format!(
                "the terminal holds no slot under operation key {} (record {})",
                r.op_key, r.status
            ))),
            LookupOutcome::Transient(why) => Err(CtlError::Failed(format!(
                "terminal lookup of {}: {why}",
                r.op_key
            ))),
        }
    }
}
