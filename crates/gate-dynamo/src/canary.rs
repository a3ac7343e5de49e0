//! The cold-start check that the backend honours conditional writes.
//!
//! Every guarantee of the gate rests on conditional writes being refused when their condition
//! fails. A store layer that silently drops the condition (an option ignored, a wrapper that
//! rebuilds the request without it: aws-powertools/powertools-lambda-typescript#5716) turns every
//! write unconditional with no error anywhere: the gate would then claim twice. So a function
//! checks at cold start, before it consumes anything: two conditional `PutItem`s on one canary
//! key; the second must be refused.

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::codec::{num, s};
use super::errors::map_sdk_error;
use super::DynamoStore;
use gate::clock::ms_to_s;
use gate::store::StoreError;

/// The `pk` prefix of the canary items in the idempotency table: `"gate#canary#{nonce}"`. No
/// record's `pk` can take this shape (a record's is `"{integration}#{64 hex}"`), the items carry
/// no `inflight_shard` (never in the `InFlight` index), and they expire one hour after they are
/// written (`expires_at`, epoch seconds) and are deleted at the end of the check.
pub const CANARY_PK_PREFIX: &str = "gate#canary#";

/// How long a canary item lives if its deletion fails, **seconds**.
const CANARY_TTL_S: i64 = 3_600;

/// Why [`DynamoStore::verify_conditional_writes`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionalWritesError {
    /// The second conditional `PutItem` on the canary key was not refused: the backend (or a
    /// layer in front of it) ignores conditions. The function must not consume anything.
    #[error(
        "conditional writes are not honoured: a second PutItem on canary key {canary_pk} with \
         condition attribute_not_exists(pk) succeeded; every reserve, commit and lease would be \
         unconditional, so this function refuses to start"
    )]
    Ignored {
        /// The canary item's `pk`.
        canary_pk: String,
    },
    /// The check could not run (the store failed); the function cannot know, so it does not
    /// start either.
    #[error("the conditional-write check could not run: {0}")]
    Store(#[from] StoreError),
}

impl DynamoStore {
    /// The cold-start check (call it once per cold start, before consuming, unless disabled):
    /// two `PutItem`s on the canary key `"{CANARY_PK_PREFIX}{nonce}"`, each with condition
    /// `attribute_not_exists(pk)`. The first writes the canary (its SDK retry meeting its own
    /// item counts as written: the item carries `nonce`); the second must be refused with
    /// `ConditionalCheckFailedException`. The canary is then deleted (best effort; it expires
    /// after one hour anyway). Two or three requests.
    ///
    /// `nonce` must be unique per cold start (e.g. the Lambda init's request id or a random
    /// value): concurrent cold starts must not share a canary. `now_ms` is epoch milliseconds.
    ///
    /// # Errors
    /// [`ConditionalWritesError::Ignored`] when the second write succeeded;
    /// [`ConditionalWritesError::Store`] when a write failed otherwise.
    pub async fn verify_conditional_writes(
        &self,
        nonce: &str,
        now_ms: i64,
    ) -> Result<(), ConditionalWritesError> {
        let canary_pk = format!("{CANARY_PK_PREFIX}{nonce}");
        let put = |write: &str| {
            self.client
                .put_item()
                .table_name(&self.idempotency_table)
                .item("pk", s(&canary_pk))
                .item("canary", s(nonce))
                .item("write", s(write))
                .item("expires_at", num(ms_to_s(now_ms) + CANARY_TTL_S))
                .condition_expression("attribute_not_exists(pk)")
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
        };
        match put("first").await {
            Ok(_) => {}
            Err(err) => match err.as_service_error() {
                // Our own first write, met by the SDK's retry of it: written.
                Some(PutItemError::ConditionalCheckFailedException(e))
                    if e.item()
                        .and_then(|i| i.get("canary"))
                        .and_then(|v| v.as_s().ok())
                        .is_some_and(|v| v == nonce) => {}
                // Someone else's item under this key: a refusal, so conditions are honoured;
                // but the nonce was not unique, which the caller must hear.
                Some(PutItemError::ConditionalCheckFailedException(_)) => {
                    return Err(ConditionalWritesError::Store(StoreError::Unavailable(
                        format!(
                            "canary key {canary_pk} already holds another check's item: the nonce \
                         must be unique per cold start"
                        )
                        .into(),
                    )))
                }
                _ => return Err(map_sdk_error("canary (PutItem)", err).into()),
            },
        }
        let second = put("second").await;
        let refused = match second {
            Ok(_) => false,
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(_)) => true,
                _ => return Err(map_sdk_error("canary (PutItem)", err).into()),
            },
        };
        // Best effort: the item expires within the hour anyway.
        let _ = self
            .client
            .delete_item()
            .table_name(&self.idempotency_table)
            .key("pk", s(&canary_pk))
            .send()
            .await;
        if refused {
            Ok(())
        } else {
            Err(ConditionalWritesError::Ignored { canary_pk })
        }
    }
}
