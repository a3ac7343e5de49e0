//! SDK error mapping: what a DynamoDB error, a failed condition or a cancelled commit transaction
//! means to the store ([`StoreError`], [`Cancelled`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason};

use gate::store::StoreError;

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

/// What one item of the commit transaction is. The commit builds its items with their roles
/// side by side ([`super::commit`]), and a cancellation's reasons, which DynamoDB returns in the
/// order of the request's items (AWS, `TransactWriteItems`, `TransactionCanceledException`), are
/// read through the role of the item at the same index: never through a fixed position, so a
/// build that orders the items otherwise classifies the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemRole {
    /// The record's update (fenced by the lease).
    Record,
    /// The business row's put (`attribute_not_exists` of its key).
    Booking,
}

/// What a cancelled commit transaction means, from its `CancellationReasons` read item by item
/// ([`ItemRole`]).
#[derive(Debug)]
pub(crate) enum Cancelled {
    /// The record's condition failed: its old item (`ALL_OLD`), if the reason carries it.
    NotInFlight {
        item: Option<HashMap<String, AttributeValue>>,
    },
    /// Only the booking's condition failed: a business row exists for the event; its old item
    /// (`ALL_OLD`), if the reason carries it (its effect id is read with the store's
    /// [`gate::record::RowColumns`]).
    BookingExists(Option<HashMap<String, AttributeValue>>),
    /// Some item met a running transaction (`TransactionConflict`) and no item's condition
    /// failed on the record: nothing was written, the transaction can be sent again.
    Conflict,
    /// Throttled (one of [`THROTTLING_CODES`]).
    Throttled(String),
    /// An item was refused as invalid (`ValidationError`: e.g. over the 400 KB item limit): the
    /// same transaction is refused every time ([`StoreError::Invalid`], never retried).
    Invalid(String),
    /// Anything else (a validation error, reasons that do not match the items).
    Other(String),
}

const CONDITION_FAILED: &str = "ConditionalCheckFailed";

/// The `CancellationReason` code of an item DynamoDB refused as invalid (AWS,
/// `TransactWriteItems`: "ValidationError", e.g. an item over the size limit).
const VALIDATION_ERROR: &str = "ValidationError";

/// Classifies a cancellation of the commit transaction whose items had `roles` (in request
/// order) from its `reasons` (the same order). Precedence, whatever the order of the items:
///
/// 1. the record's `ConditionalCheckFailed`: [`Cancelled::NotInFlight`] (the record decides);
/// 2. any `TransactionConflict`: [`Cancelled::Conflict`] (a write met a running transaction;
///    nothing was written);
/// 3. any throttling code: [`Cancelled::Throttled`];
/// 4. any `ValidationError`: [`Cancelled::Invalid`] (permanent);
/// 5. the booking's `ConditionalCheckFailed`: [`Cancelled::BookingExists`];
/// 6. anything else, or not as many reasons as items: [`Cancelled::Other`].
pub(crate) fn classify_cancellation(
    roles: &[ItemRole],
    reasons: &[CancellationReason],
) -> Cancelled {
    let codes = reasons
        .iter()
        .map(|r| r.code().unwrap_or("None"))
        .collect::<Vec<_>>()
        .join(", ");
    if reasons.len() != roles.len() {
        return Cancelled::Other(format!(
            "[{codes}]: {} reasons for {} items",
            reasons.len(),
            roles.len()
        ));
    }
    let reason_of = |role: ItemRole| {
        roles
            .iter()
            .position(|r| *r == role)
            .and_then(|i| reasons.get(i))
    };
    let failed =
        |role: ItemRole| reason_of(role).is_some_and(|r| r.code() == Some(CONDITION_FAILED));
    let old_item = |role: ItemRole| reason_of(role).and_then(|r| r.item()).cloned();
    if failed(ItemRole::Record) {
        return Cancelled::NotInFlight {
            item: old_item(ItemRole::Record),
        };
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
    if reasons.iter().any(|r| r.code() == Some(VALIDATION_ERROR)) {
        return Cancelled::Invalid(codes);
    }
    if failed(ItemRole::Booking) {
        return Cancelled::BookingExists(old_item(ItemRole::Booking));
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
/// `Throttled`, `TransactionConflictException` to `TransactionConflict`, `ValidationException`
/// (an item over 400 KB, a wrong key, a refused expression: the same request is refused every
/// time) to `Invalid` (permanent, never retried),
/// everything else (service, dispatch, timeout, response errors) to `Unavailable`. A connection
/// failure after which the request may have been applied ([`super::lost_answer::is_lost_answer`])
/// says so in the text: "outcome unknown", never "nothing happened". The SDK error is kept as
/// the cause's source.
pub(crate) fn map_sdk_error<E, R>(op: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = err.code().map(str::to_string);
    let lost = if super::lost_answer::is_lost_answer(&err) {
        " (the connection failed after the request may have been sent: outcome unknown)"
    } else {
        ""
    };
    let detail = format!("{op}: {}{lost}", DisplayErrorContext(&err));
    match code.as_deref() {
        Some(c) if THROTTLING_CODES.contains(&c) => StoreError::throttled(detail, err),
        Some("TransactionConflictException") => StoreError::conflict(detail, err),
        Some(VALIDATION_EXCEPTION) => StoreError::invalid(detail, err),
        _ => StoreError::unavailable(detail, err),
    }
}

/// DynamoDB's error code for a request it refuses as invalid (AWS, DynamoDB API Reference,
/// "Common Errors": `ValidationException`, HTTP 400, "do not retry"): among others "Item size has
/// exceeded the maximum allowed size" and "The provided key element does not match the schema".
pub(crate) const VALIDATION_EXCEPTION: &str = "ValidationException";

#[cfg(test)]
mod tests {
    use super::*;

    const ROLES: [ItemRole; 2] = [ItemRole::Record, ItemRole::Booking];

    /// A service error with `code` as the SDK hands it over after its own retries.
    fn service_error(
        code: &str,
        message: &str,
    ) -> SdkError<aws_sdk_dynamodb::operation::put_item::PutItemError, ()> {
        let meta = aws_sdk_dynamodb::error::ErrorMetadata::builder()
            .code(code)
            .message(message)
            .build();
        SdkError::service_error(
            aws_sdk_dynamodb::operation::put_item::PutItemError::generic(meta),
            (),
        )
    }

    /// `ValidationException` (an item over 400 KB, a key that does not match the schema) is
    /// permanent, never "unavailable"; throttling and conflicts stay transient.
    #[test]
    fn a_validation_exception_is_permanent() {
        for message in [
            "Item size has exceeded the maximum allowed size",
            "The provided key element does not match the schema",
        ] {
            let e = map_sdk_error(
                "reserve (PutItem)",
                service_error("ValidationException", message),
            );
            assert!(
                matches!(&e, StoreError::Invalid(d) if d.message().contains(message)),
                "{e:?}"
            );
            assert!(!e.is_transient());
        }
        let throttled = map_sdk_error(
            "reserve (PutItem)",
            service_error("ProvisionedThroughputExceededException", "slow down"),
        );
        assert!(matches!(throttled, StoreError::Throttled(_)));
        assert!(throttled.is_transient());
        let conflict = map_sdk_error(
            "reserve (PutItem)",
            service_error("TransactionConflictException", "busy"),
        );
        assert!(matches!(conflict, StoreError::TransactionConflict(_)));
        let other = map_sdk_error(
            "reserve (PutItem)",
            service_error("InternalServerError", "oops"),
        );
        assert!(matches!(other, StoreError::Unavailable(_)));
        assert!(other.is_transient());
    }

    /// A reason with `code`; a refused item carries its old item (`ALL_OLD`): the record's with
    /// `pk`, the booking's with `effect_id`.
    fn reason(role: ItemRole, code: &str) -> CancellationReason {
        let b = CancellationReason::builder().code(code);
        if code != CONDITION_FAILED {
            return b.build();
        }
        let s = |v: &str| AttributeValue::S(v.to_string());
        match role {
            ItemRole::Record => b.item("pk", s("ect#ab")),
            ItemRole::Booking => b.item("effect_id", s("EFFECT-OLD")),
        }
        .build()
    }

    /// Classifies the codes given per role (record, booking) with the items in request order
    /// `order` (indexes into [`ROLES`]).
    fn classify(codes: [&str; 2], order: [usize; 2]) -> Cancelled {
        let roles: Vec<ItemRole> = order.iter().map(|i| ROLES[*i]).collect();
        let reasons: Vec<CancellationReason> =
            order.iter().map(|i| reason(ROLES[*i], codes[*i])).collect();
        classify_cancellation(&roles, &reasons)
    }

    /// A comparable summary of a classification.
    fn summary(c: &Cancelled) -> String {
        match c {
            Cancelled::NotInFlight { item } => format!("not_in_flight(item: {})", item.is_some()),
            Cancelled::BookingExists(item) => format!(
                "booking_exists({:?})",
                item.as_ref()
                    .and_then(|item| super::super::codec::row_effect_id(
                        item,
                        &gate::record::RowColumns::NEUTRAL
                    ))
            ),
            Cancelled::Conflict => "conflict".into(),
            Cancelled::Throttled(_) => "throttled".into(),
            Cancelled::Invalid(_) => "invalid".into(),
            Cancelled::Other(_) => "other".into(),
        }
    }

    const ORDERS: [[usize; 2]; 2] = [[0, 1], [1, 0]];

    /// Each condition of the commit fails alone and both together, in both orders of the items:
    /// the classification is the same in every order, and the record's refusal wins.
    #[test]
    fn each_condition_alone_and_together_classifies_by_item_in_any_order() {
        let ccf = CONDITION_FAILED;
        let cases: [([&str; 2], &str); 3] = [
            ([ccf, "None"], "not_in_flight(item: true)"),
            (["None", ccf], "booking_exists(Some(\"EFFECT-OLD\"))"),
            ([ccf, ccf], "not_in_flight(item: true)"),
        ];
        for (codes, want) in cases {
            for order in ORDERS {
                assert_eq!(
                    summary(&classify(codes, order)),
                    want,
                    "{codes:?} in {order:?}"
                );
            }
        }
    }

    /// A write that met a running transaction on any item is a conflict (retried), unless the
    /// record refused; throttling likewise.
    #[test]
    fn conflicts_and_throttling_by_item_in_any_order() {
        let ccf = CONDITION_FAILED;
        let cases: [([&str; 2], &str); 5] = [
            (["None", "TransactionConflict"], "conflict"),
            (["TransactionConflict", "None"], "conflict"),
            ([ccf, "TransactionConflict"], "not_in_flight(item: true)"),
            (["None", "ThrottlingError"], "throttled"),
            (["ThrottlingError", "None"], "throttled"),
        ];
        for (codes, want) in cases {
            for order in ORDERS {
                assert_eq!(
                    summary(&classify(codes, order)),
                    want,
                    "{codes:?} in {order:?}"
                );
            }
        }
    }

    /// Both orders spelled out; a reason list that does not match the items
    /// is not guessed at.
    #[test]
    fn two_items_and_mismatched_reason_lists() {
        let two = [ItemRole::Record, ItemRole::Booking];
        let two_reversed = [ItemRole::Booking, ItemRole::Record];
        let r = |role, code| reason(role, code);
        let c = classify_cancellation(
            &two,
            &[
                r(ItemRole::Record, "None"),
                r(ItemRole::Booking, CONDITION_FAILED),
            ],
        );
        assert_eq!(summary(&c), "booking_exists(Some(\"EFFECT-OLD\"))");
        let c = classify_cancellation(
            &two_reversed,
            &[
                r(ItemRole::Booking, CONDITION_FAILED),
                r(ItemRole::Record, "None"),
            ],
        );
        assert_eq!(summary(&c), "booking_exists(Some(\"EFFECT-OLD\"))");
        let c = classify_cancellation(
            &two_reversed,
            &[
                r(ItemRole::Booking, "None"),
                r(ItemRole::Record, CONDITION_FAILED),
            ],
        );
        assert_eq!(summary(&c), "not_in_flight(item: true)");
        let c = classify_cancellation(&two, &[r(ItemRole::Record, CONDITION_FAILED)]);
        assert_eq!(summary(&c), "other");
        let c = classify_cancellation(
            &two,
            &[
                r(ItemRole::Record, "ValidationError"),
                r(ItemRole::Booking, "None"),
            ],
        );
        assert_eq!(summary(&c), "invalid");
        let c = classify_cancellation(
            &two,
            &[
                r(ItemRole::Record, "None"),
                r(ItemRole::Booking, "SomethingNew"),
            ],
        );
        assert_eq!(summary(&c), "other");
    }
}
