//! `finish` and `cancel`: a stranded `in_flight` record committed or handed to a person by hand,
//! through the gate's fenced writes.

use gate::consumer::RecordOutcome;
use gate::effect::{Effect, LookupOutcome};
use gate::operator::OperatorError;
use serde_json::json;

use super::{approve, event_key_arg, Confirm, Ctl, Output};
use crate::error::CtlError;
use crate::render::cut;
use crate::targets::StoreCall;

impl Ctl {
    pub(super) fn refusal(&self, e: OperatorError, call: StoreCall) -> CtlError {
        match e {
            OperatorError::Refused(r) => CtlError::Refused(r.to_string()),
            OperatorError::Store(e) => self.store_error(e, call),
        }
    }

    pub(super) async fn finish(
        &self,
        key: &str,
        effect_id: Option<&str>,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        let r = self.record(&event_key_arg(key)?).await?;
        let now = self.now();
        gate::operator::operator_check(&r, "finish", now)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        let words = self.words();
        let (effect, server) = (words.effect, words.server);
        let given = format!("given with --{}", words.effect_id_flag);
        let found = format!("found at the {server}");
        let (slot, source) = match effect_id {
            Some(id) if !self.view.effect_id_acceptable(id) => {
                return Err(CtlError::Refused(format!(
                    "--{} {:?} is not {} {effect} id: 1 to {} printable ASCII characters, not \
                     blank (as the gate accepts from {} {server}); nothing written",
                    words.effect_id_flag,
                    cut(id, 40),
                    article(effect),
                    gate::idempotency_key::MAX_EFFECT_ID_CHARS,
                    article(server),
                )))
            }
            Some(id) => (
                Effect {
                    effect_id: id.to_string(),
                    subject: None,
                },
                given.as_str(),
            ),
            None => {
                self.need_server(&format!("finish --{}", words.from_server_flag))?;
                match self.look_up(&r.event_key).await?.1 {
                    LookupOutcome::Found(slot) => (slot, found.as_str()),
                    LookupOutcome::NotFound => {
                        return Err(CtlError::NotFound(format!(
                            "the {server} holds no {effect} under operation key {}: nothing to \
                             finish; `gatectl reconcile {}` calls with the same key, or \
                             `gatectl cancel` hands it to a person",
                            r.op_key, r.event_key
                        )))
                    }
                    LookupOutcome::Transient(why) | LookupOutcome::EffectRefused(why) => {
                        return Err(CtlError::Failed(format!("{server} lookup: {why}")))
                    }
                }
            }
        };
        gate::operator::operator_check_effect(&r, &slot.effect_id)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        let plan = format!(
            "finish {}: take over the lease of {} (expired), commit {effect} {} ({source}) and \
             write the {} for {}; the record leaves the InFlight index",
            r.event_key,
            r.lease_owner.as_deref().unwrap_or("nobody"),
            slot.effect_id,
            words.business_row,
            self.view.event_words(&r),
        );
        let mut plan_json = json!({"action": "finish", "event_key": r.event_key, "source": source, "dry_run": dry_run});
        plan_json[words.effect_id_key] = json!(slot.effect_id);
        if let Some(dry_run) = approve(&plan, plan_json, dry_run, confirm)? {
            return Ok(dry_run);
        }
        let invocation = self.invocation();
        let outcome = self
            .gate
            .operator_finish(&r, slot.clone(), &invocation)
            .await
            .map_err(|e| self.refusal(e, StoreCall::Write))?;
        let (detail, result) = match &outcome {
            RecordOutcome::Committed { effect_id } => {
                (format!("committed {effect} {effect_id} ({source})"), Ok(()))
            }
            other => {
                let d = format!(
                    "finish of {effect} {} ended as {} {}",
                    slot.effect_id,
                    other.code(),
                    other.detail()
                );
                (d.clone(), Err(d))
            }
        };
        self.audit(&r.pk, "finish", detail.clone()).await?;
        match result {
            Ok(()) => {
                let mut json = json!({"action": "finish", "event_key": r.event_key,
                                      "outcome": outcome.code(), "owner": invocation.request_id});
                json[words.effect_id_key] = json!(slot.effect_id);
                Ok(Output::ok(
                    format!("{detail}; lease token {}\n", invocation.request_id),
                    json,
                ))
            }
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
        gate::operator::operator_check(&r, "cancel", now)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        if !r.effect_ids.is_empty() {
            return Err(CtlError::Refused(
                gate::operator::Refusal::EffectRecorded {
                    effect_ids: r.effect_ids.iter().cloned().collect(),
                }
                .to_string(),
            ));
        }
        let words = self.words();
        let detail = format!("cancelled by {}: {reason}", self.who);
        let plan = format!(
            "cancel {}: take over the lease of {} (expired), mark it failed ({detail}), send its \
             stored {} to the {} (reason cancelled, to do by hand or drop) and take it out of \
             the InFlight index",
            r.event_key,
            r.lease_owner.as_deref().unwrap_or("nobody"),
            words.request,
            words.manual_queue,
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
            .map_err(|e| self.refusal(e, StoreCall::Write))?;
        let ok = matches!(outcome, RecordOutcome::Manual(_));
        let audit = if ok {
            format!(
                "marked failed and sent to the {}: {reason}",
                words.manual_queue
            )
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

/// `"a"` or `"an"` before `word` (by its first letter: "an effect", "a slot").
fn article(word: &str) -> &'static str {
    match word.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}
