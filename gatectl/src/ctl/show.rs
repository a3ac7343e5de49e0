//! `show`: a record (or the records a query finds) for a person and as JSON.

use gate::operator::rfc3339_ms;
use gate::record::IdempotencyRecord;
use serde_json::{json, Value};

use super::{Ctl, Output, Query};
use crate::error::CtlError;
use crate::render::{human_ms, human_s, progress};
use crate::targets::StoreCall;
use crate::words::Words;

impl Ctl {
    /// The records a scan of the store finds ([`gate::store::RecordScan`]): with `label`, those whose label
    /// `name` is `value`; then those `keep` keeps.
    pub(super) async fn scan(
        &self,
        keep: impl Fn(&IdempotencyRecord) -> bool,
        label: Option<(&str, &str)>,
    ) -> Result<Vec<IdempotencyRecord>, CtlError> {
        let bar = progress(0, "scanning the idempotency table", self.progress);
        let found = self
            .store
            .scan_records(label, &mut |n| bar.inc(n))
            .await
            .map_err(|e| self.store_error(e, StoreCall::Scan))?;
        bar.finish_and_clear();
        Ok(found.into_iter().filter(|r| keep(r)).collect())
    }

    pub(super) async fn show(&self, text: &str) -> Result<Output, CtlError> {
        let query = self.view.query(text);
        let records = match &query {
            Query::EventKey(k) => vec![self.record(k).await?],
            Query::Label { name, value } => self.scan(|_| true, Some((name, value))).await?,
            Query::Text(t) => self.scan(|r| self.view.matches(t, r), None).await?,
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

    /// One record for a person and as JSON, in the integration's words: status, the event (its
    /// labels, [`crate::View::record_lines`]), ages in human units, lease, operation key, effect
    /// ids, the business row, the history and what the gate does next; never the stored
    /// request (it holds [`Words::request_secret`]).
    pub(super) async fn describe(
        &self,
        r: &IdempotencyRecord,
    ) -> Result<(String, Value), CtlError> {
        let now = self.now();
        let words: &Words = self.words();
        let booking = self
            .store
            .business_row(&r.event_key)
            .await
            .map_err(|e| self.store_error(e, StoreCall::Booking))?;
        let history = self
            .store
            .history(&r.pk)
            .await
            .map_err(|e| self.store_error(e, StoreCall::History))?;
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
        let effect_ids: Vec<&String> = r.effect_ids.iter().collect();
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
        lines.extend(
            self.view
                .record_lines(r)
                .into_iter()
                .map(|(heading, value)| format!("{heading:<13} {value}")),
        );
        lines.extend([
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
                "{:<13} {}",
                words.effect,
                r.effect_id.as_deref().unwrap_or("none committed")
            ),
            format!(
                "{:<13} {}",
                format!("{} ids", words.effect),
                if effect_ids.is_empty() {
                    "none".to_string()
                } else {
                    effect_ids
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            format!(
                "{:<13} {}",
                words.business_row,
                booking.as_ref().map_or("none".to_string(), |b| format!(
                    "{} {} {} {} ago",
                    words.effect,
                    b.effect_id,
                    words.written,
                    human_ms(now - b.written_at_ms)
                ))
            ),
            format!(
                "{:<13} {}",
                words.request,
                if r.request.is_empty() {
                    "none (removed when the record left in_flight)".to_string()
                } else {
                    format!(
                        "[redacted: {} bytes, holds {}]",
                        r.request.len(),
                        words.request_secret
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
        let mut json = json!({
            "pk": r.pk,
            "event_key": r.event_key,
            "status": r.status.as_str(),
            "route_pending": r.route_pending,
            "error": r.error,
            "created_at_ms": r.created_at_ms,
            "age_s": (now - r.created_at_ms) / 1000,
            "updated_at_ms": r.updated_at_ms,
            "expires_at_s": r.expires_at_s,
            "lease_owner": r.lease_owner,
            "lease_until_ms": r.lease_until_ms,
            "lease_live": r.has_work() && r.lease_is_live(now),
            "op_key": r.op_key,
            "fingerprint": r.fingerprint,
            "in_flight_index": r.inflight_shard.is_some(),
            "request": if r.request.is_empty() { Value::Null } else { json!(format!("[redacted {} bytes]", r.request.len())) },
            "history": history,
            "next": next,
        });
        // The integration's words: its effect id's key (`effect_id`), its labels (`container`,
        // ...) and its business row's key (`booking`).
        if let Value::Object(map) = &mut json {
            map.insert(words.effect_id_key.into(), json!(r.effect_id));
            map.insert(words.effect_ids_key(), json!(effect_ids));
            for (name, value) in &r.labels {
                map.insert(name.clone(), json!(value));
            }
            let row = booking.map(|b| {
                let mut row = serde_json::Map::new();
                row.insert(words.effect_id_key.into(), json!(b.effect_id));
                for (name, value) in &b.labels {
                    row.insert(name.clone(), json!(value));
                }
                row.insert(words.written_at_key(), json!(b.written_at_ms));
                Value::Object(row)
            });
            map.insert(words.business_row_key.into(), json!(row));
        }
        Ok((lines.join("\n") + "\n", json))
    }
}
