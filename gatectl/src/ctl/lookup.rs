//! `lookup`: the effect the server holds under a record's operation key, read-only.

use gate::effect::LookupOutcome;
use gate::record::RecordStatus;
use serde_json::json;

use super::{event_key_arg, Ctl, Output};
use crate::error::CtlError;

impl Ctl {
    /// The classified lookup, then the server's answer itself, scrubbed, for this server only
    /// (the one place a person reads a server's text: nothing the gate stores or logs quotes it).
    pub(super) async fn lookup(&self, key: &str) -> Result<Output, CtlError> {
        self.need_server("lookup")?;
        let words = self.words();
        let (effect, server) = (words.effect, words.server);
        let (r, found) = self.look_up(&event_key_arg(key)?).await?;
        let live = self
            .gate
            .operator_show_lookup(&r)
            .await
            .map(|view| format!("\n{view}\n"))
            .unwrap_or_default();
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
                // The answered subject is the server's text: shown when it is the record's,
                // otherwise only said to differ (the live answer below shows it scrubbed).
                let mine = words.subject_of(&r);
                let subject_word = words.subject;
                let subject = match slot.subject.as_deref() {
                    Some(e) if e == mine => format!(" (for {mine})"),
                    Some(_) => format!(" (for ANOTHER {subject_word} than {mine})"),
                    None => String::new(),
                };
                let text = format!(
                    "the {server} holds {effect} {} under operation key {}{subject}: \
                     {verdict}\n{live}",
                    slot.effect_id, r.op_key,
                );
                let mut json = json!({"event_key": r.event_key, "op_key": r.op_key,
                                      "found": true, "record_status": r.status.as_str(),
                                      "verdict": verdict});
                if let serde_json::Value::Object(map) = &mut json {
                    let id_key = words.effect_id_key;
                    map.insert(id_key.into(), json!(slot.effect_id));
                    map.insert(format!("record_{id_key}"), json!(r.effect_id));
                    // Whether the server named the record's subject (truck-slot:
                    // `same_container`); the server's own text is not echoed.
                    map.insert(
                        format!("same_{}", words.subject),
                        json!(slot.subject.as_deref().map(|e| e == mine)),
                    );
                }
                Ok(Output::ok(text, json))
            }
            LookupOutcome::NotFound => Err(CtlError::NotFound(format!(
                "the {server} holds no {effect} under operation key {} (record {}){live}",
                r.op_key, r.status
            ))),
            LookupOutcome::Transient(why) => Err(CtlError::Failed(format!(
                "{server} lookup of {}: {why}{live}",
                r.op_key
            ))),
            LookupOutcome::EffectRefused(why) => Err(CtlError::Failed(format!(
                "{server} lookup of {}: {why}; the {effect} exists, its id is not one the gate \
                 keeps: do or cancel it by hand{live}",
                r.op_key
            ))),
        }
    }
}
