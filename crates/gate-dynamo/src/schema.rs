//! The DynamoDB schema of the store: table keys, the sparse indexes (`InFlight`, [`MULTI_EFFECT_INDEX`]),
//! the marks a record carries, the condition expressions of the conditional writes, and
//! [`create_tables`] (the tables as `template.yaml` defines them, for tests and local runs).

use std::time::Duration;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_dynamodb::Client;

use super::errors::map_sdk_error;
use gate::record::RowColumns;
use gate::store::StoreError;

/// The name of the sparse GSI over `in_flight` records: partition key `inflight_shard`, sort key
/// `created_at` (epoch ms), projection `INCLUDE` [`INFLIGHT_PROJECTED_ATTRIBUTES`].
pub const INFLIGHT_INDEX: &str = "InFlight";

/// The non-key attributes the `InFlight` index projects (`ProjectionType: INCLUDE`; the keys `pk`,
/// `inflight_shard` and `created_at` come with every index item): what an
/// [`gate::store::InFlightEntry`] needs and nothing more. Not `request` (the request body, which
/// may hold secrets), not the business fields: the metrics function queries this index, and a role
/// that may read the index reads everything it projects. `template.yaml` lists the same names (a
/// test compares them).
pub const INFLIGHT_PROJECTED_ATTRIBUTES: [&str; 5] = [
    "event_key",
    "status",
    "lease_owner",
    "lease_until",
    "expires_at",
];

/// The record's effect id attribute (S): the effect id committed.
pub const EFFECT_ID: &str = "effect_id";

/// The record's effect ids attribute (SS): every distinct effect id the server returned for the
/// record (two or more is the distinct-effect-ids signal).
pub const EFFECT_IDS: &str = "effect_ids";

/// The legacy name of [`EFFECT_ID`], which items in the legacy layout hold. Read when [`EFFECT_ID`] is absent, never written (a commit removes it).
pub const LEGACY_EFFECT_ID: &str = "slot_id";

/// The legacy name of [`EFFECT_IDS`], which items in the legacy layout hold. Read as part of the record's ids (the union with [`EFFECT_IDS`]), never
/// written; every condition that asks for "no id recorded" asks it of both names.
pub const LEGACY_EFFECT_IDS: &str = "slot_ids";

/// The attribute marking a record that holds two or more distinct effect ids: the partition key
/// of [`MULTI_EFFECT_INDEX`] (present, [`MULTI_EFFECT_MARK`], only on such records). Its stored
/// name is the deployed one: renaming a GSI's key is a delete and a create of the index
/// (docs/DEPLOYING.md, "Stored names").
pub const MULTI_EFFECT_ATTRIBUTE: &str = "multi_slot";

/// The sparse GSI of records holding two or more distinct effect ids: partition key
/// [`MULTI_EFFECT_ATTRIBUTE`], projection `KEYS_ONLY`. Its physical name is the deployed one (a
/// renamed GSI is deleted and created again by CloudFormation: docs/DEPLOYING.md, "Stored
/// names").
pub const MULTI_EFFECT_INDEX: &str = "MultiSlot";

/// The value of [`MULTI_EFFECT_ATTRIBUTE`] on a marked record.
pub const MULTI_EFFECT_MARK: &str = "1";

/// The value of `route_pending` on a record whose routing to a person is not yet confirmed.
pub const ROUTE_PENDING_MARK: &str = "1";

/// Absent, or expired with nothing left to do: an expired `in_flight` record (or pending routing)
/// is a conflict, taken over with its history.
pub(crate) const RESERVE_CONDITION: &str = "attribute_not_exists(pk) OR (expires_at < :now_s \
     AND #status <> :in_flight AND attribute_not_exists(route_pending))";
/// Work left (`in_flight` or a pending routing), held by `:old_owner`, lease expired.
pub(crate) const TAKE_OVER_CONDITION: &str =
    "(#status = :in_flight OR attribute_exists(route_pending)) \
     AND lease_owner = :old_owner \
     AND (attribute_not_exists(lease_until) OR lease_until < :now_ms)";
/// Work left, held by `:owner` (the lease fence of a release).
pub(crate) const RELEASE_CONDITION: &str =
    "(#status = :in_flight OR attribute_exists(route_pending)) AND lease_owner = :owner";
/// The natural-key item (the guard): absent, held by `:event_key`, or expired.
pub(crate) const GUARD_CONDITION: &str =
    "attribute_not_exists(pk) OR event_key = :event_key OR expires_at < :now_s";
/// The lease fence's text, written once for [`HELD_CONDITION`] and [`EXTEND_CONDITION`].
macro_rules! held_condition {
    () => {
        "#status = :in_flight AND lease_owner = :owner"
    };
}
/// `in_flight`, held by `:owner` (the lease fence of a commit and a finish).
pub(crate) const HELD_CONDITION: &str = held_condition!();
/// An extension's condition: [`HELD_CONDITION`] on a lease not released (`lease_until` is 0
/// after `release_lease`; `:released` is 0). An absent `lease_until` is not a released lease.
pub(crate) const EXTEND_CONDITION: &str = concat!(
    held_condition!(),
    " AND (attribute_not_exists(lease_until) OR lease_until <> :released)"
);
/// No effect id recorded on the record, under either name ([`EFFECT_IDS`], [`LEGACY_EFFECT_IDS`]).
pub(crate) const NO_EFFECT_ID_RECORDED: &str =
    "(attribute_not_exists(effect_ids) AND attribute_not_exists(slot_ids))";

/// Creates the two tables as `template.yaml` defines them, for tests and local runs:
/// `idempotency_table` (partition key `pk` S, GSI `InFlight` on `inflight_shard` S /
/// `created_at` N with projection `INCLUDE` [`INFLIGHT_PROJECTED_ATTRIBUTES`]; GSI
/// [`MULTI_EFFECT_INDEX`] on [`MULTI_EFFECT_ATTRIBUTE`] S (their deployed names), `KEYS_ONLY`; TTL on `expires_at` in epoch seconds) and
/// `bookings_table` (partition key `source_event` S, the key of [`RowColumns::NEUTRAL`] and of
/// every template's business table), both PAY_PER_REQUEST. Tables that already exist are kept;
/// TTL is enabled if it is not.
///
/// # Errors
/// [`StoreError::Unavailable`] (or `Throttled`) when a call fails.
pub async fn create_tables(
    client: &Client,
    idempotency_table: &str,
    bookings_table: &str,
) -> Result<(), StoreError> {
    create_tables_for(
        client,
        idempotency_table,
        bookings_table,
        &RowColumns::NEUTRAL,
    )
    .await
}

/// [`create_tables`] with the business table keyed by `columns.event_key` (S), for an
/// integration that names its business row's columns ([`RowColumns`]).
///
/// # Errors
/// As [`create_tables`].
pub async fn create_tables_for(
    client: &Client,
    idempotency_table: &str,
    bookings_table: &str,
    columns: &RowColumns,
) -> Result<(), StoreError> {
    let build =
        |e: aws_sdk_dynamodb::error::BuildError| StoreError::Unavailable(e.to_string().into());
    let attr = |name: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(t)
            .build()
            .map_err(build)
    };
    let key = |name: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(t)
            .build()
            .map_err(build)
    };
    let gsi = GlobalSecondaryIndex::builder()
        .index_name(INFLIGHT_INDEX)
        .key_schema(key("inflight_shard", KeyType::Hash)?)
        .key_schema(key("created_at", KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::Include)
                .set_non_key_attributes(Some(
                    INFLIGHT_PROJECTED_ATTRIBUTES
                        .iter()
                        .map(|a| (*a).to_owned())
                        .collect(),
                ))
                .build(),
        )
        .build()
        .map_err(build)?;
    let multi_effect = GlobalSecondaryIndex::builder()
        .index_name(MULTI_EFFECT_INDEX)
        .key_schema(key(MULTI_EFFECT_ATTRIBUTE, KeyType::Hash)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
        )
        .build()
        .map_err(build)?;
    let created = client
        .create_table()
        .table_name(idempotency_table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("pk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("inflight_shard", ScalarAttributeType::S)?)
        .attribute_definitions(attr("created_at", ScalarAttributeType::N)?)
        .attribute_definitions(attr(MULTI_EFFECT_ATTRIBUTE, ScalarAttributeType::S)?)
        .key_schema(key("pk", KeyType::Hash)?)
        .global_secondary_indexes(gsi)
        .global_secondary_indexes(multi_effect)
        .send()
        .await;
    ignore_existing(created, "create_tables (idempotency)")?;
    let created = client
        .create_table()
        .table_name(bookings_table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr(columns.event_key, ScalarAttributeType::S)?)
        .key_schema(key(columns.event_key, KeyType::Hash)?)
        .send()
        .await;
    ignore_existing(created, "create_tables (bookings)")?;

    use aws_sdk_dynamodb::client::Waiters;
    for table in [idempotency_table, bookings_table] {
        client
            .wait_until_table_exists()
            .table_name(table)
            .wait(Duration::from_secs(300))
            .await
            .map_err(|e| {
                StoreError::Unavailable(
                    format!("table {table} not active: {}", DisplayErrorContext(&e)).into(),
                )
            })?;
    }

    let ttl = client
        .describe_time_to_live()
        .table_name(idempotency_table)
        .send()
        .await
        .map_err(|e| map_sdk_error("create_tables (DescribeTimeToLive)", e))?;
    let enabled = ttl
        .time_to_live_description()
        .and_then(|d| d.time_to_live_status())
        .is_some_and(|s| matches!(s, TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling));
    if !enabled {
        client
            .update_time_to_live()
            .table_name(idempotency_table)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name("expires_at")
                    .enabled(true)
                    .build()
                    .map_err(build)?,
            )
            .send()
            .await
            .map_err(|e| map_sdk_error("create_tables (UpdateTimeToLive)", e))?;
    }
    Ok(())
}

fn ignore_existing<T, E, R>(result: Result<T, SdkError<E, R>>, op: &str) -> Result<(), StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(()),
        Err(err) if err.code() == Some("ResourceInUseException") => Ok(()),
        Err(err) => Err(map_sdk_error(op, err)),
    }
}
