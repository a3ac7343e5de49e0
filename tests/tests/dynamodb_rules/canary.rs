//! Item 8: a store that silently stops being conditional. At cold start the function runs
//! `DynamoStore::verify_conditional_writes`: two conditional `PutItem`s on a canary key; the
//! second must be refused, else the function must not start; the wiring (`gate_lambda::
//! build_store`) runs it unless `VERIFY_CONDITIONAL_WRITES=false`.

use aws_sdk_dynamodb::types::AttributeValue;
use gate_dynamo::{ConditionalWritesError, CANARY_PK_PREFIX};
use gate_lambda::store::build_store;
use gate_lambda::StoreConfig;
use integration_tests::fault_proxy::{store_via_with, Fault, FaultProxy};
use integration_tests::field_cases::T0;
use integration_tests::{dynamo_client, fresh_tables, moto_endpoint, sdk_config};

const CCF: &str = "ConditionalCheckFailedException";

/// moto honours conditions: the check passes, the second write was refused, the canary is gone.
#[tokio::test]
async fn the_check_passes_where_conditions_are_honoured() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = store_via_with(&endpoint, "canary-ok", 4).await;
    store
        .verify_conditional_writes("cold-start-1", T0)
        .await
        .expect("conditions honoured");
    assert_eq!(proxy.answers("PutItem"), [Ok(200), Err(CCF.to_string())]);
    let item = store
        .client()
        .get_item()
        .table_name(store.idempotency_table())
        .key(
            "pk",
            AttributeValue::S(format!("{CANARY_PK_PREFIX}cold-start-1")),
        )
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item()
        .cloned();
    assert_eq!(item, None, "the canary is deleted");
}

/// A layer that drops every `PutItem`'s condition: the second write succeeds and the check fails
/// with a clear error naming the canary key.
#[tokio::test]
async fn the_check_fails_where_conditions_are_dropped() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = store_via_with(&endpoint, "canary-dropped", 4).await;
    proxy.strip_conditions(true);
    let err = store
        .verify_conditional_writes("cold-start-2", T0)
        .await
        .expect_err("conditions are dropped");
    assert_eq!(
        err,
        ConditionalWritesError::Ignored {
            canary_pk: format!("{CANARY_PK_PREFIX}cold-start-2")
        }
    );
    assert!(
        err.to_string()
            .contains("conditional writes are not honoured"),
        "{err}"
    );
    assert_eq!(proxy.answers("PutItem"), [Ok(200), Ok(200)]);
}

/// The first write lands and its answer is lost: the SDK's retry meets the canary it wrote
/// (refused, with our nonce in the old item), which counts as written; the second is refused.
#[tokio::test]
async fn the_check_recognises_its_own_retried_write() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = store_via_with(&endpoint, "canary-retried", 4).await;
    proxy.inject("PutItem", 1, Fault::LoseAnswer);
    store
        .verify_conditional_writes("cold-start-3", T0)
        .await
        .expect("conditions honoured");
    assert_eq!(
        proxy.answers("PutItem"),
        [
            Err("InternalServerError".to_string()),
            Err(CCF.to_string()),
            Err(CCF.to_string())
        ]
    );
}

/// The store as the consumer and the reconciler build it at cold start (`gate_lambda::
/// build_store`), with the SDK configuration pointed at the proxy in front of moto.
async fn build_via(
    endpoint: &str,
    name: &str,
    verify_conditional_writes: bool,
) -> Result<gate_lambda::store::Stores, gate_lambda::Error> {
    let (idempotency_table, business_table) = fresh_tables(&dynamo_client().await, name).await;
    let aws = sdk_config()
        .await
        .into_builder()
        .endpoint_url(endpoint)
        .build();
    let config = StoreConfig::DynamoDb {
        idempotency_table,
        business_table,
        verify_conditional_writes,
    };
    build_store(&config, &aws, gate::record::RowColumns::NEUTRAL, &[]).await
}

/// The wiring: where conditions are dropped the start fails, naming the variable and the
/// problem; the two canary writes were both accepted.
#[tokio::test]
async fn the_wiring_refuses_to_start_where_conditions_are_dropped() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    proxy.strip_conditions(true);
    let err = build_via(&endpoint, "canary-wiring-dropped", true)
        .await
        .err()
        .expect("the start must fail");
    let message = err.to_string();
    assert!(
        message.starts_with(
            "VERIFY_CONDITIONAL_WRITES: conditional writes are not honoured: a second PutItem \
             on canary key gate#canary#"
        ),
        "{message}"
    );
    assert_eq!(proxy.answers("PutItem"), [Ok(200), Ok(200)]);
}

/// The wiring where conditions are honoured: the store is built after one canary write and one
/// refusal, and again at the next cold start (the canary of the first was deleted).
#[tokio::test]
async fn the_wiring_starts_where_conditions_are_honoured() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    build_via(&endpoint, "canary-wiring-ok", true)
        .await
        .expect("conditions honoured");
    build_via(&endpoint, "canary-wiring-ok2", true)
        .await
        .expect("conditions honoured");
    assert_eq!(
        proxy.answers("PutItem"),
        [Ok(200), Err(CCF.to_string()), Ok(200), Err(CCF.to_string())]
    );
}

/// `VERIFY_CONDITIONAL_WRITES=false`: no canary write at all, even where conditions are dropped.
#[tokio::test]
async fn the_wiring_skips_the_check_when_disabled() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    proxy.strip_conditions(true);
    build_via(&endpoint, "canary-wiring-off", false)
        .await
        .expect("no check");
    assert_eq!(proxy.count("PutItem"), 0);
}
