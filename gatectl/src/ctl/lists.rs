//! `list in-flight`, `list multi-slot`, `list manual`: the InFlight index, the keys with two or
//! more effect ids, the manual queue's items (left in place).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use gate::manual::ManualItem;
use gate::record::{RecordStatus, INFLIGHT_SHARDS};
use gate::store::dynamo::{MULTI_SLOT_INDEX, MULTI_SLOT_MARK};
use gate::store::{IdempotencyStore, InFlightEntry, InFlightIndex};
use serde_json::{json, Value};

use super::{
    queues::{receive_count, sent_ms},
    Ctl, Output,
};
use crate::error::CtlError;
use crate::render::{cut, human_ms, human_s, progress, table};

impl Ctl {
    pub(super) async fn in_flight_entries(
        &self,
        created_before_ms: i64,
    ) -> Result<Vec<InFlightEntry>, CtlError> {
        let bar = progress(u64::from(INFLIGHT_SHARDS), "InFlight shards", self.progress);
        let mut entries = Vec::new();
        for shard in 0..INFLIGHT_SHARDS {
            let shard = format!("{shard:02}");
            let mut cursor = None;
            loop {
                let page = self
                    .store
                    .index()
                    .stale_in_flight(&shard, created_before_ms, cursor.take(), 100)
                    .await
                    .map_err(|e| {
                        CtlError::store(
                            e,
                            "dynamodb:Query",
                            &format!("{}/index/InFlight", self.table()),
                        )
                    })?;
                entries.extend(page.entries);
                match page.cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        entries.sort_by_key(|e| e.created_at_ms);
        Ok(entries)
    }

    pub(super) async fn list_in_flight(&self, older_than_ms: i64) -> Result<Output, CtlError> {
        let now = self.now();
        let entries = self.in_flight_entries(now - older_than_ms).await?;
        let mut t = table(&["event key", "state", "age", "lease", "expires in"]);
        let mut rows = Vec::new();
        for e in &entries {
            let lease = match (e.lease_owner.as_deref(), e.lease_until_ms) {
                (Some(o), Some(u)) if now <= u => format!("{o}: live {} more", human_ms(u - now)),
                (Some(o), Some(u)) => format!("{o}: expired {} ago", human_ms(now - u)),
                (o, _) => o.unwrap_or("none").to_string(),
            };
            let state = if e.status == RecordStatus::InFlight {
                "in_flight".to_string()
            } else {
                format!("{} (routing pending)", e.status)
            };
            t.add_row(vec![
                cut(&e.event_key, 16),
                state.clone(),
                human_ms(now - e.created_at_ms),
                lease,
                human_s(e.expires_at_s - now / 1000),
            ]);
            rows.push(json!({
                "event_key": e.event_key, "pk": e.pk, "status": e.status.as_str(),
                "age_s": (now - e.created_at_ms) / 1000, "created_at_ms": e.created_at_ms,
                "lease_owner": e.lease_owner, "lease_until_ms": e.lease_until_ms,
                "lease_live": e.lease_is_live(now), "expires_at_s": e.expires_at_s,
            }));
        }
        let text = format!(
            "{t}\n{} record(s) in the InFlight index older than {}\n",
            entries.len(),
            human_ms(older_than_ms)
        );
        Ok(Output::ok(text, Value::Array(rows)))
    }

    pub(super) async fn list_multi_slot(&self) -> Result<Output, CtlError> {
        let index = format!("{}/index/{MULTI_SLOT_INDEX}", self.table());
        let mut pks = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let out = self
                .store
                .client()
                .query()
                .table_name(self.table())
                .index_name(MULTI_SLOT_INDEX)
                .key_condition_expression("multi_slot = :one")
                .expression_attribute_values(":one", AttributeValue::S(MULTI_SLOT_MARK.into()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| {
                    CtlError::from_text(
                        aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string(),
                        "dynamodb:Query",
                        &index,
                    )
                })?;
            pks.extend(
                out.items()
                    .iter()
                    .filter_map(|i| i.get("pk").and_then(|v| v.as_s().ok()).cloned()),
            );
            match out.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        let bar = progress(pks.len() as u64, "multi-slot records", self.progress);
        let mut t = table(&[
            "event key",
            "container",
            "status",
            "committed slot",
            "cancel at the terminal",
        ]);
        let mut rows = Vec::new();
        for pk in &pks {
            let Some(r) = self
                .store
                .get(pk)
                .await
                .map_err(|e| CtlError::store(e, "dynamodb:GetItem", self.table()))?
            else {
                continue;
            };
            bar.inc(1);
            let others: Vec<&String> = r
                .slot_ids
                .iter()
                .filter(|s| Some(s.as_str()) != r.slot_id.as_deref())
                .collect();
            t.add_row(vec![
                cut(&r.event_key, 16),
                r.label("container").to_string(),
                r.status.to_string(),
                r.slot_id.clone().unwrap_or_else(|| "none".into()),
                others
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
            rows.push(json!({
                "event_key": r.event_key, "container": r.label("container"), "status": r.status.as_str(),
                "slot_id": r.slot_id, "slot_ids": r.slot_ids, "cancel": others,
            }));
        }
        bar.finish_and_clear();
        let text = format!(
            "{t}\n{} key(s) with two or more slot ids; the committed slot is the one in the TMS \
             booking, cancel the others at the terminal\n",
            rows.len()
        );
        Ok(Output::ok(text, Value::Array(rows)))
    }
    pub(super) async fn list_manual(&self) -> Result<Output, CtlError> {
        let url = self.targets.manual_queue_url.clone();
        let messages = self.peek(&url, "manual-booking queue", 30).await?;
        self.unhide(&url, &messages).await?;
        let now = self.now();
        let mut t = table(&["message id", "waiting", "reason", "event key", "detail"]);
        let mut rows = Vec::new();
        for m in &messages {
            let item = m.body().and_then(|b| ManualItem::from_json(b.as_bytes()));
            let sent = sent_ms(m);
            let reason = item
                .as_ref()
                .map(|i| i.reason.code())
                .unwrap_or("unreadable");
            let detail = item.as_ref().map(|i| i.detail.clone()).unwrap_or_default();
            let event_key = item.as_ref().and_then(|i| i.event_key.clone());
            t.add_row(vec![
                m.message_id().unwrap_or_default().to_string(),
                sent.map(|s| human_ms(now - s)).unwrap_or_default(),
                reason.to_string(),
                cut(event_key.as_deref().unwrap_or("-"), 16),
                cut(&detail, 80),
            ]);
            // Never the original body: it holds the release PIN.
            rows.push(json!({
                "message_id": m.message_id(), "sent_at_ms": sent,
                "waiting_s": sent.map(|s| (now - s) / 1000), "reason": reason,
                "event_key": event_key, "detail": detail,
                "original_body_bytes": item.as_ref().map(|i| i.original_body.len()),
                "receive_count": receive_count(m),
            }));
        }
        let text = format!(
            "{t}\n{} item(s) in the manual-booking queue (left in place; the original bodies, \
             with their PINs, are not shown)\n",
            rows.len()
        );
        Ok(Output::ok(text, Value::Array(rows)))
    }
}
