//! The finish of a record that ends without an effect, releasing its natural key in the same
//! statement ([`IdempotencyStore::finish_without_effect`], [`Statements::finish_release`]): the
//! finish's `UPDATE` fenced by the lease, and the natural-key row's `expires_at_s` moved to the
//! second before now, only where the finish wrote a record holding no effect id and the row names
//! its event key. Both commit together or not at all; the purge deletes the row once expired.
//!
//! [`Statements::finish_release`]: super::schema::Statements

use tokio_postgres::types::ToSql;

use super::codec::record_from_row;
use super::{count, first, PostgresStore, SNAPSHOT_RACE_ATTEMPTS};
use gate::clock::ms_to_s;
use gate::record::{IdempotencyRecord, NaturalKey, RecordStatus};
use gate::store::{FinishGuard, FinishOutcome, IdempotencyStore, StoreError};

impl PostgresStore {
    /// [`IdempotencyStore::finish_without_effect`] on PostgreSQL: see the module docs. The
    /// answer is read as the finish's: a record finished by `owner` as `status` (the retry of a
    /// statement that landed, on a fresh connection) is [`FinishOutcome::Finished`]; a record
    /// still held in this statement's snapshot is a race with a concurrent write: again.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish_releasing(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        let pk = record.pk.as_str();
        // A key the store refuses was never stored: nothing to release.
        let Ok(nk_pk) = gate::store::limits::guard_pk(record, natural_key) else {
            return self
                .finish(pk, owner, status, error, item, FinishGuard::Lease, now_ms)
                .await;
        };
        let status_text = status.as_str();
        let released_s = ms_to_s(now_ms) - 1;
        let params: [&(dyn ToSql + Sync); 9] = [
            &pk,
            &owner,
            &status_text,
            &error,
            &item,
            &now_ms,
            &nk_pk,
            &record.event_key,
            &released_s,
        ];
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = self
                .query("finish_release", &self.sql.finish_release, &params)
                .await
                .map_err(|f| Self::err("finish_release", f))?;
            let row = first(&rows, "finish_release")?;
            if count(&row, "finished")? > 0 {
                return Ok(FinishOutcome::Finished);
            }
            let Some(current) = record_from_row(&row)? else {
                return Ok(FinishOutcome::Refused(None));
            };
            let ours = current.lease_owner.as_deref() == Some(owner);
            if current.status == status && current.route_pending && ours {
                return Ok(FinishOutcome::Finished);
            }
            if current.status == RecordStatus::InFlight && ours {
                // The condition held on this snapshot: the record changed after it. Again.
                continue;
            }
            return Ok(FinishOutcome::Refused(Some(Box::new(current))));
        }
        Err(StoreError::Unavailable(
            format!("finish of {pk}: the record changed under {SNAPSHOT_RACE_ATTEMPTS} attempts")
                .into(),
        ))
    }
}
