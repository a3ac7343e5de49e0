//! A record's audit history, the port ([`AuditLog`]) and its line ([`AuditEntry`]): who did what,
//! when, by an operator's command (gatectl). Its adapters are beside the stores: the memory store
//! keeps the histories by `pk` (`memory/audit.rs`), DynamoDB as the list attribute `history` of
//! the record's item (`dynamo/audit.rs`).

use async_trait::async_trait;

use crate::store::{limits, StoreError};

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

/// The size, bytes, of an audit `history` list attribute of `entries` as DynamoDB counts it: the
/// name, 3 bytes for the list plus 1 per element, and each element a map of 3 bytes plus 1 per
/// member (`at` a number, and the strings `who`, `action`, `detail`)
/// with its members' names and values (AWS, DynamoDB Developer Guide, "Item sizes and formats").
/// Here, beside the line it measures, so that the limits read nothing of the audit log.
pub fn history_bytes(entries: &[AuditEntry]) -> usize {
    if entries.is_empty() {
        return 0;
    }
    let entry = |e: &AuditEntry| {
        3 + 4
            + limits::n("at", e.at_ms)
            + limits::s("who", &e.who)
            + limits::s("action", &e.action)
            + limits::s("detail", &e.detail)
    };
    "history".len() + 3 + entries.len() + entries.iter().map(entry).sum::<usize>()
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

#[cfg(test)]
mod tests {
    /// The arrow between the audit log and the limits goes one way: the audit line is bounded by
    /// the limits, and the limits name nothing of the audit log (no import loop).
    #[test]
    fn the_limits_read_nothing_of_the_audit_log() {
        let limits = include_str!("limits.rs");
        assert!(
            !limits.contains("audit::"),
            "limits.rs refers to the audit log"
        );
    }
}
