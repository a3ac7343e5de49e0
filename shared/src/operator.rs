//! What an operator does to one record (the runbooks' "finish or cancel by hand"), through the
//! gate's own code and conditions: the `gatectl` command line calls these.
//!
//! * [`Gate::operator_finish`]: take the expired lease over as the operator (a lease token
//!   `gatectl:{user}#{n}`, unique per acquisition), then settle the effect exactly as the consumer
//!   and the reconciler do (`settle_claim`: the subject check, the fenced commit with the TMS
//!   booking and the natural-key item, a refused commit re-read and acted on);
//! * [`Gate::operator_cancel`]: take the lease over, then route the record to a person as the gate
//!   routes any record (`failed`, reason [`ManualReason::Cancelled`]): mark first (fenced by the
//!   lease), send the stored claim request to the manual-booking queue (the person who books by
//!   hand needs its PIN: nothing lost silently), confirm (the record leaves the `InFlight` index);
//! * [`Gate::operator_check`]: the refusals both share, before anything is written;
//! * [`Gate::operator_lookup`]: the effect the server holds under a record's key, read-only
//!   (no lease taken, nothing sent);
//! * [`Gate::next_step`]: what the gate does next with a record, in words (`gatectl show`).
//!
//! Each write an operator makes leaves an [`AuditEntry`] (who, what, when) in the record's
//! history ([`AuditLog`]): a list attribute `history` on the DynamoDB item, beside the fields of
//! [`IdempotencyRecord`], which no write of the gate removes (updates never touch it; only a new
//! reservation of an expired, finished key replaces the item, and with it its history).
//!
//! (Over 600 lines: the operator's actions on one record, the audit history they write and its
//! two stores are one concern, and their tests sit beside them.)

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::clock::ms_to_s;
use crate::consumer::{Delivery, Gate, Invocation, RecordOutcome};
use crate::decision::{decide, Holder};
use crate::effect::{CallOutcome, Effect, LookupOutcome};
use crate::integration::Held;
use crate::manual::ManualReason;
use crate::record::{IdempotencyRecord, RecordStatus};
use crate::routing::is_routing_record;
use crate::store::memory::MemoryStore;
use crate::store::{limits, StoreError, TakeOver};

/// The prefix of every lease token an operator's command takes: `gatectl:{user}#{n}`.
pub const OPERATOR_OWNER_PREFIX: &str = "gatectl:";

/// How long an operator's lease lasts, **milliseconds**: long enough for a commit or a routing
/// (a few DynamoDB and SQS calls), short enough that a command killed halfway leaves the record
/// to the reconciler a minute later.
pub const OPERATOR_LEASE_MS: i64 = 60_000;

/// One line of a record's audit history: who did what, when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEntry {
    /// When, epoch **milliseconds**.
    pub at_ms: i64,
    /// Who: `gatectl:{user}` (the operator's name as given to `gatectl --as`, or `$USER`).
    pub who: String,
    /// What: the subcommand (`finish`, `cancel`, `reconcile`, `redrive`).
    pub action: String,
    /// The outcome in words, e.g. `committed effect S-1 (from the server)` or the cancel's reason.
    pub detail: String,
}

impl AuditEntry {
    /// The entry as a history keeps it: `who`, `action` and `detail` cut (at a character
    /// boundary) to [`limits::MAX_AUDIT_WHO_BYTES`], [`limits::MAX_AUDIT_ACTION_BYTES`] and
    /// [`limits::MAX_AUDIT_DETAIL_BYTES`], so that a full history ([`limits::MAX_HISTORY_ENTRIES`]
    /// lines) fits the record's growth allowance.
    pub fn bounded(&self) -> AuditEntry {
        AuditEntry {
            at_ms: self.at_ms,
            who: limits::cut_to(&self.who, limits::MAX_AUDIT_WHO_BYTES).to_string(),
            action: limits::cut_to(&self.action, limits::MAX_AUDIT_ACTION_BYTES).to_string(),
            detail: limits::cut_to(&self.detail, limits::MAX_AUDIT_DETAIL_BYTES).to_string(),
        }
    }
}

/// A record's audit history (the `history` attribute of its item): at most
/// [`limits::MAX_HISTORY_ENTRIES`] lines, each [`AuditEntry::bounded`].
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Appends `entry` ([`AuditEntry::bounded`]) to the history of record `pk`. Refused with
    /// [`StoreError::Corrupt`] when there is no such record (the history never creates an item),
    /// and with [`StoreError::Refused`] ([`limits::ItemRefusal::HistoryFull`]) when the history
    /// already holds [`limits::MAX_HISTORY_ENTRIES`] lines.
    async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError>;

    /// The history of record `pk`, oldest first; empty when it has none (or no record).
    async fn history(&self, pk: &str) -> Result<Vec<AuditEntry>, StoreError>;
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError> {
        if !self.has_record(pk) {
            return Err(StoreError::Corrupt(format!("no record {pk} to audit")));
        }
        let mut audit = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        let lines = audit.entry(pk.to_string()).or_default();
        if lines.len() >= limits::MAX_HISTORY_ENTRIES {
            return Err(StoreError::Refused(limits::ItemRefusal::HistoryFull {
                limit: limits::MAX_HISTORY_ENTRIES,
            }));
        }
        lines.push(entry.bounded());
        Ok(())
    }

    async fn history(&self, pk: &str) -> Result<Vec<AuditEntry>, StoreError> {
        let audit = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        Ok(audit.get(pk).cloned().unwrap_or_default())
    }
}

/// The histories a [`MemoryStore`] keeps, by `pk`.
pub(crate) type AuditTable = std::sync::Mutex<BTreeMap<String, Vec<AuditEntry>>>;

/// Why an operator's write was refused before anything was written. Each names what to do
/// instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No record under the key.
    #[error("no record {pk}")]
    NotFound {
        /// The key looked for.
        pk: String,
    },
    /// The record is not `in_flight`: nothing to finish or cancel.
    #[error("the record is {status}, not in_flight{}: nothing to {action}", error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    NotInFlight {
        /// The subcommand refused.
        action: &'static str,
        /// Its status.
        status: RecordStatus,
        /// Its error, for `failed` and `manual`.
        error: Option<String>,
    },
    /// The record routes an item to a person (a poison body, a mismatch, an ended window), not
    /// an effect claim: `gatectl reconcile KEY` sends its item.
    #[error("the record is a routing to the manual-booking queue, not a slot claim: run `gatectl reconcile {event_key}` to send its item")]
    Routing {
        /// Its event key.
        event_key: String,
    },
    /// Someone holds a live lease: a consumer or the reconciler works on it now.
    #[error("the lease is live: held by {holder} until {until} ({left_s} s from now); wait for it to expire, then run the command again")]
    LeaseLive {
        /// The lease owner.
        holder: String,
        /// Its end, RFC 3339 UTC.
        until: String,
        /// Seconds left.
        left_s: i64,
    },
    /// A cancel of a record for which the server already returned an effect id.
    #[error("the terminal already returned slot id(s) {effect_ids:?} for this record: finish it with `--slot-id`, or cancel the slot at the terminal first")]
    EffectRecorded {
        /// The recorded effect ids.
        effect_ids: Vec<String>,
    },
    /// A finish with another effect than the one(s) the server already returned for the record.
    #[error("the terminal returned slot id(s) {effect_ids:?} for this record, not {given}: finish it with one of those (or --from-terminal)")]
    OtherEffectRecorded {
        /// The effect id given.
        given: String,
        /// The recorded effect ids.
        effect_ids: Vec<String>,
    },
    /// A lookup asked of a server that has no lookup by key
    /// ([`crate::Integration::supports_lookup`]).
    #[error("the server has no lookup by key: whether an effect exists under Idempotency-Key {op_key} is unknown to the gate; ask the server's operators")]
    NoLookup {
        /// The record's `Idempotency-Key`.
        op_key: String,
    },
    /// The take-over was refused: someone took the record meanwhile, or finished it.
    #[error(
        "the lease was taken or the record finished meanwhile; run `gatectl show` and look again"
    )]
    TakenMeanwhile,
}

/// An RFC 3339 UTC rendering of epoch **milliseconds** (`?` when out of range).
pub fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "?".to_string())
}

impl Gate {
    /// The refusals shared by a finish and a cancel of `record` at `now_ms` (epoch ms), in this
    /// order: not `in_flight` (or a pending routing), a routing record, a live lease.
    ///
    /// # Errors
    /// The [`Refusal`].
    pub fn operator_check(
        &self,
        record: &IdempotencyRecord,
        action: &'static str,
        now_ms: i64,
    ) -> Result<(), Refusal> {
        if record.status != RecordStatus::InFlight || record.route_pending {
            return Err(Refusal::NotInFlight {
                action,
                status: record.status,
                error: record.error.clone(),
            });
        }
        if is_routing_record(record) {
            return Err(Refusal::Routing {
                event_key: record.event_key.clone(),
            });
        }
        if record.lease_is_live(now_ms) {
            let until = record.lease_until_ms.unwrap_or_default();
            return Err(Refusal::LeaseLive {
                holder: record.lease_owner.clone().unwrap_or_default(),
                until: rfc3339_ms(until),
                left_s: (until - now_ms) / 1000,
            });
        }
        Ok(())
    }

    /// Takes the expired lease of `record` over for `invocation` (its request id the operator's
    /// lease token), after [`Gate::operator_check`].
    async fn operator_take_over(
        &self,
        record: &IdempotencyRecord,
        action: &'static str,
        invocation: &Invocation,
    ) -> Result<IdempotencyRecord, OperatorError> {
        let now = self.clock.now_ms();
        self.operator_check(record, action, now)?;
        match self
            .take_over_for(&record.pk, record.lease_owner.as_deref(), invocation, now)
            .await?
        {
            TakeOver::Taken(held) => Ok(*held),
            TakeOver::Refused => Err(Refusal::TakenMeanwhile.into()),
        }
    }

    /// The runbook's finish: takes the expired lease of `record` over as the operator
    /// (`invocation.request_id`, a `gatectl:{user}#{n}` token) and commits `effect` with the TMS
    /// booking, through the gate's own settlement of a claim (the effect must be for the record's
    /// subject when the server named one; a refused commit is re-read and acted on as the
    /// consumer would). Returns what happened ([`RecordOutcome::Committed`] when all went well).
    /// Refused ([`Refusal::OtherEffectRecorded`]) when the server already returned another effect
    /// id for the record: committing a second effect would leave the first unbooked.
    ///
    /// # Errors
    /// A [`Refusal`] before anything was written, or a store error of the take-over.
    pub async fn operator_finish(
        &self,
        record: &IdempotencyRecord,
        effect: Effect,
        invocation: &Invocation,
    ) -> Result<RecordOutcome, OperatorError> {
        self.operator_check(record, "finish", self.clock.now_ms())?;
        operator_check_effect(record, &effect.effect_id)?;
        let held = self
            .operator_take_over(record, "finish", invocation)
            .await?;
        // An effect id recorded between the read and the take-over (the effect-id `ADD` is not
        // fenced): checked again under our lease, which is handed back on refusal.
        if let Err(refusal) = operator_check_effect(&held, &effect.effect_id) {
            self.release(&held, &invocation.request_id, String::new())
                .await;
            return Err(refusal.into());
        }
        let body = String::from_utf8_lossy(&held.request).into_owned();
        let message_id = invocation.request_id.clone();
        Ok(self
            .settle_claim(
                &held,
                CallOutcome::Done(effect),
                Delivery {
                    body: &body,
                    message_id: &message_id,
                    invocation,
                },
            )
            .await)
    }

    /// The runbook's cancel: refused when the server already returned an effect id for the
    /// record ([`Refusal::EffectRecorded`]); otherwise takes the expired lease over as the operator
    /// and routes the record to a person as `failed` with reason [`ManualReason::Cancelled`]
    /// and `error` = `detail`: marked (fenced by the lease), its stored claim request sent to the
    /// manual-booking queue (with the PIN the person booking by hand needs), the routing
    /// confirmed, which takes it out of the `InFlight` index. Returns
    /// [`RecordOutcome::Manual`] when all went well.
    ///
    /// # Errors
    /// A [`Refusal`] before anything was written, or a store error of the take-over.
    pub async fn operator_cancel(
        &self,
        record: &IdempotencyRecord,
        detail: &str,
        invocation: &Invocation,
    ) -> Result<RecordOutcome, OperatorError> {
        if !record.effect_ids.is_empty() {
            return Err(Refusal::EffectRecorded {
                effect_ids: record.effect_ids.iter().cloned().collect(),
            }
            .into());
        }
        let held = self
            .operator_take_over(record, "cancel", invocation)
            .await?;
        if !held.effect_ids.is_empty() {
            // Recorded between the read and the take-over: hand the lease back at once.
            self.release(&held, &invocation.request_id, String::new())
                .await;
            return Err(Refusal::EffectRecorded {
                effect_ids: held.effect_ids.iter().cloned().collect(),
            }
            .into());
        }
        let body = String::from_utf8_lossy(&held.request).into_owned();
        let message_id = invocation.request_id.clone();
        Ok(self
            .route_held_record(
                &held,
                RecordStatus::Failed,
                ManualReason::Cancelled,
                detail.to_string(),
                Delivery {
                    body: &body,
                    message_id: &message_id,
                    invocation,
                },
            )
            .await)
    }

    /// What the gate will do next with `record` at `now_ms` (epoch ms), in words for a person
    /// (`gatectl show`): nothing for a finished record, its holder's work under a live lease,
    /// otherwise when the reconciler takes it over (its minimum age in `reconciler`) and the one
    /// decision it then carries out ([`crate::decision::decide`] for
    /// [`Holder::Reconciler`], [`crate::decision::NextStep::describe`]).
    pub fn next_step(
        &self,
        record: &IdempotencyRecord,
        reconciler: &crate::reconciler::ReconcilerConfig,
        now_ms: i64,
    ) -> String {
        if !record.has_work() {
            return match record.status {
                RecordStatus::Committed => {
                    "nothing: committed; a redelivery is acknowledged as a duplicate".into()
                }
                _ => "nothing: routed to a person; a redelivery is acknowledged as a duplicate"
                    .into(),
            };
        }
        if record.lease_is_live(now_ms) {
            return format!(
                "its holder {} works on it until {}",
                record.lease_owner.as_deref().unwrap_or("?"),
                rfc3339_ms(record.lease_until_ms.unwrap_or_default())
            );
        }
        let age = now_ms.saturating_sub(record.created_at_ms);
        let when = if age < reconciler.min_age_ms {
            format!(
                "in {} s (the reconciler waits until it is {} s old)",
                (reconciler.min_age_ms - age) / 1000,
                reconciler.min_age_ms / 1000
            )
        } else {
            "at its next run (every minute)".to_string()
        };
        let policy = self.policy(record);
        let then =
            decide(record, now_ms, &policy, Holder::Reconciler).describe(record, &policy, now_ms);
        let expired = if record.is_expired(now_ms) {
            format!(
                " (its TTL passed at {}: finished like any other)",
                rfc3339_ms(record.expires_at_s.saturating_mul(1000))
            )
        } else {
            String::new()
        };
        format!("the reconciler takes it over {when}, {then}{expired}")
    }

    /// An operator's read-only lookup (`gatectl lookup`, `gatectl finish --from-server`): the
    /// record `pk` read back from the store (one consistent read: it is reserved), then the
    /// effect its server holds under its `Idempotency-Key`, without taking its lease (a lookup
    /// changes nothing at the server). Never sends the request.
    ///
    /// # Errors
    /// [`Refusal::NotFound`] without such a record; [`Refusal::NoLookup`] when its server has no
    /// lookup by key ([`crate::Integration::supports_lookup`]); a store error of the read.
    pub async fn operator_lookup(
        &self,
        pk: &str,
    ) -> Result<(IdempotencyRecord, LookupOutcome), OperatorError> {
        let record = self
            .store
            .get(pk)
            .await?
            .ok_or_else(|| Refusal::NotFound { pk: pk.to_string() })?;
        if !self.integration.supports_lookup(&record) {
            return Err(Refusal::NoLookup {
                op_key: record.op_key.clone(),
            }
            .into());
        }
        let outcome = self.integration.lookup(&Held::new(&record)).await;
        Ok((record, outcome))
    }
}

/// The refusal of a finish of `record` with `effect_id` when the server already returned other
/// effect ids for it ([`Refusal::OtherEffectRecorded`]); checked by [`Gate::operator_finish`].
///
/// # Errors
/// The [`Refusal`].
pub fn operator_check_effect(record: &IdempotencyRecord, effect_id: &str) -> Result<(), Refusal> {
    if record.effect_ids.is_empty() || record.effect_ids.contains(effect_id) {
        return Ok(());
    }
    Err(Refusal::OtherEffectRecorded {
        given: effect_id.to_string(),
        effect_ids: record.effect_ids.iter().cloned().collect(),
    })
}

/// A refused or failed operator write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Seconds between `ms` and `now_ms` (epoch ms), for ages.
pub fn age_s(ms: i64, now_ms: i64) -> i64 {
    ms_to_s(now_ms.saturating_sub(ms))
}

#[cfg(feature = "aws")]
mod dynamo_audit {
    use std::collections::HashMap;

    use async_trait::async_trait;
    use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata};
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::{AuditEntry, AuditLog};
    use crate::store::dynamo::DynamoStore;
    use crate::store::{limits, StoreError};

    fn entry_item(entry: &AuditEntry) -> AttributeValue {
        AttributeValue::M(HashMap::from([
            ("at".to_string(), AttributeValue::N(entry.at_ms.to_string())),
            ("who".to_string(), AttributeValue::S(entry.who.clone())),
            (
                "action".to_string(),
                AttributeValue::S(entry.action.clone()),
            ),
            (
                "detail".to_string(),
                AttributeValue::S(entry.detail.clone()),
            ),
        ]))
    }

    fn entry_from(value: &AttributeValue) -> Result<AuditEntry, StoreError> {
        let bad =
            || StoreError::Corrupt("history: an entry is not {at, who, action, detail}".into());
        let m = value.as_m().map_err(|_| bad())?;
        let text = |k: &str| {
            m.get(k)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .ok_or_else(bad)
        };
        Ok(AuditEntry {
            at_ms: m
                .get("at")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)?,
            who: text("who")?,
            action: text("action")?,
            detail: text("detail")?,
        })
    }

    fn store_error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
        op: &str,
        err: aws_sdk_dynamodb::error::SdkError<E, R>,
    ) -> StoreError {
        StoreError::Unavailable(format!("{op}: {}", DisplayErrorContext(&err)))
    }

    /// `history` is a list of maps `{at: N (epoch ms), who: S, action: S, detail: S}`.
    #[async_trait]
    impl AuditLog for DynamoStore {
        /// One `UpdateItem`: `SET history = list_append(if_not_exists(history, []), [entry])` on
        /// condition `attribute_exists(pk)` and fewer than [`limits::MAX_HISTORY_ENTRIES`] lines
        /// (a refused condition returns the old item, which tells the two apart). Not
        /// idempotent: the SDK's retry of an append that landed appends the line twice (an audit
        /// line too many, never one too few).
        async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError> {
            let result = self
                .client()
                .update_item()
                .table_name(self.idempotency_table())
                .key("pk", AttributeValue::S(pk.to_string()))
                .update_expression(
                    "SET history = list_append(if_not_exists(history, :empty), :entry)",
                )
                .condition_expression(
                    "attribute_exists(pk) AND (attribute_not_exists(history) OR size(history) < :max)",
                )
                .expression_attribute_values(":empty", AttributeValue::L(Vec::new()))
                .expression_attribute_values(
                    ":entry",
                    AttributeValue::L(vec![entry_item(&entry.bounded())]),
                )
                .expression_attribute_values(
                    ":max",
                    AttributeValue::N(limits::MAX_HISTORY_ENTRIES.to_string()),
                )
                .return_values_on_condition_check_failure(
                    aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            match result {
                Ok(_) => Ok(()),
                Err(err) => match err.as_service_error() {
                    Some(
                        aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(e),
                    ) => match e.item() {
                        Some(_) => Err(StoreError::Refused(limits::ItemRefusal::HistoryFull {
                            limit: limits::MAX_HISTORY_ENTRIES,
                        })),
                        None => Err(StoreError::Corrupt(format!("no record {pk} to audit"))),
                    },
                    _ => Err(store_error("history (UpdateItem)", err)),
                },
            }
        }

        /// One consistent `GetItem` of `history` only (`ProjectionExpression`).
        async fn history(&self, pk: &str) -> Result<Vec<AuditEntry>, StoreError> {
            let out = self
                .client()
                .get_item()
                .table_name(self.idempotency_table())
                .key("pk", AttributeValue::S(pk.to_string()))
                .projection_expression("history")
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| store_error("history (GetItem)", e))?;
            match out.item().and_then(|i| i.get("history")) {
                None => Ok(Vec::new()),
                Some(AttributeValue::L(entries)) => entries.iter().map(entry_from).collect(),
                Some(_) => Err(StoreError::Corrupt(format!("{pk}: history is not a list"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::consumer::{derive_keys, GateConfig};
    use crate::integration::{Event, Integration, Parsed};
    use crate::manual::MemoryManualQueue;
    use crate::reconciler::ReconcilerConfig;
    use crate::record::Labels;
    use crate::store::{IdempotencyStore, Reservation};

    /// 2026-06-01T06:00:00Z.
    const T0: i64 = 1_780_293_600_000;

    /// An integration with the truck-slot path's labels whose side effect the operator's writes
    /// never call.
    struct Unreachable;

    #[async_trait]
    impl Integration for Unreachable {
        fn operation(&self) -> &str {
            "slot-claim"
        }
        fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
            Parsed::Event(Event {
                key_material: "N-1:CSQU3054383".into(),
                business_fields: serde_json::from_str(body).unwrap(),
                request: br#"{"pin":"4711"}"#.to_vec(),
                labels: Labels::from([
                    ("container".to_string(), "CSQU3054383".to_string()),
                    ("terminal".to_string(), "ECT-DELTA".to_string()),
                    (
                        "window_start".to_string(),
                        "2026-06-01T08:00:00Z".to_string(),
                    ),
                    ("window_end".to_string(), "2026-06-01T10:00:00Z".to_string()),
                ]),
                ends_at_ms: Some(1_780_308_000_000),
                subject: "CSQU3054383".into(),
            })
        }
        async fn call(&self, _held: &Held<'_>) -> CallOutcome {
            CallOutcome::Transient("not called".into())
        }
        async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
            LookupOutcome::Transient("not called".into())
        }
        fn ends_at_ms(&self, record: &IdempotencyRecord) -> Option<i64> {
            chrono::DateTime::parse_from_rfc3339(record.label("window_end"))
                .ok()
                .map(|t| t.timestamp_millis())
        }
        fn subject(&self, record: &IdempotencyRecord) -> String {
            record.label("container").to_string()
        }
    }

    struct World {
        gate: Gate,
        store: Arc<MemoryStore>,
        manual: Arc<MemoryManualQueue>,
        clock: Arc<ManualClock>,
    }

    fn world() -> World {
        let store = Arc::new(MemoryStore::new());
        let manual = Arc::new(MemoryManualQueue::new());
        let clock = Arc::new(ManualClock::new(T0));
        World {
            gate: Gate {
                config: GateConfig::new("it"),
                store: store.clone(),
                integration: Arc::new(Unreachable),
                manual: manual.clone(),
                clock: clock.clone(),
            },
            store,
            manual,
            clock,
        }
    }

    /// Reserved by `owner` at T0 with a lease until `deadline_ms`.
    async fn strand(w: &World, owner: &str, deadline_ms: i64) -> IdempotencyRecord {
        let body = r#"{"notificationId":"N-1","equipment_number":"CSQU3054383","preferred_window":{"start":"2026-06-01T08:00:00Z","end":"2026-06-01T10:00:00Z"},"terminal":"ECT-DELTA","pin":"4711"}"#;
        let Parsed::Event(n) = Unreachable.parse(body, T0) else {
            panic!("parse")
        };
        let keys = derive_keys(&n, "slot-claim").unwrap();
        let inv = Invocation {
            request_id: owner.into(),
            deadline_ms,
        };
        let record = w.gate.new_record(&n, &keys, &inv, T0);
        assert_eq!(
            w.store.reserve(&record, T0).await.unwrap(),
            Reservation::Reserved
        );
        record
    }

    fn operator(w: &World) -> Invocation {
        Invocation {
            request_id: "gatectl:alice#1".into(),
            deadline_ms: w.clock.now_ms() + OPERATOR_LEASE_MS,
        }
    }

    #[tokio::test]
    async fn a_live_lease_refuses_and_names_its_holder_and_end() {
        let w = world();
        let record = strand(&w, "inv-1#0", T0 + 120_000).await;
        w.clock.advance_ms(20_000);
        let err = w
            .gate
            .operator_finish(
                &record,
                Effect {
                    effect_id: "S-1".into(),
                    subject: None,
                },
                &operator(&w),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err,
            OperatorError::Refused(Refusal::LeaseLive {
                holder: "inv-1#0".into(),
                until: "2026-06-01T06:02:00Z".into(),
                left_s: 100,
            })
        );
        assert_eq!(w.store.get(&record.pk).await.unwrap().unwrap(), record);
    }

    #[tokio::test]
    async fn finish_commits_the_given_effect_fenced_by_the_operators_lease() {
        let w = world();
        let record = strand(&w, "inv-1#0", T0 + 1_000).await;
        w.clock.advance_ms(60_000);
        let outcome = w
            .gate
            .operator_finish(
                &record,
                Effect {
                    effect_id: "S-1".into(),
                    subject: None,
                },
                &operator(&w),
            )
            .await
            .unwrap();
        assert_eq!(
            outcome,
            RecordOutcome::Committed {
                effect_id: "S-1".into(),
                natural_key_collision: None
            }
        );
        let after = w.store.get(&record.pk).await.unwrap().unwrap();
        assert_eq!(after.status, RecordStatus::Committed);
        assert_eq!(after.lease_owner.as_deref(), Some("gatectl:alice#1"));
        assert_eq!(
            w.store
                .booking(&record.event_key)
                .await
                .unwrap()
                .unwrap()
                .effect_id,
            "S-1"
        );
        // Committed now: a second finish is refused with the status.
        let again = w
            .gate
            .operator_finish(
                &after,
                Effect {
                    effect_id: "S-2".into(),
                    subject: None,
                },
                &operator(&w),
            )
            .await
            .unwrap_err();
        assert_eq!(
            again.to_string(),
            "the record is committed, not in_flight: nothing to finish"
        );
    }

    #[tokio::test]
    async fn cancel_routes_the_claim_request_to_a_person_and_refuses_a_recorded_effect() {
        let w = world();
        let record = strand(&w, "inv-1#0", T0 + 1_000).await;
        w.clock.advance_ms(60_000);
        let outcome = w
            .gate
            .operator_cancel(&record, "cancelled by gatectl:alice: dup", &operator(&w))
            .await
            .unwrap();
        assert_eq!(outcome, RecordOutcome::Manual(ManualReason::Cancelled));
        let after = w.store.get(&record.pk).await.unwrap().unwrap();
        assert_eq!(after.status, RecordStatus::Failed);
        assert_eq!(
            after.error.as_deref(),
            Some("cancelled by gatectl:alice: dup")
        );
        assert!(after.inflight_shard.is_none() && !after.route_pending && after.request.is_empty());
        let items = w.manual.items();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].reason, ManualReason::Cancelled);
        assert_eq!(items[0].original_body.as_bytes(), record.request.as_slice());
        assert_eq!(
            items[0].event_key.as_deref(),
            Some(record.event_key.as_str())
        );

        let w = world();
        let record = strand(&w, "inv-1#0", T0 + 1_000).await;
        let with_effect = w
            .store
            .record_effect_id(&record.pk, "S-9", T0)
            .await
            .unwrap()
            .unwrap();
        w.clock.advance_ms(60_000);
        let err = w
            .gate
            .operator_cancel(&with_effect, "x", &operator(&w))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            OperatorError::Refused(Refusal::EffectRecorded {
                effect_ids: vec!["S-9".into()]
            })
        );
        assert!(w.manual.items().is_empty());
        // Nor is a finish with another effect than the recorded one.
        let err = w
            .gate
            .operator_finish(
                &with_effect,
                Effect {
                    effect_id: "S-1".into(),
                    subject: None,
                },
                &operator(&w),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the terminal returned slot id(s) [\"S-9\"] for this record, not S-1: finish it with \
             one of those (or --from-terminal)"
        );
        assert_eq!(
            w.store.get(&with_effect.pk).await.unwrap().unwrap(),
            with_effect
        );
    }

    #[tokio::test]
    async fn the_history_is_appended_to_an_existing_record_only() {
        let w = world();
        let record = strand(&w, "inv-1#0", T0 + 1_000).await;
        let entry = |n: i64| AuditEntry {
            at_ms: T0 + n,
            who: "gatectl:alice".into(),
            action: "finish".into(),
            detail: format!("line {n}"),
        };
        w.store.append_history(&record.pk, &entry(1)).await.unwrap();
        w.store.append_history(&record.pk, &entry(2)).await.unwrap();
        assert_eq!(
            w.store.history(&record.pk).await.unwrap(),
            vec![entry(1), entry(2)]
        );
        assert!(matches!(
            w.store.append_history("it#none", &entry(3)).await,
            Err(StoreError::Corrupt(_))
        ));
        assert!(w.store.history("it#none").await.unwrap().is_empty());
    }

    /// A history holds at most `MAX_HISTORY_ENTRIES` lines, each cut to its field limits, so a
    /// record's audit trail cannot grow its item past DynamoDB's limit.
    #[tokio::test]
    async fn the_history_is_bounded_in_lines_and_in_bytes() {
        let w = world();
        let record = strand(&w, "inv-1#0", T0 + 1_000).await;
        let long = AuditEntry {
            at_ms: T0,
            who: "w".repeat(500),
            action: "a".repeat(500),
            detail: "é".repeat(500),
        };
        for _ in 0..limits::MAX_HISTORY_ENTRIES {
            w.store.append_history(&record.pk, &long).await.unwrap();
        }
        assert_eq!(
            w.store.append_history(&record.pk, &long).await,
            Err(StoreError::Refused(limits::ItemRefusal::HistoryFull {
                limit: 20
            }))
        );
        let history = w.store.history(&record.pk).await.unwrap();
        assert_eq!(history.len(), 20);
        assert_eq!(history[0].who.len(), 64);
        assert_eq!(history[0].action.len(), 16);
        // 128 two-byte characters: cut at a character boundary.
        assert_eq!(history[0].detail, "é".repeat(128));
    }

    #[tokio::test]
    async fn the_next_step_says_what_the_gate_will_do() {
        let w = world();
        let config = ReconcilerConfig::default();
        let record = strand(&w, "inv-1#0", T0 + 1_000).await;
        // The lease lasts the 30 s floor; 40 s later it has expired.
        w.clock.advance_ms(40_000);
        let now = w.clock.now_ms();
        assert_eq!(
            w.gate.next_step(&record, &config, now),
            "the reconciler takes it over in 80 s (the reconciler waits until it is 120 s old), \
             sends the stored request under its Idempotency-Key and commits the answer (if the \
             first send reached the server, its replay of the first answer is the lookup: no \
             second effect)"
        );
        let live = IdempotencyRecord {
            lease_until_ms: Some(now + 5_000),
            ..record.clone()
        };
        assert_eq!(
            w.gate.next_step(&live, &config, now),
            "its holder inv-1#0 works on it until 2026-06-01T06:00:45Z"
        );
        // The gate's one horizon (23 h by default): past it, looked up, never sent.
        let old = T0 + w.gate.config.claim_horizon_ms;
        assert_eq!(
            w.gate.next_step(&record, &config, old),
            "the reconciler takes it over at its next run (every minute), looks the effect up \
             under its Idempotency-Key and commits it, never sends it again; finding none, routes \
             it to a person (past_key_retention: 23 h old, past the claim horizon of 23 h, the \
             server may have forgotten the key); if the lookup fails, routes it to a person \
             (past_key_retention: 23 h old, past the claim horizon of 23 h, the server may have \
             forgotten the key)"
        );
        // After the event's end (10:00), before the horizon: looked up; a failed lookup is
        // tried again at the next run.
        let ended = T0 + 5 * 3_600_000;
        assert_eq!(
            w.gate.next_step(&record, &config, ended),
            "the reconciler takes it over at its next run (every minute), looks the effect up \
             under its Idempotency-Key and commits it, never sends it again; finding none, routes \
             it to a person (window_ended: the event ended at 2026-06-01T10:00:00Z); if the \
             lookup fails, tries again later"
        );
    }
}
