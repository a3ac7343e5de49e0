//! A commit whose outcome is unknown: its answer was lost (a timeout, a 5xx after the write, a
//! dropped connection), or DynamoDB refused a retry that was built again with
//! `IdempotentParameterMismatchException` (the same `ClientRequestToken` with other parameters
//! within 10 minutes: AWS, `TransactWriteItems`, "ClientRequestToken"). Neither says whether
//! the first request committed. One consistent read of the record does: a commit recognises
//! itself by its holder and its effect id, as every conditional write of the gate does.
//!
//! Used by the DynamoDB adapter and by the simulation's store decorator, so both settle an
//! unknown commit the same way.

use crate::record::IdempotencyRecord;
use crate::store::{IdempotencyStore, StoreError};

/// What one consistent read says of a commit whose outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownCommit {
    /// The record is committed by this holder with this effect id
    /// ([`IdempotencyRecord::is_committed_by`]): the commit landed.
    Ours,
    /// The record is still `in_flight` under this holder's lease: the commit has not landed (it
    /// may still land if its request is still travelling).
    StillHeld,
    /// The record is in any other state (committed by another holder or with another effect id,
    /// `failed`, `manual`, `in_flight` under another lease): this commit cannot land any more.
    Refused(Box<IdempotencyRecord>),
}

/// Settles a commit of `pk` by `owner` with `effect_id` whose outcome is unknown: one consistent
/// read ([`IdempotencyStore::get`]).
///
/// # Errors
/// The read's [`StoreError`]; [`StoreError::Corrupt`] when there is no record at all (a commit
/// needs its record; the commit path answers the same).
pub async fn settle_unknown_commit<S: IdempotencyStore + ?Sized>(
    store: &S,
    pk: &str,
    owner: &str,
    effect_id: &str,
) -> Result<UnknownCommit, StoreError> {
    let Some(record) = store.get(pk).await? else {
        return Err(StoreError::Corrupt(
            format!("no record {pk} to commit").into(),
        ));
    };
    Ok(if record.is_committed_by(owner, effect_id) {
        UnknownCommit::Ours
    } else if record.status == crate::record::RecordStatus::InFlight
        && record.lease_owner.as_deref() == Some(owner)
    {
        UnknownCommit::StillHeld
    } else {
        UnknownCommit::Refused(Box::new(record))
    })
}
