//! The store as configured ([`StoreConfig`]), built in one place for every function: the write
//! path and the read side for the consumer and the reconciler ([`build_store`]), the read side
//! alone for the metrics function ([`build_index`]).

use std::sync::Arc;

use aws_config::SdkConfig;

use crate::store::dynamo::{DynamoIndex, DynamoStore};
use crate::store::{IdempotencyStore, InFlightIndex};

use super::config::StoreConfig;

/// The store of `config` with the SDK configuration `aws`: the write path and the read side of
/// its idempotency table (`InFlight`, `MultiSlot`: what the reconciler pages).
pub fn build_store(
    config: &StoreConfig,
    aws: &SdkConfig,
) -> (Arc<dyn IdempotencyStore>, Arc<dyn InFlightIndex>) {
    match config {
        StoreConfig::DynamoDb {
            idempotency_table,
            business_table,
        } => {
            let store = DynamoStore::new(
                aws_sdk_dynamodb::Client::new(aws),
                idempotency_table.clone(),
                business_table.clone(),
            );
            let index = Arc::new(store.index().clone());
            (Arc::new(store), index)
        }
    }
}

/// The read side only of the idempotency table `idempotency_table` (the metrics function reads
/// its indexes, nothing else).
pub fn build_index(idempotency_table: &str, aws: &SdkConfig) -> Arc<dyn InFlightIndex> {
    Arc::new(DynamoIndex::new(
        aws_sdk_dynamodb::Client::new(aws),
        idempotency_table.to_string(),
    ))
}
