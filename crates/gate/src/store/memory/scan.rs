//! The memory store's operator reads ([`RecordScan`] for [`MemoryStore`]): its records filtered
//! in place, the multi-effect keys from the index it keeps on every write; it needs no [`Purge`].

use async_trait::async_trait;

use crate::record::IdempotencyRecord;
use crate::store::memory::MemoryStore;
use crate::store::records::{Purge, RecordScan};
use crate::store::StoreError;

#[async_trait]
impl RecordScan for MemoryStore {
    /// One pass over the records (ordered by `pk`), as one page: `scanned` is told the number of
    /// records read. The natural-key items live apart here, so none is ever read as a record.
    async fn scan_records(
        &self,
        label: Option<(&str, &str)>,
        scanned: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        let records = self.records();
        scanned(u64::try_from(records.len()).unwrap_or(u64::MAX));
        Ok(records
            .into_iter()
            .filter(|r| {
                label.is_none_or(|(name, value)| {
                    r.labels.get(name).map(String::as_str) == Some(value)
                })
            })
            .collect())
    }

    async fn multi_effect_pks(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.lock().index.multi_effect_pks())
    }
}

/// No purge: the memory store lives as long as its process ([`Purge`]'s default, `Ok(None)`).
impl Purge for MemoryStore {}
