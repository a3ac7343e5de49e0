//! A record's audit history, the port ([`AuditLog`]) and its line ([`AuditEntry`]): who did what,
//! when, by an operator's command (gatectl). Its adapters are beside the stores: the memory store
//! keeps the histories by `pk` (`memory/audit.rs`), DynamoDB as the list attribute `history` of
//! the record's item (`dynamo/audit.rs`).

use async_trait::async_trait;

use crate::store::StoreError;

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

/// A record's audit history (the `history` attribute of its item).
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Appends `entry` to the history of record `pk`. Refused with [`StoreError::Corrupt`] when
    /// there is no such record (the history never creates an item).
    async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError>;

    /// The history of record `pk`, oldest first; empty when it has none (or no record).
    async fn history(&self, pk: &str) -> Result<Vec<AuditEntry>, StoreError>;
}
