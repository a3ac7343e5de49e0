//! `lookup`: the effect the server holds under a record's operation key, read-only.

use gate::effect::LookupOutcome;
use gate::record::{IdempotencyRecord, RecordStatus};
use serde_json::json;

use super::{event_key_arg, Ctl, Output};
use crate::error::CtlError;
use crate::words::Words;

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
                let verdict = verdict(words, &r, &slot.effect_id);
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

/// What the effect `found` the server holds under `r`'s operation key is to the record, in
/// `words`: the committed one, another (cancel it), one to commit, or one nothing records.
fn verdict(words: &Words, r: &IdempotencyRecord, found: &str) -> String {
    let (effect, server) = (words.effect, words.server);
    match (r.status, r.effect_id.as_deref()) {
        (RecordStatus::Committed, Some(s)) if s == found => format!("the committed {effect}"),
        // Committed by an older version or edited by hand, its id lost: the server's effect under
        // the record's own key is the one it committed, not a second one to cancel.
        (RecordStatus::Committed, None) => format!(
            "the record is committed without its {effect} id: this is most likely the {effect} \
             it committed; write its id onto the record, do not cancel it"
        ),
        (RecordStatus::Committed, Some(committed)) => {
            format!("NOT the committed {effect} ({committed}): cancel it at the {server}")
        }
        (RecordStatus::InFlight, _) => format!(
            "not committed yet: `gatectl finish {} --{}` commits it",
            r.event_key, words.from_server_flag
        ),
        (status, _) => format!(
            "the record is {status}: nothing records this {effect}; do it by hand from the {}, \
             or cancel it at the {server}",
            words.manual_queue
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: RecordStatus, effect_id: Option<&str>) -> IdempotencyRecord {
        IdempotencyRecord {
            pk: "x#ab".into(),
            event_key: "ab".into(),
            status,
            fingerprint: String::new(),
            request: Vec::new(),
            op_key: "op".into(),
            lease_owner: None,
            lease_until_ms: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            expires_at_s: 0,
            effect_id: effect_id.map(str::to_string),
            effect_ids: Default::default(),
            inflight_shard: None,
            error: None,
            route_pending: false,
            labels: Default::default(),
        }
    }

    #[test]
    fn a_committed_record_without_its_id_is_not_told_to_cancel_the_servers_effect() {
        let w = &Words::NEUTRAL;
        let lost = verdict(w, &record(RecordStatus::Committed, None), "fx_1");
        assert_eq!(
            lost,
            "the record is committed without its effect id: this is most likely the effect it \
             committed; write its id onto the record, do not cancel it"
        );
        assert_eq!(
            verdict(w, &record(RecordStatus::Committed, Some("fx_2")), "fx_1"),
            "NOT the committed effect (fx_2): cancel it at the server"
        );
        assert_eq!(
            verdict(w, &record(RecordStatus::Committed, Some("fx_1")), "fx_1"),
            "the committed effect"
        );
    }
}
