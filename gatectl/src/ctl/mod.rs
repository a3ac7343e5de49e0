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

use std::sync::Arc;

use gate::consumer::{Gate, Invocation};
use gate::effect::LookupOutcome;
use gate::operator::{AuditEntry, OperatorError, Refusal, OPERATOR_LEASE_MS};
use gate::record::{record_pk, IdempotencyRecord};
use gate::store::{OperatorStore, StoreError};
use serde_json::Value;

use crate::error::{exit, CtlError};

use crate::targets::{StoreCall, Targets};
pub use crate::words::Query;
use crate::words::{is_event_key, View, Words};

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

/// Everything a command needs: the gate over the stack's store, queues and integration, the
/// store itself through the operator's port (scans, the audit history: DynamoDB, PostgreSQL or
/// memory alike), SQS, the integration's view and words, and who is acting.
pub struct Ctl {
    /// The gate: its store is [`Ctl::store`], its manual queue the stack's, its clock the time
    /// every age is computed at.
    pub gate: Gate,
    /// The store through the operator's port ([`OperatorStore`]): the same store as the gate's.
    pub store: Arc<dyn OperatorStore>,
    /// SQS (the manual queue, the dead-letter queue, the notification queue).
    pub sqs: aws_sdk_sqs::Client,
    /// Where everything is.
    pub targets: Targets,
    /// How the integration's records, queries and messages read, in its words.
    pub view: Arc<dyn View>,
    /// `gatectl:{user}`: the audit line's `who` and the prefix of the lease tokens taken.
    pub who: String,
    /// Whether `gate.integration` has a client of its server ([`crate::Stack::connect`]);
    /// without one, the commands that ask the server refuse.
    pub server_ready: bool,
    /// Whether to draw progress bars.
    pub progress: bool,
}

/// What a subcommand is asked to do (the parsed command line, see `crate::cli`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `show QUERY` (read by [`View::query`]).
    Show(String),
    /// `list in-flight [--older-than]` (milliseconds).
    ListInFlight {
        /// Only records older than this, **milliseconds**.
        older_than_ms: i64,
    },
    /// `list multi-effect` (truck-slot: `list multi-slot`).
    ListMultiEffect,
    /// `list manual`.
    ListManual,
    /// `list dead-letters`.
    ListDeadLetters,
    /// `lookup KEY`.
    Lookup(String),
    /// `finish KEY --effect-id ID | --from-server` (truck-slot: `--slot-id`, `--from-terminal`).
    Finish {
        /// The event key.
        key: String,
        /// The effect id given, or `None` to commit the one the server holds.
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

fn event_key_arg(key: &str) -> Result<String, CtlError> {
    let k = key.trim().to_ascii_lowercase();
    if is_event_key(&k) {
        Ok(k)
    } else {
        Err(CtlError::NotFound(format!(
            "{key:?} is not an event key (64 hex characters); `gatectl show` finds its record"
        )))
    }
}

impl Ctl {
    fn now(&self) -> i64 {
        self.gate.clock.now_ms()
    }

    fn words(&self) -> &Words {
        self.view.words()
    }

    /// A store error of `call`, naming the backend's action and resource ([`Targets::call`]).
    fn store_error(&self, e: StoreError, call: StoreCall) -> CtlError {
        let (action, resource) = self.targets.call(call);
        CtlError::store(e, &action, &resource)
    }

    /// The invocation one command writes as: the core's [`Invocation::new`] with the request id
    /// `gatectl:{user}`, so its lease token is `gatectl:{user}/{nonce}` (64 random bits, as every
    /// execution of the functions), unique per command; its deadline the operator's lease
    /// ([`OPERATOR_LEASE_MS`]) from now.
    fn invocation(&self) -> Invocation {
        Invocation::new(&self.who, self.now() + OPERATOR_LEASE_MS)
    }

    fn need_server(&self, what: &str) -> Result<(), CtlError> {
        if self.server_ready {
            Ok(())
        } else {
            let words = self.words();
            Err(CtlError::Config(format!(
                "{what} asks the {}: {}",
                words.server, words.configure_server
            )))
        }
    }

    async fn record(&self, event_key: &str) -> Result<IdempotencyRecord, CtlError> {
        let pk = record_pk(&self.targets.gate.integration, event_key);
        self.store
            .get(&pk)
            .await
            .map_err(|e| self.store_error(e, StoreCall::Get))?
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
            other => self.refusal(other, StoreCall::Get),
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
            let err = self.store_error(e, StoreCall::AppendHistory);
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
            Action::ListMultiEffect => self.list_multi_effect().await,
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
}
