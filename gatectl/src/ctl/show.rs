//! `show`: a record (or the records a query finds) for a person and as JSON.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use gate::operator::{rfc3339_ms, AuditLog};
use gate::record::IdempotencyRecord;
use gate::store::dynamo::record_from_item;
use gate::store::IdempotencyStore;
use serde_json::{json, Value};
use truck_slot::keys::event_key_of;

use super::{Ctl, Output, Query};
use crate::error::CtlError;
use crate::render::{human_ms, human_s, progress};

impl Ctl {
    pub(super) async fn scan(
        &self,
        keep: impl Fn(&IdempotencyRecord) -> bool,
        filter: Option<(&str, &str)>,
    ) -> Result<Vec<IdempotencyRecord>, CtlError> {
        let bar = progress(0, "scanning the idempotency table", self.progress);
        let mut found = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let mut req = self
                .store
                .client()
                .scan()
                .table_name(self.table())
                .consistent_read(true)
                .set_exclusive_start_key(start.take());
            if let Some((attr, value)) = filter {
                req = req
                    .filter_expression("#a = :v")
                    .expression_attribute_names("#a", attr)
                    .expression_attribute_values(":v", AttributeValue::S(value.to_string()));
            }
            let out = req.send().await.map_err(|e| {
                CtlError::from_text(
                    aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string(),
                    "dynamodb:Scan",
                    self.table(),
                )
            })?;
            bar.inc(u64::try_from(out.scanned_count()).unwrap_or(0));
            // Natural-key items and anything else that is not a record are skipped.
            found.extend(
                out.items()
                    .iter()
                    .filter_map(|i| record_from_item(i).ok())
                    .filter(|r| keep(r)),
            );
            match out.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        bar.finish_and_clear();
        Ok(found)
    }

    pub(super) async fn show(&self, query: &Query) -> Result<Output, CtlError> {
        let records = match query {
            Query::EventKey(k) => vec![self.record(k).await?],
            Query::Container(c) => self.scan(|_| true, Some(("container", c))).await?,
            Query::NotificationId(id) => {
                self.scan(
                    |r| event_key_of(id, r.label("container")) == r.event_key,
                    None,
                )
                .await?
            }
        };
        if records.is_empty() {
            return Err(CtlError::NotFound(format!("no record for {query:?}")));
        }
        let mut texts = Vec::new();
        let mut jsons = Vec::new();
        for r in &records {
            let (text, json) = self.describe(r).await?;
            texts.push(text);
            jsons.push(json);
        }
        Ok(Output::ok(texts.join("\n"), Value::Array(jsons)))
    }

    /// One record for a person and as JSON: status, ages in human units, lease, operation key,
    /// slot ids, the TMS booking, the history and what the gate does next; never the stored
    /// request (it holds the release PIN).
    pub(super) async fn describe(
        &self,
        r: &IdempotencyRecord,
    ) -> Result<(String, Value), CtlError> {
        let now = self.now();
        let booking =
            self.store.booking(&r.event_key).await.map_err(|e| {
                CtlError::store(e, "dynamodb:GetItem", &self.targets.bookings_table)
            })?;
        let history = self
            .store
            .history(&r.pk)
            .await
            .map_err(|e| CtlError::store(e, "dynamodb:GetItem", self.table()))?;
        let next = self.gate.next_step(r, &self.targets.reconciler, now);
        let lease = match (r.lease_owner.as_deref(), r.lease_until_ms) {
            (Some(owner), Some(until)) if r.has_work() && now <= until => {
                format!(
                    "{owner}, live until {} ({} left)",
                    rfc3339_ms(until),
                    human_ms(until - now)
                )
            }
            (Some(owner), Some(until)) if r.has_work() => format!(
                "{owner}, expired {} ago{}",
                human_ms(now - until),
                if until == 0 { " (released)" } else { "" }
            ),
            (Some(owner), _) => format!("{owner} (last holder)"),
            (None, _) => "none".to_string(),
        };
        let slot_ids: Vec<&String> = r.slot_ids.iter().collect();
        let mut lines = vec![
            format!("event key     {}", r.event_key),
            format!(
                "status        {}{}",
                r.status,
                if r.route_pending {
                    " (routing to a person pending)"
                } else {
                    ""
                }
            ),
        ];
        if let Some(e) = &r.error {
            lines.push(format!("error         {e}"));
        }
        lines.extend([
            format!(
                "container     {} at {}",
                r.label("container"),
                r.label("terminal")
            ),
            format!(
                "window        {} .. {}",
                r.label("window_start"),
                r.label("window_end")
            ),
            format!(
                "created       {} ({} ago)",
                rfc3339_ms(r.created_at_ms),
                human_ms(now - r.created_at_ms)
            ),
            format!(
                "updated       {} ({} ago)",
                rfc3339_ms(r.updated_at_ms),
                human_ms(now - r.updated_at_ms)
            ),
            format!(
                "expires       {} (in {})",
                rfc3339_ms(r.expires_at_s.saturating_mul(1000)),
                human_s(r.expires_at_s - now / 1000)
            ),
            format!("lease         {lease}"),
            format!("operation key {}", r.op_key),
            format!("fingerprint   {}", r.fingerprint),
            format!(
                "slot          {}",
                r.slot_id.as_deref().unwrap_or("none committed")
            ),
            format!(
                "slot ids      {}",
                if slot_ids.is_empty() {
                    "none".to_string()
                } else {
                    slot_ids
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            format!(
                "TMS booking   {}",
                booking.as_ref().map_or("none".to_string(), |b| format!(
                    "slot {} booked {} ago",
                    b.effect_id,
                    human_ms(now - b.booked_at_ms)
                ))
            ),
            format!(
                "claim request {}",
                if r.request.is_empty() {
                    "none (removed when the record left in_flight)".to_string()
                } else {
                    format!(
                        "[redacted: {} bytes, holds the release PIN]",
                        r.request.len()
                    )
                }
            ),
            format!("next          {next}"),
        ]);
        for h in &history {
            lines.push(format!(
                "history       {} {} {}: {}",
                rfc3339_ms(h.at_ms),
                h.who,
                h.action,
                h.detail
            ));
        }
        let json = json!({
            "pk": r.pk,
            "event_key": r.event_key,
            "status": r.status.as_str(),
            "route_pending": r.route_pending,
            "error": r.error,
            "container": r.label("container"),
            "terminal": r.label("terminal"),
            "window_start": r.label("window_start"),
            "window_end": r.label("window_end"),
            "created_at_ms": r.created_at_ms,
            "age_s": (now - r.created_at_ms) / 1000,
            "updated_at_ms": r.updated_at_ms,
            "expires_at_s": r.expires_at_s,
            "lease_owner": r.lease_owner,
            "lease_until_ms": r.lease_until_ms,
            "lease_live": r.has_work() && r.lease_is_live(now),
            "op_key": r.op_key,
            "fingerprint": r.fingerprint,
            "slot_id": r.slot_id,
            "slot_ids": slot_ids,
            "in_flight_index": r.inflight_shard.is_some(),
            "request": if r.request.is_empty() { Value::Null } else { json!(format!("[redacted {} bytes]", r.request.len())) },
            "booking": booking.map(|b| json!({
                "slot_id": b.effect_id, "container": b.label("container"), "terminal": b.label("terminal"),
                "window_start": b.label("window_start"), "window_end": b.label("window_end"),
                "booked_at_ms": b.booked_at_ms,
            })),
            "history": history,
            "next": next,
        });
        Ok((lines.join("\n") + "\n", json))
    }
}
