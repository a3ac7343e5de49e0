//! SDK error mapping: what a DynamoDB error, a failed condition or a cancelled commit transaction
//! means to the store ([`StoreError`], [`Cancelled`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason};

use crate::store::StoreError;

/// Sleeps in **milliseconds** before each retry of a commit transaction cancelled with
/// `TransactionConflict`: at most four attempts in all, then [`StoreError::TransactionConflict`].
pub const TRANSACTION_CONFLICT_BACKOFF_MS: [u64; 3] = [20, 40, 80];

/// Error codes (service error codes and `CancellationReason` codes) that mean throttling.
pub(crate) const THROTTLING_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottlingError",
    "ProvisionedThroughputExceededException",
    "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
];

/// What a cancelled commit transaction means, from its `CancellationReasons` (item 0: the
/// record's update, item 1: the booking's put, item 2: the natural-key item's put).
pub(crate) enum Cancelled {
    NotInFlight(Option<HashMap<String, AttributeValue>>),
    BookingExists(Option<String>),
    NaturalKeyTaken(Option<HashMap<String, AttributeValue>>),
    Conflict,
    Throttled(String),
    Other(String),
}

pub(crate) fn classify_cancellation(reasons: &[CancellationReason]) -> Cancelled {
    let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
    let codes = reasons
        .iter()
        .map(|r| r.code().unwrap_or("None"))
        .collect::<Vec<_>>()
        .join(", ");
    if code(0) == "ConditionalCheckFailed" {
        return Cancelled::NotInFlight(reasons.first().and_then(|r| r.item()).cloned());
    }
    if reasons
        .iter()
        .any(|r| r.code() == Some("TransactionConflict"))
    {
        return Cancelled::Conflict;
    }
    if reasons
        .iter()
        .any(|r| r.code().is_some_and(|c| THROTTLING_CODES.contains(&c)))
    {
        return Cancelled::Throttled(codes);
    }
    if code(1) == "ConditionalCheckFailed" {
        let slot = reasons
            .get(1)
            .and_then(|r| r.item())
            .and_then(|item| item.get("slot_id"))
            .and_then(|v| v.as_s().ok())
            .cloned();
        return Cancelled::BookingExists(slot);
    }
    if code(2) == "ConditionalCheckFailed" {
        return Cancelled::NaturalKeyTaken(reasons.get(2).and_then(|r| r.item()).cloned());
    }
    Cancelled::Other(format!("[{codes}]"))
}

/// The old item a failed `UpdateItem` condition returned (`ReturnValuesOnConditionCheckFailure
/// = ALL_OLD`), if any.
pub(crate) fn condition_failure_item<R>(
    err: &SdkError<UpdateItemError, R>,
) -> Option<&HashMap<String, AttributeValue>> {
    match err.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(e)) => e.item(),
        _ => None,
    }
}

pub(crate) fn is_update_condition_failure<R>(err: &SdkError<UpdateItemError, R>) -> bool {
    matches!(
        err.as_service_error(),
        Some(UpdateItemError::ConditionalCheckFailedException(_))
    )
}

/// Maps an SDK error (after the SDK's own retries) to a [`StoreError`]: throttling codes to
/// `Throttled`, `TransactionConflictException` to `TransactionConflict`, everything else
/// (service, dispatch, timeout, response errors) to `Unavailable`.
pub(crate) fn map_sdk_error<E, R>(op: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().map(str::to_string);
    let detail = format!("{op}: {}", DisplayErrorContext(&err));
    match code.as_deref() {
        Some(c) if THROTTLING_CODES.contains(&c) => StoreError::Throttled(detail),
        Some("TransactionConflictException") => StoreError::TransactionConflict(detail),
        _ => StoreError::Unavailable(detail),
    }
}
