//! The cold-start check that the gate's tables live in one Region: a DynamoDB global table
//! cannot hold the records, in either consistency mode.
//!
//! * **Multi-Region eventual consistency (MREC)**, the default mode of a global table: a
//!   conditional write evaluates its condition against the item's version in the Region it is
//!   sent to, and a write in another Region replicates later, the last writer winning (AWS,
//!   Amazon DynamoDB Developer Guide, "Global tables core concepts", "Multi-Region eventual
//!   consistency (MREC)"). Two environments in two Regions can then both reserve one key, and
//!   both call the server: the very thing the gate exists to prevent (scylladb/scylladb #10015 reproduces it on the Alternator API).
//! * **Multi-Region strong consistency (MRSC)** checks a condition against every Region, but
//!   does not support transaction operations: `TransactWriteItems` (the commit, the record and
//!   the business row in one transaction, `commit.rs`) returns an error on an MRSC replica; nor
//!   does it support Time to Live (the records' expiry, `expires_at`) (same guide, "Global tables
//!   core concepts": "Multi-Region strong consistency (MRSC)" and "Transactions"). The commit
//!   could never succeed, so an MRSC table is refused as well, at start rather than at the first
//!   commit.
//!
//! The check: [`check_table`] on the `DescribeTable` of both tables, [`replication_of`].

use aws_sdk_dynamodb::types::{MultiRegionConsistency, TableDescription};

use super::errors::map_sdk_error;
use super::DynamoStore;
use gate::store::StoreError;

/// `GlobalTableVersion` of the legacy global tables (version 2017.11.29), eventually consistent,
/// whose replicas `DescribeTable` does not list.
pub const LEGACY_GLOBAL_TABLE_VERSION: &str = "2017.11.29";

/// How a table is replicated, as `DescribeTable` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// One Region: every conditional write is checked against the one copy.
    SingleRegion,
    /// A global table in multi-Region eventual consistency (`MultiRegionConsistency` `EVENTUAL`
    /// or absent); `regions`: its replicas' (and witnesses') Regions as listed.
    Eventual {
        /// The Regions listed, in `DescribeTable`'s order.
        regions: Vec<String>,
    },
    /// A global table in multi-Region strong consistency (`MultiRegionConsistency` `STRONG`).
    Strong {
        /// The Regions listed (replicas, then the witness), in `DescribeTable`'s order.
        regions: Vec<String>,
    },
    /// A legacy global table (`GlobalTableVersion` [`LEGACY_GLOBAL_TABLE_VERSION`]).
    Legacy,
}

/// The replication of the table `table` describes.
///
/// The check reads `DescribeTable` of both tables (the idempotency table and the business
/// table: the commit's transaction conditions on both): a table with entries in `Replicas` or
/// `GlobalTableWitnesses` (a replica being created counts: replication is about to begin), or
/// with `GlobalTableVersion` `2017.11.29` (the legacy global tables, whose replicas
/// `DescribeTable` does not list), is refused ([`replication_of`], [`check_table`]). A table
/// whose replicas were all removed lists none ("After a successful disassociation, this list is
/// absent or empty": DynamoDB API Reference, `TableDescription.Replicas`) and is accepted.
pub fn replication_of(table: &TableDescription) -> Replication {
    let mut regions: Vec<String> = table
        .replicas()
        .iter()
        .map(|r| r.region_name().unwrap_or("?").to_string())
        .collect();
    regions.extend(
        table
            .global_table_witnesses()
            .iter()
            .map(|w| format!("{} (witness)", w.region_name().unwrap_or("?"))),
    );
    if regions.is_empty() {
        return if table.global_table_version() == Some(LEGACY_GLOBAL_TABLE_VERSION) {
            Replication::Legacy
        } else {
            Replication::SingleRegion
        };
    }
    match table.multi_region_consistency() {
        Some(MultiRegionConsistency::Strong) => Replication::Strong { regions },
        // `EVENTUAL`, absent (the default mode) or a mode this SDK does not know: the weakest.
        _ => Replication::Eventual { regions },
    }
}

/// Why a table cannot hold the gate's records, or why that could not be checked. Each message is
/// one line naming the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicationError {
    /// A global table in multi-Region eventual consistency.
    #[error(
        "table {table} is a DynamoDB global table with multi-Region eventual consistency \
         (replicas: {regions}): a conditional write is checked only in the Region it is sent to, \
         so two Regions could both reserve one key and both call the server; the gate needs a \
         table in one Region (docs/DEPLOYING.md, \"DynamoDB global tables\")"
    )]
    Eventual {
        /// The table's name.
        table: String,
        /// Its Regions, comma-separated.
        regions: String,
    },
    /// A global table in multi-Region strong consistency.
    #[error(
        "table {table} is a DynamoDB global table with multi-Region strong consistency \
         (replicas: {regions}): DynamoDB refuses transactions on it (the commit is a \
         TransactWriteItems) and it has no TTL; the gate needs a table in one Region \
         (docs/DEPLOYING.md, \"DynamoDB global tables\")"
    )]
    Strong {
        /// The table's name.
        table: String,
        /// Its Regions, comma-separated.
        regions: String,
    },
    /// A legacy (2017.11.29) global table.
    #[error(
        "table {table} is a legacy DynamoDB global table (version 2017.11.29, multi-Region \
         eventual consistency): a conditional write is checked only in the Region it is sent to; \
         the gate needs a table in one Region (docs/DEPLOYING.md, \"DynamoDB global tables\")"
    )]
    Legacy {
        /// The table's name.
        table: String,
    },
    /// `DescribeTable` failed: the function cannot know, so it does not start.
    #[error("the global-table check could not run (it needs dynamodb:DescribeTable): {0}")]
    Store(#[from] StoreError),
}

/// The check of one table named `name`, described by `table`: `Ok` for a single-Region table,
/// else why it is refused.
///
/// # Errors
/// [`ReplicationError::Eventual`], [`ReplicationError::Strong`] or [`ReplicationError::Legacy`].
pub fn check_table(name: &str, table: &TableDescription) -> Result<(), ReplicationError> {
    let table_name = name.to_string();
    match replication_of(table) {
        Replication::SingleRegion => Ok(()),
        Replication::Eventual { regions } => Err(ReplicationError::Eventual {
            table: table_name,
            regions: regions.join(", "),
        }),
        Replication::Strong { regions } => Err(ReplicationError::Strong {
            table: table_name,
            regions: regions.join(", "),
        }),
        Replication::Legacy => Err(ReplicationError::Legacy { table: table_name }),
    }
}

impl DynamoStore {
    /// The cold-start check that the idempotency table and the business table each live in one
    /// Region (module docs): one `DescribeTable` per table, both at once.
    ///
    /// # Errors
    /// The first refused table's [`ReplicationError`] (the idempotency table's first), or
    /// [`ReplicationError::Store`] when a `DescribeTable` failed (for instance without the
    /// `dynamodb:DescribeTable` permission, or a table that does not exist).
    pub async fn verify_single_region(&self) -> Result<(), ReplicationError> {
        let describe = |table: &str| {
            let table = table.to_string();
            async move {
                let out = self
                    .client
                    .describe_table()
                    .table_name(&table)
                    .send()
                    .await
                    .map_err(|e| map_sdk_error(&format!("DescribeTable {table}"), e))?;
                let description = out.table().ok_or_else(|| {
                    StoreError::Unavailable(
                        format!("DescribeTable {table}: no table in the answer").into(),
                    )
                })?;
                check_table(&table, description)
            }
        };
        let (records, business) = futures::join!(
            describe(&self.idempotency_table),
            describe(&self.bookings_table)
        );
        records.and(business)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::{
        GlobalTableWitnessDescription, ReplicaDescription, ReplicaStatus, WitnessStatus,
    };

    fn replica(region: &str, status: ReplicaStatus) -> ReplicaDescription {
        ReplicaDescription::builder()
            .region_name(region)
            .replica_status(status)
            .build()
    }

    #[test]
    fn a_table_without_replicas_is_single_region() {
        let plain = TableDescription::builder().table_name("t").build();
        assert_eq!(replication_of(&plain), Replication::SingleRegion);
        assert_eq!(check_table("t", &plain), Ok(()));
        // Every replica removed: the list is empty, the version may stay.
        let former = TableDescription::builder()
            .global_table_version("2019.11.21")
            .set_replicas(Some(Vec::new()))
            .build();
        assert_eq!(replication_of(&former), Replication::SingleRegion);
    }

    #[test]
    fn replicas_without_a_mode_are_eventually_consistent() {
        let table = TableDescription::builder()
            .global_table_version("2019.11.21")
            .replicas(replica("eu-west-1", ReplicaStatus::Active))
            .replicas(replica("eu-central-1", ReplicaStatus::Creating))
            .build();
        assert_eq!(
            replication_of(&table),
            Replication::Eventual {
                regions: vec!["eu-west-1".into(), "eu-central-1".into()]
            }
        );
        let explicit = TableDescription::builder()
            .multi_region_consistency(MultiRegionConsistency::Eventual)
            .replicas(replica("eu-west-1", ReplicaStatus::Active))
            .replicas(replica("eu-central-1", ReplicaStatus::Creating))
            .build();
        assert_eq!(replication_of(&explicit), replication_of(&table));
        let refused = check_table("gate-records", &table).unwrap_err().to_string();
        assert!(
            refused.starts_with("table gate-records is a DynamoDB global table with multi-Region eventual consistency (replicas: eu-west-1, eu-central-1)"),
            "{refused}"
        );
        assert!(!refused.contains('\n'));
    }

    #[test]
    fn strong_consistency_is_refused_for_its_transactions() {
        let table = TableDescription::builder()
            .multi_region_consistency(MultiRegionConsistency::Strong)
            .replicas(replica("us-east-1", ReplicaStatus::Active))
            .replicas(replica("us-east-2", ReplicaStatus::Active))
            .global_table_witnesses(
                GlobalTableWitnessDescription::builder()
                    .region_name("us-west-2")
                    .witness_status(WitnessStatus::Active)
                    .build(),
            )
            .build();
        assert_eq!(
            replication_of(&table),
            Replication::Strong {
                regions: vec![
                    "us-east-1".into(),
                    "us-east-2".into(),
                    "us-west-2 (witness)".into()
                ]
            }
        );
        let refused = check_table("gate-records", &table).unwrap_err().to_string();
        assert!(
            refused.contains("multi-Region strong consistency"),
            "{refused}"
        );
        assert!(refused.contains("TransactWriteItems"), "{refused}");
    }

    #[test]
    fn a_legacy_global_table_is_refused_without_listed_replicas() {
        let table = TableDescription::builder()
            .global_table_version(LEGACY_GLOBAL_TABLE_VERSION)
            .build();
        assert_eq!(replication_of(&table), Replication::Legacy);
        assert!(matches!(
            check_table("t", &table),
            Err(ReplicationError::Legacy { .. })
        ));
    }
}
