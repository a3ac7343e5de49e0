//! `list in-flight`, `list multi-effect`, `list manual`: the InFlight index, the keys with two or
//! more effect ids, the manual queue's items (left in place).

use gate::manual::ManualItem;
use gate::record::{RecordStatus, INFLIGHT_SHARDS};
use gate::store::InFlightEntry;
use serde_json::{json, Value};

use super::{
    queues::{receive_count, sent_ms},
    Ctl, Output,
};
use crate::error::CtlError;
use crate::render::{cut, human_ms, human_s, progress, table};
use crate::targets::StoreCall;

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
                    .stale_in_flight(&shard, created_before_ms, cursor.take(), 100)
                    .await
                    .map_err(|e| self.store_error(e, StoreCall::InFlight))?;
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

    pub(super) async fn list_multi_effect(&self) -> Result<Output, CtlError> {
        let pks = self
            .store
            .multi_effect_pks()
            .await
            .map_err(|e| self.store_error(e, StoreCall::MultiEffect))?;
        let words = self.words();
        let bar = progress(
            pks.len() as u64,
            &format!("{} records", words.multi_list),
            self.progress,
        );
        let committed = format!("committed {}", words.effect);
        let cancel = format!("cancel at the {}", words.server);
        let mut t = table(&["event key", words.subject, "status", &committed, &cancel]);
        let mut rows = Vec::new();
        for pk in &pks {
            let Some(r) = self
                .store
                .get(pk)
                .await
                .map_err(|e| self.store_error(e, StoreCall::Get))?
            else {
                continue;
            };
            bar.inc(1);
            let others: Vec<&String> = r
                .effect_ids
                .iter()
                .filter(|s| Some(s.as_str()) != r.effect_id.as_deref())
                .collect();
            t.add_row(vec![
                cut(&r.event_key, 16),
                words.subject_of(&r).to_string(),
                r.status.to_string(),
                r.effect_id.clone().unwrap_or_else(|| "none".into()),
                others
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
            let mut row = serde_json::Map::new();
            row.insert("event_key".into(), json!(r.event_key));
            row.insert(words.subject.into(), json!(words.subject_of(&r)));
            row.insert("status".into(), json!(r.status.as_str()));
            row.insert(words.effect_id_key.into(), json!(r.effect_id));
            row.insert(words.effect_ids_key(), json!(r.effect_ids));
            row.insert("cancel".into(), json!(others));
            rows.push(Value::Object(row));
        }
        bar.finish_and_clear();
        let text = format!(
            "{t}\n{} key(s) with two or more {effect} ids; the committed {effect} is the one in the \
             {row}, cancel the others at the {server}\n",
            rows.len(),
            effect = words.effect,
            row = words.business_row,
            server = words.server,
        );
        Ok(Output::ok(text, Value::Array(rows)))
    }
    pub(super) async fn list_manual(&self) -> Result<Output, CtlError> {
        let url = self.targets.manual_queue_url.clone();
        let words = self.words();
        let messages = self.peek(&url, words.manual_queue, 30).await?;
        self.unhide(&url, &messages).await?;
        let now = self.now();
        let mut t = table(&["message id", "waiting", "reason", "event key", "detail"]);
        let mut rows = Vec::new();
        // The integration's own reason codes (its manual items are written with them).
        let integration = self.gate.integration.clone();
        for m in &messages {
            let item = m.body().and_then(|b| {
                ManualItem::from_json_with(b.as_bytes(), |r| integration.manual_reason_code(r))
            });
            let sent = sent_ms(m);
            let reason = item
                .as_ref()
                .map(|i| integration.manual_reason_code(i.reason))
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
            // Never the original body: it holds the request's secrets.
            rows.push(json!({
                "message_id": m.message_id(), "sent_at_ms": sent,
                "waiting_s": sent.map(|s| (now - s) / 1000), "reason": reason,
                "event_key": event_key, "detail": detail,
                "original_body_bytes": item.as_ref().map(|i| i.original_body.len()),
                "receive_count": receive_count(m),
            }));
        }
        let text = format!(
            "{t}\n{} item(s) in the {} (left in place; the original bodies, with {}, are not \
             shown)\n",
            rows.len(),
            words.manual_queue,
            words.request_secret,
        );
        Ok(Output::ok(text, Value::Array(rows)))
    }
}
