// Over 600 lines: one function per gatectl subcommand over the gate's ports; splitting it by
// subcommand is issue 22 item 11's open work (the tests start at `#[cfg(test)]`).
//! The subcommands, over the gate's own ports: every write goes through [`gate::operator`] and
//! the reconciler (the store's fenced, conditional writes), never a hand-written item.

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use gate::consumer::{Gate, Invocation, RecordOutcome};
use gate::manual::ManualItem;
use gate::operator::{rfc3339_ms, AuditEntry, AuditLog, OperatorError, Refusal, OPERATOR_LEASE_MS};
use gate::reconciler::ReconcileReport;
use gate::record::{record_pk, IdempotencyRecord, RecordStatus, INFLIGHT_SHARDS};
use gate::store::dynamo::{record_from_item, DynamoStore, MULTI_EFFECT_INDEX, MULTI_EFFECT_MARK};
use gate::store::{IdempotencyStore, InFlightEntry, InFlightIndex};
use serde_json::{json, Value};
use truck_slot::iso6346::EquipmentNumber;
use truck_slot::keys::event_key_of;
use truck_slot::terminal::{CallOutcome, Effect, LookupOutcome, SlotTerminal};

use crate::error::{exit, CtlError};
use crate::render::{cut, human_ms, human_s, progress, table};
use crate::targets::Targets;

/// What a command printed: a text for a person, the same as JSON for scripts, and its exit code
/// ([`crate::error::exit`]; a command that did its work but refused part of it, e.g. a redrive
/// that left old messages, exits [`exit::REFUSED`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// For a person.
    pub text: String,
    /// For scripts (`--json`).
    pub json: Value,
    /// The exit code.
    pub code: u8,
}

impl Output {
    fn ok(text: String, json: Value) -> Self {
        Self {
            text,
            json,
            code: exit::OK,
        }
    }
}

/// Asks a person before a write.
pub trait Confirm: Send {
    /// Shows `plan` and asks whether to go on; `true` only for a yes.
    fn confirm(&mut self, plan: &str) -> bool;
}

/// The gate before one record's write: with `dry_run`, the plan as the output
/// (`Ok(Some(..))`, nothing written); otherwise `confirm` asks, and `Ok(None)` means go on.
///
/// # Errors
/// [`CtlError::NotConfirmed`] when the answer is not yes.
fn approve(
    plan: &str,
    plan_json: serde_json::Value,
    dry_run: bool,
    confirm: &mut dyn Confirm,
) -> Result<Option<Output>, CtlError> {
    if dry_run {
        return Ok(Some(Output::ok(format!("dry run: {plan}\n"), plan_json)));
    }
    if !confirm.confirm(plan) {
        return Err(CtlError::NotConfirmed("nothing written".into()));
    }
    Ok(None)
}

/// `--yes`: every write confirmed.
pub struct Yes;

impl Confirm for Yes {
    fn confirm(&mut self, _plan: &str) -> bool {
        true
    }
}

/// The prompt on the terminal (stderr, stdin): `y` or `yes` goes on. Without a terminal on stdin
/// nothing is confirmed (pass `--yes` in scripts).
pub struct Prompt;

impl Confirm for Prompt {
    fn confirm(&mut self, plan: &str) -> bool {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            eprintln!("{plan}\nstdin is not a terminal: pass --yes to confirm");
            return false;
        }
        eprint!("{plan}\nProceed? [y/N] ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).is_err() {
            return false;
        }
        matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    }
}

/// A terminal that is not configured: every call is transient with that reason. Commands that
/// need the terminal check [`Ctl::terminal_ready`] first, so this only answers if one forgot.
pub struct NoTerminal;

#[async_trait]
impl SlotTerminal for NoTerminal {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::Transient("no terminal configured (TERMINAL_BASE_URL or TERMINALS)".into())
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::Transient("no terminal configured (TERMINAL_BASE_URL or TERMINALS)".into())
    }
}

/// Everything a command needs: the gate over the stack's tables, queues and terminal, the
/// DynamoDB store itself (scans, the audit history), SQS, and who is acting.
pub struct Ctl {
    /// The gate: its store is [`Ctl::store`], its manual queue the stack's, its clock the time
    /// every age is computed at.
    pub gate: Gate,
    /// The DynamoDB store (the same tables as the gate's).
    pub store: Arc<DynamoStore>,
    /// SQS (the manual queue, the dead-letter queue, the notification queue).
    pub sqs: aws_sdk_sqs::Client,
    /// Where everything is.
    pub targets: Targets,
    /// `gatectl:{user}`: the audit line's `who` and the prefix of the lease tokens taken.
    pub who: String,
    /// Whether `gate.terminal` is a real terminal client.
    pub terminal_ready: bool,
    /// Whether to draw progress bars.
    pub progress: bool,
}

/// What a subcommand is asked to do (the parsed command line, see `crate::cli`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `show QUERY`.
    Show(Query),
    /// `list in-flight [--older-than]` (milliseconds).
    ListInFlight {
        /// Only records older than this, **milliseconds**.
        older_than_ms: i64,
    },
    /// `list multi-slot`.
    ListMultiSlot,
    /// `list manual`.
    ListManual,
    /// `list dead-letters`.
    ListDeadLetters,
    /// `lookup KEY`.
    Lookup(String),
    /// `finish KEY --slot-id ID | --from-terminal`.
    Finish {
        /// The event key.
        key: String,
        /// The slot id given, or `None` for `--from-terminal`.
        effect_id: Option<String>,
    },
    /// `cancel KEY --reason TEXT`.
    Cancel {
        /// The event key.
        key: String,
        /// Why.
        reason: String,
    },
    /// `reconcile [KEY]`.
    Reconcile(Option<String>),
    /// `redrive`.
    Redrive,
}

/// How `show` finds records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// An event key (64 hex characters): one `GetItem`.
    EventKey(String),
    /// An equipment number (ISO 6346): a scan of the idempotency table for its records.
    Container(String),
    /// A notificationId: a scan, each record tested for `SHA-256(id:container) = event key`.
    NotificationId(String),
}

impl Query {
    /// Reads a query the way a person types it: 64 hex characters are an event key, a valid
    /// ISO 6346 equipment number (any case, spaces allowed) a container, anything else a
    /// notificationId.
    pub fn parse(text: &str) -> Self {
        let t = text.trim();
        if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Self::EventKey(t.to_ascii_lowercase());
        }
        match EquipmentNumber::parse(t) {
            Ok(n) => Self::Container(n.as_str().to_string()),
            Err(_) => Self::NotificationId(t.to_string()),
        }
    }
}

fn event_key_arg(key: &str) -> Result<String, CtlError> {
    let k = key.trim().to_ascii_lowercase();
    if k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(k)
    } else {
        Err(CtlError::NotFound(format!(
            "{key:?} is not an event key (64 hex characters); `gatectl show` finds it by \
             equipment number or notificationId"
        )))
    }
}

impl Ctl {
    fn now(&self) -> i64 {
        self.gate.clock.now_ms()
    }

    fn table(&self) -> &str {
        &self.targets.idempotency_table
    }

    /// A lease token for one write: `gatectl:{user}#{8 hex}`, unique per acquisition.
    pub fn lease_token(&self) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        format!("{}#{}", self.who, &id[..8])
    }

    fn invocation(&self) -> Invocation {
        Invocation {
            request_id: self.lease_token(),
            deadline_ms: self.now() + OPERATOR_LEASE_MS,
        }
    }

    fn need_terminal(&self, what: &str) -> Result<(), CtlError> {
        if self.terminal_ready {
            Ok(())
        } else {
            Err(CtlError::Config(format!(
                "{what} asks the terminal: set TERMINAL_BASE_URL and its token \
                 (TERMINAL_API_TOKEN_SECRET_ARN, or TERMINAL_API_TOKEN locally), or TERMINALS for \
                 several terminals, or use --stack"
            )))
        }
    }

    async fn record(&self, event_key: &str) -> Result<IdempotencyRecord, CtlError> {
        let pk = record_pk(&self.targets.gate.integration, event_key);
        self.store
            .get(&pk)
            .await
            .map_err(|e| CtlError::store(e, "dynamodb:GetItem", self.table()))?
            .ok_or_else(|| CtlError::NotFound(format!("no record {pk}")))
    }

    /// The record of `event_key` and the effect its server holds under its key, read-only
    /// through the gate ([`Gate::operator_lookup`]: no lease taken, nothing sent).
    async fn look_up(
        &self,
        event_key: &str,
    ) -> Result<(IdempotencyRecord, LookupOutcome), CtlError> {
        let pk = record_pk(&self.targets.gate.integration, event_key);
        self.gate.operator_lookup(&pk).await.map_err(|e| match e {
            OperatorError::Refused(Refusal::NotFound { pk }) => {
                CtlError::NotFound(format!("no record {pk}"))
            }
            other => self.refusal(other, "dynamodb:GetItem"),
        })
    }

    async fn audit(&self, pk: &str, action: &str, detail: String) -> Result<(), CtlError> {
        let entry = AuditEntry {
            at_ms: self.now(),
            who: self.who.clone(),
            action: action.to_string(),
            detail,
        };
        self.store.append_history(pk, &entry).await.map_err(|e| {
            let err = CtlError::store(e, "dynamodb:UpdateItem", self.table());
            match err {
                CtlError::Failed(m) => CtlError::Failed(format!(
                    "the change was made, but its audit line was not written: {m}"
                )),
                other => other,
            }
        })
    }

    /// Runs `action`. `dry_run`: writes nothing, prints what would change. `confirm` is asked
    /// before every write.
    ///
    /// # Errors
    /// A [`CtlError`], whose [`CtlError::exit_code`] the process exits with.
    pub async fn run(
        &self,
        action: &Action,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        match action {
            Action::Show(query) => self.show(query).await,
            Action::ListInFlight { older_than_ms } => self.list_in_flight(*older_than_ms).await,
            Action::ListMultiSlot => self.list_multi_slot().await,
            Action::ListManual => self.list_manual().await,
            Action::ListDeadLetters => self.list_dead_letters().await,
            Action::Lookup(key) => self.lookup(key).await,
            Action::Finish { key, effect_id } => {
                self.finish(key, effect_id.as_deref(), dry_run, confirm)
                    .await
            }
            Action::Cancel { key, reason } => self.cancel(key, reason, dry_run, confirm).await,
            Action::Reconcile(Some(key)) => self.reconcile_one(key, dry_run, confirm).await,
            Action::Reconcile(None) => self.reconcile_all(dry_run, confirm).await,
            Action::Redrive => self.redrive(dry_run, confirm).await,
        }
    }

    // --- show ------------------------------------------------------------------------------

    async fn scan(
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

    async fn show(&self, query: &Query) -> Result<Output, CtlError> {
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
    async fn describe(&self, r: &IdempotencyRecord) -> Result<(String, Value), CtlError> {
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
                r.effect_id.as_deref().unwrap_or("none committed")
            ),
            format!(
                "slot ids      {}",
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
            "slot_id": r.effect_id,
            "slot_ids": effect_ids,
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

    // --- lists -----------------------------------------------------------------------------

    async fn in_flight_entries(
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

    async fn list_in_flight(&self, older_than_ms: i64) -> Result<Output, CtlError> {
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

    async fn list_multi_slot(&self) -> Result<Output, CtlError> {
        let index = format!("{}/index/{MULTI_EFFECT_INDEX}", self.table());
        let mut pks = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let out = self
                .store
                .client()
                .query()
                .table_name(self.table())
                .index_name(MULTI_EFFECT_INDEX)
                .key_condition_expression("multi_slot = :one")
                .expression_attribute_values(":one", AttributeValue::S(MULTI_EFFECT_MARK.into()))
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
                .effect_ids
                .iter()
                .filter(|s| Some(s.as_str()) != r.effect_id.as_deref())
                .collect();
            t.add_row(vec![
                cut(&r.event_key, 16),
                r.label("container").to_string(),
                r.status.to_string(),
                r.effect_id.clone().unwrap_or_else(|| "none".into()),
                others
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
            rows.push(json!({
                "event_key": r.event_key, "container": r.label("container"), "status": r.status.as_str(),
                "slot_id": r.effect_id, "slot_ids": r.effect_ids, "cancel": others,
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

    /// Receives every message of `queue_url` without taking it away: each is hidden for
    /// `hide_s` seconds while the queue is read (so the same message is not counted twice),
    /// then made visible again unless `keep_hidden`. Each receive counts towards the message's
    /// `ApproximateReceiveCount` (neither the manual queue nor the dead-letter queue has a
    /// redrive policy, so that moves nothing).
    async fn peek(
        &self,
        queue_url: &str,
        what: &str,
        hide_s: i32,
    ) -> Result<Vec<Message>, CtlError> {
        let denied = |action: &str, e: String| CtlError::from_text(e, action, queue_url);
        let total = self
            .sqs
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| {
                denied(
                    "sqs:GetQueueAttributes",
                    aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                )
            })?
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let bar = progress(total, what, self.progress);
        let mut seen: Vec<Message> = Vec::new();
        let mut empty_rounds = 0;
        while empty_rounds < 2 {
            let out = self
                .sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .visibility_timeout(hide_s)
                .wait_time_seconds(1)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await
                .map_err(|e| {
                    denied(
                        "sqs:ReceiveMessage",
                        aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                    )
                })?;
            let got = out.messages();
            if got.is_empty() {
                empty_rounds += 1;
                continue;
            }
            empty_rounds = 0;
            for m in got {
                if !seen.iter().any(|s| s.message_id() == m.message_id()) {
                    bar.inc(1);
                    seen.push(m.clone());
                }
            }
        }
        bar.finish_and_clear();
        Ok(seen)
    }

    /// Makes `messages` visible again at once.
    async fn unhide(&self, queue_url: &str, messages: &[Message]) -> Result<(), CtlError> {
        for m in messages {
            if let Some(handle) = m.receipt_handle() {
                self.sqs
                    .change_message_visibility()
                    .queue_url(queue_url)
                    .receipt_handle(handle)
                    .visibility_timeout(0)
                    .send()
                    .await
                    .map_err(|e| {
                        CtlError::from_text(
                            aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
                            "sqs:ChangeMessageVisibility",
                            queue_url,
                        )
                    })?;
            }
        }
        Ok(())
    }

    async fn list_manual(&self) -> Result<Output, CtlError> {
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

    /// The oldest a dead letter may be to be redriven, **milliseconds**: the records' lifetime
    /// (`KEY_TTL_SECONDS`) minus the notification queue's retention (`docs/OPERATING.md`, "Alarm:
    /// DeadLetters": a redriven message lives another retention period, and its record must
    /// outlive it).
    async fn redrive_limit_ms(&self) -> Result<(i64, i64), CtlError> {
        let url = self.targets.notification_queue_url.clone().ok_or_else(|| {
            CtlError::Config(
                "the notification queue is unknown: use --stack, or set NOTIFICATION_QUEUE_URL"
                    .into(),
            )
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

    fn dead_letter_url(&self) -> Result<String, CtlError> {
        self.targets.dead_letter_queue_url.clone().ok_or_else(|| {
            CtlError::Config(
                "the dead-letter queue is unknown: use --stack, or set DEAD_LETTER_QUEUE_URL"
                    .into(),
            )
        })
    }

    async fn list_dead_letters(&self) -> Result<Output, CtlError> {
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
    async fn records_expiring_first(
        &self,
        messages: &[Message],
        retention_s: i64,
    ) -> Result<Vec<String>, CtlError> {
        let horizon_ms = self.now().saturating_add(retention_s.saturating_mul(1000));
        let mut ids = Vec::new();
        for m in messages {
            let Some(key) = m.body().and_then(event_key_of_body) else {
                continue;
            };
            let pk = record_pk(&self.targets.gate.integration, &key);
            let record = self
                .store
                .get(&pk)
                .await
                .map_err(|e| CtlError::store(e, "dynamodb:GetItem", self.table()))?;
            if record.is_some_and(|r| r.expires_at_s.saturating_mul(1000) < horizon_ms) {
                ids.push(m.message_id().unwrap_or_default().to_string());
            }
        }
        Ok(ids)
    }

    fn dead_letter_rows(
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
            let key = m.body().and_then(event_key_of_body);
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
                        "no: its record expires first, book by hand".to_string()
                    }
                    Some(false) => format!(
                        "no: older than {}, book by hand",
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

    // --- lookup ----------------------------------------------------------------------------

    async fn lookup(&self, key: &str) -> Result<Output, CtlError> {
        self.need_terminal("lookup")?;
        let (r, found) = self.look_up(&event_key_arg(key)?).await?;
        match found {
            LookupOutcome::Found(slot) => {
                let verdict = match (r.status, r.effect_id.as_deref()) {
                    (RecordStatus::Committed, Some(s)) if s == slot.effect_id => {
                        "the committed slot".to_string()
                    }
                    (RecordStatus::Committed, committed) => format!(
                        "NOT the committed slot ({}): cancel it at the terminal",
                        committed.unwrap_or("none")
                    ),
                    (RecordStatus::InFlight, _) => format!(
                        "not committed yet: `gatectl finish {} --from-terminal` commits it",
                        r.event_key
                    ),
                    (status, _) => format!(
                        "the record is {status}: nothing books this slot; book it by hand from \
                         the manual-booking queue, or cancel it at the terminal"
                    ),
                };
                let text = format!(
                    "the terminal holds slot {} under operation key {}{}: {verdict}\n",
                    slot.effect_id,
                    r.op_key,
                    slot.subject
                        .as_deref()
                        .map(|e| format!(" (for {e})"))
                        .unwrap_or_default()
                );
                Ok(Output::ok(
                    text,
                    json!({"event_key": r.event_key, "op_key": r.op_key, "found": true,
                           "slot_id": slot.effect_id, "equipment_number": slot.subject,
                           "record_status": r.status.as_str(), "record_effect_id": r.effect_id,
                           "verdict": verdict}),
                ))
            }
            LookupOutcome::NotFound => Err(CtlError::NotFound(format!(
                "the terminal holds no slot under operation key {} (record {})",
                r.op_key, r.status
            ))),
            LookupOutcome::Transient(why) => Err(CtlError::Failed(format!(
                "terminal lookup of {}: {why}",
                r.op_key
            ))),
        }
    }

    // --- finish, cancel --------------------------------------------------------------------

    fn refusal(&self, e: OperatorError, action: &str) -> CtlError {
        match e {
            OperatorError::Refused(r) => CtlError::Refused(r.to_string()),
            OperatorError::Store(e) => CtlError::store(e, action, self.table()),
        }
    }

    async fn finish(
        &self,
        key: &str,
        effect_id: Option<&str>,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        let r = self.record(&event_key_arg(key)?).await?;
        let now = self.now();
        self.gate
            .operator_check(&r, "finish", now)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        let (slot, source) = match effect_id {
            Some(id) if !slot_id_acceptable(id) => {
                return Err(CtlError::Refused(format!(
                    "--slot-id {:?} is not a slot id: 1 to {} printable ASCII characters, not \
                     blank (as the gate accepts from a terminal); nothing written",
                    cut(id, 40),
                    truck_slot::terminal::MAX_SLOT_ID_CHARS
                )))
            }
            Some(id) => (
                Effect {
                    effect_id: id.to_string(),
                    subject: None,
                },
                "given with --slot-id",
            ),
            None => {
                self.need_terminal("finish --from-terminal")?;
                match self.look_up(&r.event_key).await?.1 {
                    LookupOutcome::Found(slot) => (slot, "found at the terminal"),
                    LookupOutcome::NotFound => {
                        return Err(CtlError::NotFound(format!(
                            "the terminal holds no slot under operation key {}: nothing to \
                             finish; `gatectl reconcile {}` claims with the same key, or \
                             `gatectl cancel` hands it to a person",
                            r.op_key, r.event_key
                        )))
                    }
                    LookupOutcome::Transient(why) => {
                        return Err(CtlError::Failed(format!("terminal lookup: {why}")))
                    }
                }
            }
        };
        gate::operator::operator_check_effect(&r, &slot.effect_id)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        let plan = format!(
            "finish {}: take over the lease of {} (expired), commit slot {} ({source}) and write \
             the TMS booking for {} at {} ({} .. {}); the record leaves the InFlight index",
            r.event_key,
            r.lease_owner.as_deref().unwrap_or("nobody"),
            slot.effect_id,
            r.label("container"),
            r.label("terminal"),
            r.label("window_start"),
            r.label("window_end")
        );
        let plan_json = json!({"action": "finish", "event_key": r.event_key, "slot_id": slot.effect_id,
                               "source": source, "dry_run": dry_run});
        if let Some(dry_run) = approve(&plan, plan_json, dry_run, confirm)? {
            return Ok(dry_run);
        }
        let invocation = self.invocation();
        let outcome = self
            .gate
            .operator_finish(&r, slot.clone(), &invocation)
            .await
            .map_err(|e| self.refusal(e, "dynamodb:UpdateItem"))?;
        let (detail, result) = match &outcome {
            RecordOutcome::Committed {
                effect_id,
                natural_key_collision,
            } => (
                format!(
                    "committed slot {effect_id} ({source}){}",
                    natural_key_collision
                        .as_deref()
                        .map(|k| format!("; natural-key collision with event key {k}"))
                        .unwrap_or_default()
                ),
                Ok(()),
            ),
            other => {
                let d = format!(
                    "finish of slot {} ended as {} {}",
                    slot.effect_id,
                    other.code(),
                    other.detail()
                );
                (d.clone(), Err(d))
            }
        };
        self.audit(&r.pk, "finish", detail.clone()).await?;
        match result {
            Ok(()) => Ok(Output::ok(
                format!("{detail}; lease token {}\n", invocation.request_id),
                json!({"action": "finish", "event_key": r.event_key, "outcome": outcome.code(),
                       "slot_id": slot.effect_id, "owner": invocation.request_id}),
            )),
            Err(d) if matches!(outcome, RecordOutcome::Retry(_)) => Err(CtlError::Failed(d)),
            Err(d) => Err(CtlError::Refused(d)),
        }
    }

    async fn cancel(
        &self,
        key: &str,
        reason: &str,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        let r = self.record(&event_key_arg(key)?).await?;
        let now = self.now();
        self.gate
            .operator_check(&r, "cancel", now)
            .map_err(|e| CtlError::Refused(e.to_string()))?;
        if !r.effect_ids.is_empty() {
            return Err(CtlError::Refused(
                gate::operator::Refusal::EffectRecorded {
                    effect_ids: r.effect_ids.iter().cloned().collect(),
                }
                .to_string(),
            ));
        }
        let detail = format!("cancelled by {}: {reason}", self.who);
        let plan = format!(
            "cancel {}: take over the lease of {} (expired), mark it failed ({detail}), send its \
             stored claim request to the manual-booking queue (reason cancelled, to book by hand \
             or drop) and take it out of the InFlight index",
            r.event_key,
            r.lease_owner.as_deref().unwrap_or("nobody")
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
            .map_err(|e| self.refusal(e, "dynamodb:UpdateItem"))?;
        let ok = matches!(outcome, RecordOutcome::Manual(_));
        let audit = if ok {
            format!("marked failed and sent to the manual-booking queue: {reason}")
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

    // --- reconcile -------------------------------------------------------------------------

    fn report_words(report: &ReconcileReport) -> String {
        let mut parts = Vec::new();
        for (n, word) in [
            (report.reconciled, "committed"),
            (report.found_by_lookup, "of them found by lookup"),
            (report.already_committed, "already committed"),
            (report.live_lease, "skipped (live lease)"),
            (report.manual, "routed to the manual-booking queue"),
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

    async fn reconcile_one(
        &self,
        key: &str,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        self.need_terminal("reconcile")?;
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
                    "the reconciler takes it over at its next run (every minute), ",
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
        let words = Self::report_words(&report);
        if report.live_lease == 0 {
            self.audit(&r.pk, "reconcile", words.clone()).await?;
        }
        let after = self.record(&r.event_key).await?;
        let text = format!(
            "{}: {words}; now {}{}\n",
            r.event_key,
            after.status,
            after
                .effect_id
                .as_deref()
                .map(|s| format!(" with slot {s}"))
                .unwrap_or_default()
        );
        let json = json!({"action": "reconcile", "event_key": r.event_key, "report": report,
                          "status": after.status.as_str(), "slot_id": after.effect_id});
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

    async fn reconcile_all(
        &self,
        dry_run: bool,
        confirm: &mut dyn Confirm,
    ) -> Result<Output, CtlError> {
        self.need_terminal("reconcile")?;
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
                self.audit(&pk, "reconcile", Self::report_words(&report))
                    .await?;
            }
            merge(&mut total, &report);
            bar.inc(1);
        }
        bar.finish_and_clear();
        let text = format!("reconciled: {}\n", Self::report_words(&total));
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

    // --- redrive ---------------------------------------------------------------------------

    async fn redrive(&self, dry_run: bool, confirm: &mut dyn Confirm) -> Result<Output, CtlError> {
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
                 notification queue's retention {} s), or whose record expires within that \
                 retention: their records may expire before a redriven copy does; book them by \
                 hand from their bodies, then delete them from the dead-letter queue\n\
                 {old_table}\n",
                old.len(),
                human_ms(limit_ms),
                self.targets.gate.key_ttl_s,
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
            if let Some(key) = event_key_of_body(body) {
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
                                "dead letter {} sent back to the notification queue",
                                m.message_id().unwrap_or_default()
                            ),
                        },
                    )
                    .await
                {
                    Ok(()) | Err(gate::store::StoreError::Corrupt(_)) => {}
                    Err(e) => return Err(CtlError::store(e, "dynamodb:UpdateItem", self.table())),
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

/// Whether `--slot-id` could be a slot id: the rules the gate applies to a terminal's answer
/// (`truck_slot::terminal`: not blank, at most `MAX_SLOT_ID_CHARS`, printable ASCII or space), so that a
/// pasted line break, an empty argument or a whole paragraph is not committed and booked.
fn slot_id_acceptable(effect_id: &str) -> bool {
    !effect_id.trim().is_empty()
        && effect_id.len() <= truck_slot::terminal::MAX_SLOT_ID_CHARS
        && effect_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}

/// `SentTimestamp` of a message, epoch **milliseconds** (SQS keeps a dead letter's original
/// enqueue time).
fn sent_ms(m: &Message) -> Option<i64> {
    m.attributes()?
        .get(&MessageSystemAttributeName::SentTimestamp)?
        .parse()
        .ok()
}

fn receive_count(m: &Message) -> Option<u64> {
    m.attributes()?
        .get(&MessageSystemAttributeName::ApproximateReceiveCount)?
        .parse()
        .ok()
}

/// The event key of a notification body (`notificationId` and the equipment number, canonical
/// ISO 6346), without the strict parser's other checks; `None` for a body without them.
pub fn event_key_of_body(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let id = v.get("notificationId")?.as_str()?;
    let number = EquipmentNumber::parse(v.get("equipment_number")?.as_str()?).ok()?;
    Some(event_key_of(id, number.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_read_as_a_person_types_it() {
        let key = "a".repeat(64);
        assert_eq!(Query::parse(&key), Query::EventKey(key.clone()));
        assert_eq!(
            Query::parse("csqu3054383"),
            Query::Container("CSQU3054383".into())
        );
        // A wrong check digit is no equipment number: a notificationId.
        assert_eq!(
            Query::parse("CSQU3054384"),
            Query::NotificationId("CSQU3054384".into())
        );
        assert_eq!(Query::parse("N-1"), Query::NotificationId("N-1".into()));
    }

    #[test]
    fn the_event_key_of_a_body_is_the_gates() {
        let body = r#"{"notificationId":"N-1","equipment_number":"CSQU3054383","pin":"1"}"#;
        assert_eq!(
            event_key_of_body(body),
            Some(truck_slot::keys::sha256_hex(b"N-1:CSQU3054383"))
        );
        assert_eq!(event_key_of_body("{bad"), None);
    }
}
