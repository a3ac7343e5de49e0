//! The reserve and the guard of signal 4 as one statement ([`Statements::reserve_guard`]): a new
//! event's step 2 and its guard in one round trip, a duplicate's reserve alone in one, with the
//! outcome of [`IdempotencyStore::reserve`] followed by [`IdempotencyStore::guard`] in every case.
//!
//! The statement's reserve is the reserve's `INSERT .. ON CONFLICT (pk) DO UPDATE .. WHERE
//! <expired, nothing left to do>`; its guard is the guard's `INSERT .. ON CONFLICT DO UPDATE ..
//! WHERE <ours or expired>`, fed by the reserve's `RETURNING`, so it inserts a row only where the
//! reserve wrote one. Both commit together or not at all. Cases, beside those of the two
//! statements it is made of:
//!
//! * the reserve wrote: the guard's answer is in the same row (`held`, or the `holder`);
//! * the reserve met a live record, or an expired one with work left: [`Reservation::Conflict`];
//! * the reserve met this very reservation ([`IdempotencyRecord::is_same_reservation`]: a landed
//!   statement that lost its answer): the guard is asked again on its own and answers
//!   [`GuardOutcome::Held`] for its own row, two round trips only after a lost answer;
//! * the reserve's snapshot contradicts its outcome (a concurrent reserve): the statement again.
//!
//! [`Statements::reserve_guard`]: super::schema::Statements

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::codec::{labels_to_json, record_from_row, RecordParams};
use super::{count, first, PostgresStore, SNAPSHOT_RACE_ATTEMPTS};
use gate::clock::ms_to_s;
use gate::record::{IdempotencyRecord, NaturalKey};
use gate::store::{
    reserve_then_guard, GuardOutcome, IdempotencyStore, Reservation, ReserveAndGuard, StoreError,
};

impl PostgresStore {
    /// [`IdempotencyStore::reserve_with_guard`] with a natural key: one statement (see the
    /// module docs). A natural-key item the store refuses (its `pk` over the limits,
    /// [`gate::store::limits::guard_pk`]) is left to [`reserve_then_guard`], whose guard
    /// answers the refusal after the reserve, as the two calls would.
    pub(super) async fn reserve_and_guard(
        &self,
        record: &IdempotencyRecord,
        natural_key: &NaturalKey,
        now_ms: i64,
    ) -> Result<ReserveAndGuard, StoreError> {
        // What DynamoDB refuses, every store refuses (`gate::store::limits`).
        gate::store::limits::check_record(record).map_err(StoreError::Refused)?;
        let Ok(nk_pk) = gate::store::limits::guard_pk(record, natural_key) else {
            return reserve_then_guard(self, record, Some(natural_key), now_ms).await;
        };
        let values = RecordParams::new(record);
        let now_s = ms_to_s(now_ms);
        let labels = labels_to_json(&natural_key.labels);
        let mut params: Vec<&(dyn ToSql + Sync)> = values.params(record).to_vec();
        params.push(&now_s);
        params.push(&nk_pk);
        params.push(&labels);
        params.push(&natural_key.expires_at_s);
        for _ in 0..SNAPSHOT_RACE_ATTEMPTS {
            let rows = self
                .query("reserve_with_guard", &self.sql.reserve_guard, &params)
                .await
                .map_err(|f| Self::err("reserve_with_guard", f))?;
            let row = first(&rows, "reserve_with_guard")?;
            if count(&row, "written")? > 0 {
                let guard = self.guard_answer(&row, &nk_pk, &record.event_key).await;
                return Ok(ReserveAndGuard {
                    reservation: Reservation::Reserved,
                    guard: Some(guard),
                });
            }
            match record_from_row(&row)? {
                // A statement that landed, retried: the guard as after a landed reserve.
                Some(existing) if existing.is_same_reservation(record) => {
                    let guard = self.guard(record, natural_key, now_ms).await;
                    return Ok(ReserveAndGuard {
                        reservation: Reservation::Reserved,
                        guard: Some(guard),
                    });
                }
                // Replaceable in this snapshot, yet not replaced: a concurrent reserve won.
                Some(existing) if existing.is_expired(now_ms) && !existing.has_work() => {}
                Some(existing) => {
                    return Ok(ReserveAndGuard {
                        reservation: Reservation::Conflict(Box::new(existing)),
                        guard: None,
                    })
                }
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

    /// The guard's answer from a row of the guard's statement or of the reserve's with the
    /// guard (`held`: rows the guard wrote; `holder`: the event key holding `nk_pk` in the
    /// statement's snapshot): written, or held by `event_key`, is [`GuardOutcome::Held`];
    /// another holder is [`GuardOutcome::Collision`]. No holder in the snapshot (another event
    /// key's row committed after it): read with a new snapshot.
    pub(super) async fn guard_answer(
        &self,
        row: &Row,
        nk_pk: &str,
        event_key: &str,
    ) -> Result<GuardOutcome, StoreError> {
        if count(row, "held")? > 0 {
            return Ok(GuardOutcome::Held);
        }
        let holder: Option<String> = row
            .try_get("holder")
            .map_err(|e| StoreError::corrupt(format!("column holder: {e}"), e))?;
        let holder = match holder {
            Some(h) => Some(h),
            None => self.natural_key_holder(nk_pk).await?,
        };
        match holder {
            Some(h) if h != event_key => Ok(GuardOutcome::Collision { other_event_key: h }),
            // Ours after all (our own concurrent retry).
            Some(_) => Ok(GuardOutcome::Held),
            None => Err(StoreError::Unavailable(
                format!("guard of {nk_pk}: refused, but no row holds it").into(),
            )),
        }
    }
}
