//! The memory store's audit histories ([`AuditLog`] for [`MemoryStore`]), by `pk`.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::store::audit::{AuditEntry, AuditLog};
use crate::store::memory::MemoryStore;
use crate::store::{limits, StoreError};

#[async_trait]
impl AuditLog for MemoryStore {
    async fn append_history(&self, pk: &str, entry: &AuditEntry) -> Result<(), StoreError> {
        if !self.has_record(pk) {
            return Err(StoreError::Corrupt(
                format!("no record {pk} to audit").into(),
            ));
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
