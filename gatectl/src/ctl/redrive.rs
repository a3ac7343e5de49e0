//! `list dead-letters` and `redrive`: the dead letters, and which of them may go back to the
//! notification queue before their records expire.

use crate::targets::StoreCall;
use aws_sdk_sqs::types::{Message, QueueAttributeName};
use gate::operator::AuditEntry;
use gate::record::record_pk;
use serde_json::{json, Value};

use super::{
    queues::{receive_count, sent_ms},
    Confirm, Ctl, Output,
};
use crate::error::{exit, CtlError};
use crate::render::{cut, human_ms, progress, table};

impl Ctl {
    /// The oldest a dead letter may be to be redriven, **milliseconds**: the records' lifetime
    /// (`KEY_TTL_SECONDS`) minus the notification queue's retention (`docs/OPERATING.md`, "Alarm:
    /// DeadLetters": a redriven message lives another retention period, and its record must
    /// outlive it).
    pub(super) async fn redrive_limit_ms(&self) -> Result<(i64, i64), CtlError> {
        let url = self.targets.notification_queue_url.clone().ok_or_else(|| {
            CtlError::Config(format!(
                "the {} is unknown: use --stack, or set NOTIFICATION_QUEUE_URL",
                self.words().event_queue
            ))
        })?;
        let retention_s = self
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::MessageRetentionPeriod)
            .send()
            .await
            .map_err(|e| {
                CtlError::from_text(
                    aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                    "sqs:GetQueueAttributes",
                    &url,
                )
            })?
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::MessageRetentionPeriod))
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(345_600);
        Ok((
            (self.targets.gate.key_ttl_s - retention_s) * 1000,
            retention_s,
        ))
    }

    pub(super) fn dead_letter_url(&self) -> Result<String, CtlError> {
        self.targets.dead_letter_queue_url.clone().ok_or_else(|| {
            CtlError::Config(
                "the dead-letter queue is unknown: use --stack, or set DEAD_LETTER_QUEUE_URL"
                    .into(),
            )
        })
    }

    pub(super) async fn list_dead_letters(&self) -> Result<Output, CtlError> {
        let url = self.dead_letter_url()?;
        let limits = self.redrive_limit_ms().await.ok();
        let messages = self.peek(&url, "dead-letter queue", 30).await?;
        self.unhide(&url, &messages).await?;
        let outlived = match limits {
            Some((_, retention_s)) => self.records_expiring_first(&messages, retention_s).await?,
            None => Vec::new(),
        };
        let (t, rows) = self.dead_letter_rows(&messages, limits.map(|(l, _)| l), &outlived);
        let text = format!("{t}\n{} dead letter(s) (left in place)\n", rows.len());
        Ok(Output::ok(text, Value::Array(rows)))
    }

    /// The ids of the `messages` whose record (found by the body's event key) expires before a
    /// redriven copy would: `expires_at` earlier than now plus the notification queue's
    /// retention (`retention_s`, seconds). A message younger than the limit can still be one: a
    /// dead letter redriven once already (SQS gave the copy a new `SentTimestamp`), or a
    /// webhook its sender retried long after the first delivery made the record.
    pub(super) async fn records_expiring_first(
        &self,
        messages: &[Message],
        retention_s: i64,
    ) -> Result<Vec<String>, CtlError> {
        let horizon_ms = self.now().saturating_add(retention_s.saturating_mul(1000));
        let mut ids = Vec::new();
        for m in messages {
            let Some(key) = m.body().and_then(|b| self.view.event_key_of_body(b)) else {
                continue;
            };
            let pk = record_pk(&self.targets.gate.integration, &key);
            let record = self
                .store
                .get(&pk)
                .await
                .map_err(|e| self.store_error(e, StoreCall::Get))?;
            if record.is_some_and(|r| r.expires_at_s.saturating_mul(1000) < horizon_ms) {
                ids.push(m.message_id().unwrap_or_default().to_string());
            }
        }
        Ok(ids)
    }

    pub(super) fn dead_letter_rows(
        &self,
        messages: &[Message],
        limit_ms: Option<i64>,
        outlived: &[String],
    ) -> (comfy_table::Table, Vec<Value>) {
        let now = self.now();
        let mut t = table(&["message id", "age", "receives", "event key", "redrive"]);
        let mut rows = Vec::new();
        for m in messages {
            let sent = sent_ms(m);
            let age = sent.map(|s| now - s);
            let key = m.body().and_then(|b| self.view.event_key_of_body(b));
            let record_first = outlived
                .iter()
                .any(|id| Some(id.as_str()) == m.message_id());
            let redrivable = match (age, limit_ms) {
                (Some(a), Some(l)) => Some(a < l && !record_first),
                _ => None,
            };
            t.add_row(vec![
                m.message_id().unwrap_or_default().to_string(),
                age.map(human_ms).unwrap_or_default(),
                receive_count(m).map(|n| n.to_string()).unwrap_or_default(),
                cut(key.as_deref().unwrap_or("unreadable body"), 16),
                match redrivable {
                    Some(true) => "yes".to_string(),
                    Some(false) if record_first => {
                        "no: its record expires first, do it by hand".to_string()
                    }
                    Some(false) => format!(
                        "no: older than {}, do it by hand",
                        human_ms(limit_ms.unwrap_or_default())
                    ),
                    None => "?".to_string(),
                },
            ]);
            rows.push(json!({
                "message_id": m.message_id(), "sent_at_ms": sent,
                "age_s": age.map(|a| a / 1000), "receive_count": receive_count(m),
                "event_key": key, "redrivable": redrivable,
            }));
        }
        (t, rows)
    }
    pub(super) async fn redrive(
        &self,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        let dlq = self.dead_letter_url()?;
        let (limit_ms, retention_s) = self.redrive_limit_ms().await?;
        let target = self
            .targets
            .notification_queue_url
            .clone()
            .unwrap_or_default();
        // Hidden for the whole redrive (5 minutes), so no message is sent twice by this run.
        let messages = self.peek(&dlq, "dead-letter queue", 300).await?;
        let now = self.now();
        let outlived = self.records_expiring_first(&messages, retention_s).await?;
        let (young, old): (Vec<Message>, Vec<Message>) = messages.into_iter().partition(|m| {
            sent_ms(m).is_some_and(|s| now - s < limit_ms)
                && !outlived
                    .iter()
                    .any(|id| Some(id.as_str()) == m.message_id())
        });
        let (old_table, old_rows) = self.dead_letter_rows(&old, Some(limit_ms), &outlived);
        let refused_text = if old.is_empty() {
            String::new()
        } else {
            format!(
                "refused: {} message(s) older than {} (KEY_TTL_SECONDS {} s minus the \
                 {}'s retention {} s), or whose record expires within that retention: their \
                 records may expire before a redriven copy does; do them by hand from their \
                 bodies, then delete them from the dead-letter queue\n\
                 {old_table}\n",
                old.len(),
                human_ms(limit_ms),
                self.targets.gate.key_ttl_s,
                self.words().event_queue,
                retention_s
            )
        };
        let plan = format!(
            "redrive {} message(s) from {dlq} to {target} (each sent as a new message, then \
             deleted from the dead-letter queue)",
            young.len()
        );
        let code = if old.is_empty() {
            exit::OK
        } else {
            exit::REFUSED
        };
        if dry_run || young.is_empty() || !confirm.confirm(&plan) {
            let all: Vec<Message> = young.iter().chain(old.iter()).cloned().collect();
            self.unhide(&dlq, &all).await?;
            if !dry_run && !young.is_empty() {
                return Err(CtlError::NotConfirmed("nothing moved".into()));
            }
            let young_ids: Vec<&str> = young.iter().filter_map(|m| m.message_id()).collect();
            return Ok(Output {
                text: format!(
                    "{}{plan}\n{refused_text}",
                    if dry_run { "dry run: " } else { "" }
                ),
                json: json!({"action": "redrive", "dry_run": dry_run, "redriven": [],
                             "would_redrive": young_ids, "refused": old_rows,
                             "limit_s": limit_ms / 1000}),
                code,
            });
        }
        // The old ones go back at once; they stay in the dead-letter queue.
        self.unhide(&dlq, &old).await?;
        let bar = progress(young.len() as u64, "redriving", self.progress);
        let mut moved = Vec::new();
        for m in &young {
            let body = m.body().unwrap_or_default();
            self.sqs
                .send_message()
                .queue_url(&target)
                .message_body(body)
                .set_message_attributes(m.message_attributes().cloned())
                .send()
                .await
                .map_err(|e| {
                    CtlError::from_text(
                        aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                        "sqs:SendMessage",
                        &target,
                    )
                })?;
            if let Some(handle) = m.receipt_handle() {
                self.sqs
                    .delete_message()
                    .queue_url(&dlq)
                    .receipt_handle(handle)
                    .send()
                    .await
                    .map_err(|e| {
                        CtlError::from_text(
                            aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                            "sqs:DeleteMessage",
                            &dlq,
                        )
                    })?;
            }
            if let Some(key) = self.view.event_key_of_body(body) {
                let pk = record_pk(&self.targets.gate.integration, &key);
                // A record exists only if the gate got that far; no record, no history.
                match self
                    .store
                    .append_history(
                        &pk,
                        &AuditEntry {
                            at_ms: self.now(),
                            who: self.who.clone(),
                            action: "redrive".into(),
                            detail: format!(
                                "dead letter {} sent back to the {}",
                                m.message_id().unwrap_or_default(),
                                self.words().event_queue
                            ),
                        },
                    )
                    .await
                {
                    Ok(()) | Err(gate::store::StoreError::Corrupt(_)) => {}
                    Err(e) => return Err(self.store_error(e, StoreCall::AppendHistory)),
                }
            }
            moved.push(m.message_id().unwrap_or_default().to_string());
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(Output {
            text: format!("redriven: {} message(s)\n{refused_text}", moved.len()),
            json: json!({"action": "redrive", "dry_run": false, "redriven": moved,
                         "refused": old_rows, "limit_s": limit_ms / 1000}),
            code,
        })
    }
}
