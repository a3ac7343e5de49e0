//! `reconcile`: one reconciler pass now, for one record or the whole InFlight index.

use gate::consumer::Invocation;
use gate::operator::{rfc3339_ms, OPERATOR_LEASE_MS};
use gate::reconciler::ReconcileReport;
use gate::store::InFlightEntry;
use serde_json::json;

use super::{approve, event_key_arg, Confirm, Ctl, Output};
use crate::error::{exit, CtlError};
use crate::render::{human_ms, progress};

impl Ctl {
    pub(super) fn report_words(&self, report: &ReconcileReport) -> String {
        let manual = format!("routed to the {}", self.words().manual_queue);
        let mut parts = Vec::new();
        for (n, word) in [
            (report.reconciled, "committed"),
            (report.found_by_lookup, "of them found by lookup"),
            (report.already_committed, "already committed"),
            (report.live_lease, "skipped (live lease)"),
            (report.manual, manual.as_str()),
            (report.transient, "failed (transient)"),
            (report.expired, "past their TTL"),
            (report.natural_key_collisions, "natural-key collisions"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        if parts.is_empty() {
            "nothing to do".into()
        } else {
            parts.join(", ")
        }
    }

    pub(super) async fn reconcile_one(
        &self,
        key: &str,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        self.need_server("reconcile")?;
        let r = self.record(&event_key_arg(key)?).await?;
        let now = self.now();
        if !r.has_work() {
            return Err(CtlError::Refused(format!(
                "the record is {}{}: nothing to reconcile",
                r.status,
                r.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )));
        }
        if r.lease_is_live(now) {
            return Err(CtlError::Refused(format!(
                "the lease is live: held by {} until {}",
                r.lease_owner.as_deref().unwrap_or("?"),
                rfc3339_ms(r.lease_until_ms.unwrap_or_default())
            )));
        }
        let plan = format!(
            "reconcile {} now: {}",
            r.event_key,
            self.gate
                .next_step(&r, &self.targets.reconciler, now)
                .replace(
                    &format!(
                        "the reconciler takes it over at its next sweep (every {} s), ",
                        self.targets.reconciler.sweep_interval_ms.max(1_000) / 1000
                    ),
                    "take it over, "
                )
        );
        let plan_json =
            json!({"action": "reconcile", "event_key": r.event_key, "dry_run": dry_run});
        if let Some(dry_run) = approve(&plan, plan_json, dry_run, confirm)? {
            return Ok(dry_run);
        }
        let invocation = self.invocation();
        let report = self
            .gate
            .reconcile_entry(InFlightEntry::from(&r), &invocation)
            .await;
        let said = self.report_words(&report);
        if report.live_lease == 0 {
            self.audit(&r.pk, "reconcile", said.clone()).await?;
        }
        let words = self.words();
        let after = self.record(&r.event_key).await?;
        let text = format!(
            "{}: {said}; now {}{}\n",
            r.event_key,
            after.status,
            after
                .effect_id
                .as_deref()
                .map(|s| format!(" with {} {s}", words.effect))
                .unwrap_or_default()
        );
        let mut json = json!({"action": "reconcile", "event_key": r.event_key, "report": report,
                              "status": after.status.as_str()});
        json[words.effect_id_key] = json!(after.effect_id);
        Ok(Output {
            text,
            json,
            code: if report.transient > 0 {
                exit::FAILED
            } else if report.live_lease > 0 {
                exit::REFUSED
            } else {
                exit::OK
            },
        })
    }

    pub(super) async fn reconcile_all(
        &self,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        self.need_server("reconcile")?;
        let now = self.now();
        let entries = self
            .in_flight_entries(now - self.targets.reconciler.min_age_ms)
            .await?;
        let plan = format!(
            "reconcile {} record(s) of the InFlight index older than {} now, one at a time, as \
             the reconciler does (a live lease is skipped)",
            entries.len(),
            human_ms(self.targets.reconciler.min_age_ms)
        );
        if dry_run || entries.is_empty() {
            let keys: Vec<&str> = entries.iter().map(|e| e.event_key.as_str()).collect();
            return Ok(Output::ok(
                format!("{}{plan}\n", if dry_run { "dry run: " } else { "" }),
                json!({"action": "reconcile", "dry_run": dry_run, "event_keys": keys}),
            ));
        }
        if !confirm.confirm(&plan) {
            return Err(CtlError::NotConfirmed("nothing written".into()));
        }
        let base = self.invocation();
        let bar = progress(entries.len() as u64, "reconciling", self.progress);
        let mut total = ReconcileReport::default();
        for (i, entry) in entries.into_iter().enumerate() {
            let invocation = Invocation {
                deadline_ms: self.now() + OPERATOR_LEASE_MS,
                ..base.for_record(i)
            };
            let pk = entry.pk.clone();
            let report = self.gate.reconcile_entry(entry, &invocation).await;
            if report.live_lease == 0 {
                self.audit(&pk, "reconcile", self.report_words(&report))
                    .await?;
            }
            merge(&mut total, &report);
            bar.inc(1);
        }
        bar.finish_and_clear();
        let text = format!("reconciled: {}\n", self.report_words(&total));
        Ok(Output {
            text,
            json: json!({"action": "reconcile", "report": total}),
            code: if total.transient > 0 {
                exit::FAILED
            } else {
                exit::OK
            },
        })
    }
}

fn merge(total: &mut ReconcileReport, one: &ReconcileReport) {
    total.examined += one.examined;
    total.reconciled += one.reconciled;
    total.found_by_lookup += one.found_by_lookup;
    total.already_committed += one.already_committed;
    total.live_lease += one.live_lease;
    total.expired += one.expired;
    total.manual += one.manual;
    total.transient += one.transient;
    total.unreadable += one.unreadable;
    total.left_for_next_run |= one.left_for_next_run;
    total.max_distinct_effect_ids = total
        .max_distinct_effect_ids
        .max(one.max_distinct_effect_ids);
    total.natural_key_collisions += one.natural_key_collisions;
}
