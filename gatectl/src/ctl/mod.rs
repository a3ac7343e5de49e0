//! The subcommands, over the gate's own ports: every write goes through [`gate::operator`] and
//! the reconciler (the store's fenced, conditional writes), never a hand-written item.

mod confirm;
mod finish;
mod lists;
mod lookup;
mod queues;
mod reconcile;
mod redrive;
mod show;

use confirm::approve;
pub use confirm::{Confirm, Prompt, Yes};
pub use redrive::event_key_of_body;

use std::sync::Arc;

use async_trait::async_trait;
use gate::consumer::{Gate, Invocation};
use gate::operator::{AuditEntry, AuditLog, OperatorError, Refusal, OPERATOR_LEASE_MS};
use gate::record::{record_pk, IdempotencyRecord};
use gate::store::dynamo::DynamoStore;
use gate::store::IdempotencyStore;
use serde_json::Value;
use truck_slot::iso6346::EquipmentNumber;
use truck_slot::terminal::{ClaimOutcome, LookupOutcome, SlotTerminal};

use crate::error::{exit, CtlError};

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

/// A terminal that is not configured: every call is transient with that reason. Commands that
/// need the terminal check [`Ctl::terminal_ready`] first, so this only answers if one forgot.
pub struct NoTerminal;

#[async_trait]
impl SlotTerminal for NoTerminal {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> ClaimOutcome {
        ClaimOutcome::Transient("no terminal configured (TERMINAL_BASE_URL or TERMINALS)".into())
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
        slot_id: Option<String>,
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
            Action::Finish { key, slot_id } => {
                self.finish(key, slot_id.as_deref(), dry_run, confirm).await
            }
            Action::Cancel { key, reason } => self.cancel(key, reason, dry_run, confirm).await,
            Action::Reconcile(Some(key)) => self.reconcile_one(key, dry_run, confirm).await,
            Action::Reconcile(None) => self.reconcile_all(dry_run, confirm).await,
            Action::Redrive => self.redrive(dry_run, confirm).await,
        }
    }
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
