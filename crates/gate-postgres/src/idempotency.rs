//! [`IdempotencyStore`] on PostgreSQL: one SQL statement per operation (one round trip once the
//! statement is prepared on its connection), so one implicit transaction under the server's
//! isolation level (READ COMMITTED by default: a concurrent write to the same row is waited for
//! and the `WHERE` re-checked on the newest version, so every fence holds):
//!
//! * reserve: `INSERT .. ON CONFLICT (pk) DO UPDATE .. WHERE <expired with nothing left to do>`,
//!   returning the record there when nothing was written (the reserve's `ALL_OLD`);
//! * commit: the fenced `UPDATE` of the record and the `INSERT` of the business row, as
//!   data-modifying CTEs of one statement: all or nothing;
//! * guard: the natural-key row's `INSERT .. ON CONFLICT DO UPDATE .. WHERE <ours or expired>`
//!   and its holder, in one statement (with the reserve, a new event's step 2: `reserve_guard.rs`);
//! * take-over, finish: the conditional `UPDATE`, and the record there when it did not apply.
//!
//! The record returned beside a write that did not apply is read from the statement's snapshot,
//! which a write committed concurrently (after the snapshot, before the conflict check) is not
//! in. When that row contradicts the outcome (it would have met the condition), the statement is
//! run again, with a new snapshot: only under such a race is an operation two round trips.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;

use crate::codec::{labels_to_json, record_from_row, RecordParams};
use crate::errors::{is_unique_violation, Failure};

use gate::clock::ms_to_s;
use gate::record::{BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus, RowColumns};
use gate::store::{
    BusinessRows, CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore,
    Reservation, ReserveAndGuard, StoreError, TakeOver,
};

use crate::connection::{count, first};
use crate::{PostgresStore, SNAPSHOT_RACE_ATTEMPTS};

/// A statement whose answer is lost (connection reset after the server committed, a failover, no
/// answer within the attempt timeout) is retried on a new connection, as are serialization
/// failures and deadlocks ([`RETRY_BACKOFF_MS`](crate::RETRY_BACKOFF_MS)); every retry
/// recognises its own landed write, as on DynamoDB: the reserve finds its own reservation (same
/// lease token), the take-over its own lease, the commit the record committed by the same holder
/// with the same effect id, the finish the record finished by the same holder; release, routed
/// and the effect-id append change nothing the second time.
#[async_trait]
impl IdempotencyStore for PostgresStore {
    /// One statement: `INSERT .. ON CONFLICT (pk) DO UPDATE .. WHERE expires_at_s < :now_s AND
    /// status <> 'in_flight' AND NOT route_pending`, returning the record there when nothing
    /// was written. That record is [`Reservation::Reserved`] when it is this very reservation
    /// (the retry of a landed reserve), else [`Reservation::Conflict`].
    async fn reserve(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Reservation, StoreError> {
        // What DynamoDB refuses, every store refuses (`gate::store::limits`).
        gate::store::limits::check_record(record).map_err(StoreError::Refused)?;
        let values = RecordParams::new(record);
        let now_s = ms_to_s(now_ms);
        let mut params: Vec<&(dyn ToSql + Sync)> = values.params(record).to_vec();
        params.push(&now_s);
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = self
                .query("reserve", &self.sql.reserve, &params)
                .await
                .map_err(|f| Self::err("reserve", f))?;
            let row = first(&rows, "reserve")?;
            if count(&row, "written")? > 0 {
                return Ok(Reservation::Reserved);
            }
            match record_from_row(&row)? {
                Some(existing) if existing.is_same_reservation(record) => {
                    return Ok(Reservation::Reserved)
                }
                // Replaceable in this snapshot, yet not replaced: a concurrent reserve won.
                Some(existing) if existing.is_expired(now_ms) && !existing.has_work() => {}
                Some(existing) => return Ok(Reservation::Conflict(Box::new(existing))),
                // Inserted by a concurrent reserve after this statement's snapshot.
                None => {}
            }
        }
        Err(StoreError::Unavailable(
            format!(
                "reserve of {}: the record changed under {SNAPSHOT_RACE_ATTEMPTS} attempts",
                record.pk
            )
            .into(),
        ))
    }

    /// With a natural key: the reserve and, where it wrote, the guard as one statement
    /// (`reserve_guard.rs`): a new event's step 2 and guard in one round trip, a duplicate in
    /// one. Without: the reserve alone.
    async fn reserve_with_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: Option<&NaturalKey>,
        now_ms: i64,
    ) -> Result<ReserveAndGuard, StoreError> {
        match natural_key {
            Some(key) => self.reserve_and_guard(record, key, now_ms).await,
            None => Ok(ReserveAndGuard {
                reservation: self.reserve(record, now_ms).await?,
                guard: None,
            }),
        }
    }

    /// One conditional `UPDATE` (`(status = 'in_flight' OR route_pending) AND lease_owner =
    /// :old AND (lease_until_ms IS NULL OR lease_until_ms < :now)`), returning the record as it
    /// is now, or as it is when the update did not apply: [`TakeOver::Taken`] if it already
    /// carries our lease (a retry of a landed take-over), else [`TakeOver::Refused`].
    async fn take_over(
        &self,
        pk: &str,
        old_owner: &str,
        new_owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        let rows = self
            .query(
                "take_over",
                &self.sql.take_over,
                &[&pk, &old_owner, &new_owner, &lease_until_ms, &now_ms],
            )
            .await
            .map_err(|f| Self::err("take_over", f))?;
        let Some(row) = rows.first() else {
            return Ok(TakeOver::Refused);
        };
        let taken: bool = row
            .try_get("taken")
            .map_err(|e| StoreError::corrupt(format!("column taken: {e}"), e))?;
        let Some(record) = record_from_row(row)? else {
            return Ok(TakeOver::Refused);
        };
        let ours = record.has_work()
            && record.lease_owner.as_deref() == Some(new_owner)
            && record.lease_until_ms == Some(lease_until_ms);
        Ok(if taken || ours {
            TakeOver::Taken(Box::new(record))
        } else {
            TakeOver::Refused
        })
    }

    /// One statement, one transaction: the record's fenced `UPDATE` (`status = 'in_flight' AND
    /// lease_owner = :owner`) and the business row's `INSERT`. A business row that outlived its
    /// record aborts the whole statement (a unique violation): [`StoreError::Corrupt`], nothing
    /// written. When the update did not apply: the record committed by `owner` with `effect_id`
    /// is [`CommitOutcome::Committed`] (the retry of a landed commit), no record is
    /// [`StoreError::Corrupt`], anything else [`CommitOutcome::Refused`].
    async fn commit(
        &self,
        pk: &str,
        owner: &str,
        effect_id: &str,
        booking: &BusinessRow,
        now_ms: i64,
    ) -> Result<CommitOutcome, StoreError> {
        // The fixed `business_rows` columns hold no label, but the store refuses what DynamoDB
        // built with the neutral names refuses (the consumer's pre-check reads the same names:
        // `IdempotencyStore::row_columns`: the neutral names).
        gate::store::limits::check_row(booking, &self.row_columns())
            .map_err(StoreError::Refused)?;
        let row_labels = labels_to_json(&booking.labels);
        let params: [&(dyn ToSql + Sync); 7] = [
            &pk,
            &owner,
            &effect_id,
            &now_ms,
            &booking.source_event,
            &row_labels,
            &booking.written_at_ms,
        ];
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = match self.query("commit", &self.sql.commit, &params).await {
                Ok(rows) => rows,
                Err(Failure::Db(e)) if is_unique_violation(&e, "business_rows_pkey") => {
                    let existing = self.business_row(&booking.source_event).await?;
                    return Err(StoreError::Corrupt(
                        format!(
                            "a business row for {} already exists with effect id {}",
                            booking.source_event,
                            existing.map_or_else(|| "?".to_string(), |b| b.effect_id)
                        )
                        .into(),
                    ));
                }
                Err(f) => return Err(Self::err("commit", f)),
            };
            let row = first(&rows, "commit")?;
            if count(&row, "committed")? > 0 {
                return Ok(CommitOutcome::Committed);
            }
            let Some(record) = record_from_row(&row)? else {
                match self.get(pk).await? {
                    Some(_) => continue,
                    None => {
                        return Err(StoreError::Corrupt(
                            format!("no record {pk} to commit").into(),
                        ))
                    }
                }
            };
            if record.status == RecordStatus::Committed
                && record.lease_owner.as_deref() == Some(owner)
                && record.effect_id.as_deref() == Some(effect_id)
            {
                return Ok(CommitOutcome::Committed);
            }
            if record.status == RecordStatus::InFlight
                && record.lease_owner.as_deref() == Some(owner)
            {
                // The fence held on this snapshot: the record changed after it. Again.
                continue;
            }
            return Ok(CommitOutcome::Refused(Box::new(record)));
        }
        Err(StoreError::Unavailable(
            format!("commit of {pk}: the record changed under {SNAPSHOT_RACE_ATTEMPTS} attempts")
                .into(),
        ))
    }

    /// One statement: the natural-key row's `INSERT .. ON CONFLICT DO UPDATE` written when
    /// absent, held by `event_key` or expired (`expires_at_s < now`, epoch seconds); otherwise
    /// the holder, read in the same statement (or, when another event key's row was committed
    /// after the statement's snapshot, by a new one).
    async fn guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<GuardOutcome, StoreError> {
        let event_key = record.event_key.as_str();
        let nk_pk =
            gate::store::limits::guard_pk(record, natural_key).map_err(StoreError::Refused)?;
        let labels = labels_to_json(&natural_key.labels);
        let now_s = ms_to_s(now_ms);
        let params: [&(dyn ToSql + Sync); 5] = [
            &nk_pk,
            &event_key,
            &labels,
            &natural_key.expires_at_s,
            &now_s,
        ];
        let rows = self
            .query("guard", &self.sql.guard, &params)
            .await
            .map_err(|f| Self::err("guard", f))?;
        let row = first(&rows, "guard")?;
        self.guard_answer(&row, &nk_pk, event_key).await
    }

    /// One conditional `UPDATE` setting `lease_until_ms = 0` on `(status = 'in_flight' OR
    /// route_pending) AND lease_owner = :owner`; a record that does not match is left alone.
    async fn release_lease(&self, pk: &str, owner: &str, now_ms: i64) -> Result<(), StoreError> {
        self.query("release_lease", &self.sql.release, &[&pk, &owner, &now_ms])
            .await
            .map_err(|f| Self::err("release_lease", f))?;
        Ok(())
    }

    /// One conditional `UPDATE` setting `lease_until_ms` on `status = 'in_flight' AND
    /// lease_owner = :owner` (the commit's fence) and a lease not released (`lease_until_ms IS
    /// DISTINCT FROM 0`: a NULL lease is not a released one); `Ok(false)` when it did not apply.
    /// A retry of
    /// an extension that landed meets the same condition and writes the same values.
    async fn extend_lease(
        &self,
        pk: &str,
        owner: &str,
        lease_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let rows = self
            .query(
                "extend_lease",
                &self.sql.extend,
                &[&pk, &owner, &lease_until_ms, &now_ms],
            )
            .await
            .map_err(|f| Self::err("extend_lease", f))?;
        Ok(!rows.is_empty())
    }

    /// One conditional `UPDATE` on `status = 'in_flight' AND lease_owner = :owner` (and no
    /// effect id for [`FinishGuard::LeaseAndNoEffect`]), returning the record there when it did
    /// not apply: finished by `owner` as `status` with its routing pending is
    /// [`FinishOutcome::Finished`] (a retry of a landed finish), else
    /// [`FinishOutcome::Refused`].
    async fn finish(
        &self,
        pk: &str,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        guard: FinishGuard,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        let no_effect = guard == FinishGuard::LeaseAndNoEffect;
        let status_text = status.as_str();
        let params: [&(dyn ToSql + Sync); 7] = [
            &pk,
            &owner,
            &status_text,
            &error,
            &item,
            &now_ms,
            &no_effect,
        ];
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = self
                .query("finish", &self.sql.finish, &params)
                .await
                .map_err(|f| Self::err("finish", f))?;
            let row = first(&rows, "finish")?;
            if count(&row, "finished")? > 0 {
                return Ok(FinishOutcome::Finished);
            }
            let Some(record) = record_from_row(&row)? else {
                return Ok(FinishOutcome::Refused(None));
            };
            let held = record.status == RecordStatus::InFlight
                && record.lease_owner.as_deref() == Some(owner);
            if record.status == status
                && record.route_pending
                && record.lease_owner.as_deref() == Some(owner)
            {
                return Ok(FinishOutcome::Finished);
            }
            let guarded = !no_effect || record.effect_ids.is_empty();
            if held && guarded {
                // The condition held on this snapshot: the record changed after it. Again.
                continue;
            }
            return Ok(FinishOutcome::Refused(Some(Box::new(record))));
        }
        Err(StoreError::Unavailable(
            format!("finish of {pk}: the record changed under {SNAPSHOT_RACE_ATTEMPTS} attempts")
                .into(),
        ))
    }

    /// One statement: the finish and the natural key's release (`release.rs`).
    async fn finish_without_effect(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        status: RecordStatus,
        error: &str,
        item: &[u8],
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<FinishOutcome, StoreError> {
        self.finish_releasing(record, owner, status, error, item, natural_key, now_ms)
            .await
    }

    /// One conditional `UPDATE` on `route_pending AND lease_owner = :owner`, clearing the mark,
    /// the manual item, the lease and the in-flight shard; `Ok(false)` when it did not apply.
    async fn routed(&self, pk: &str, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        let rows = self
            .query("routed", &self.sql.routed, &[&pk, &owner, &now_ms])
            .await
            .map_err(|f| Self::err("routed", f))?;
        Ok(!rows.is_empty())
    }

    /// One `UPDATE` appending `effect_id` to `effect_ids` unless present (a record with two or more
    /// is in the partial index `idempotency_multi_effect`), returning the record after it.
    async fn record_effect_id(
        &self,
        pk: &str,
        effect_id: &str,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let rows = self
            .query(
                "record_effect_id",
                &self.sql.record_effect_id,
                &[&pk, &effect_id, &now_ms],
            )
            .await
            .map_err(|f| Self::err("record_effect_id", f))?;
        match rows.first() {
            Some(row) => record_from_row(row),
            None => Ok(None),
        }
    }

    /// One `SELECT` by primary key.
    async fn get(&self, pk: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let rows = self
            .query("get", &self.sql.get, &[&pk])
            .await
            .map_err(|f| Self::err("get", f))?;
        match rows.first() {
            Some(row) => record_from_row(row),
            None => Ok(None),
        }
    }

    /// [`RowColumns::NEUTRAL`]: `business_rows` has fixed columns (`source_event`, `effect_id`,
    /// `booked_at_ms`, the labels in one JSON column) whatever the integration names, so its
    /// labels are refused under the neutral names, as the memory store built by default refuses
    /// them.
    fn row_columns(&self) -> RowColumns {
        RowColumns::NEUTRAL
    }
}
