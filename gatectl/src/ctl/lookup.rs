//! `lookup`: the effect the server holds under a record's operation key, read-only.

use gate::effect::LookupOutcome;
use gate::record::RecordStatus;
use serde_json::json;

use super::{event_key_arg, Ctl, Output};
use crate::error::CtlError;

impl Ctl {
    pub(super) async fn lookup(&self, key: &str) -> Result<Output, CtlError> {
        self.need_server("lookup")?;
        let words = self.words();
        let (effect, server) = (words.effect, words.server);
        let (r, found) = self.look_up(&event_key_arg(key)?).await?;
        match found {
            LookupOutcome::Found(slot) => {
                let verdict = match (r.status, r.effect_id.as_deref()) {
                    (RecordStatus::Committed, Some(s)) if s == slot.effect_id => {
                        format!("the committed {effect}")
                    }
                    (RecordStatus::Committed, committed) => format!(
                        "NOT the committed {effect} ({}): cancel it at the {server}",
                        committed.unwrap_or("none")
                    ),
                    (RecordStatus::InFlight, _) => format!(
                        "not committed yet: `gatectl finish {} --{}` commits it",
                        r.event_key, words.from_server_flag
                    ),
                    (status, _) => format!(
                        "the record is {status}: nothing records this {effect}; do it by hand \
                         from the {}, or cancel it at the {server}",
                        words.manual_queue
                    ),
                };
                let text = format!(
                    "the {server} holds {effect} {} under operation key {}{}: {verdict}\n",
                    slot.effect_id,
                    r.op_key,
                    slot.subject
                        .as_deref()
                        .map(|e| format!(" (for {e})"))
                        .unwrap_or_default()
                );
                let mut json = json!({"event_key": r.event_key, "op_key": r.op_key,
                                      "found": true, "record_status": r.status.as_str(),
                                      "verdict": verdict});
                if let serde_json::Value::Object(map) = &mut json {
                    let id_key = words.effect_id_key;
                    map.insert(id_key.into(), json!(slot.effect_id));
                    map.insert(format!("record_{id_key}"), json!(r.effect_id));
                    // The subject the server named (truck-slot: `equipment_number`, as before).
                    let subject_key = if words.subject == "container" {
                        "equipment_number"
                    } else {
                        words.subject
                    };
                    map.insert(subject_key.into(), json!(slot.subject));
                }
                Ok(Output::ok(text, json))
            }
            LookupOutcome::NotFound => Err(CtlError::NotFound(format!(
                "the {server} holds no {effect} under operation key {} (record {})",
                r.op_key, r.status
            ))),
            LookupOutcome::Transient(why) => Err(CtlError::Failed(format!(
                "{server} lookup of {}: {why}",
                r.op_key
            ))),
        }
    }
}
