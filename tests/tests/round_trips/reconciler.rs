//! The reconciler's round trips on DynamoDB (moto), counted as in the consumer's:
//!
//! | path | case | DynamoDB requests |
//! | --- | --- | --- |
//! | reconciler (`Gate::reconcile`) | one run, per shard and page of `InFlight` | `Query` (16 shards: 16 when each fits one page) |
//! | reconciler | per stranded record, re-sent before the claim horizon | `UpdateItem` (take-over), `PutItem` (its own guard again), `TransactWriteItems` (commit) |
//! | reconciler | per record whose lease someone else took (or finished) after the `Query` | `UpdateItem` (refused) |
//! | reconciler | per record with a live lease | none (skipped on what the `Query` returned) |

use super::*;

#[tokio::test]
async fn reconciler_run_costs_one_query_per_shard_and_three_calls_per_stranded_record() {
    let w = World::new("reconcile").await;
    let config = ReconcilerConfig::default();

    // Nothing stranded: one Query per shard, nothing else.
    let report = w
        .gate
        .reconcile(w.index.as_ref(), &config, &w.invocation("rec-0"))
        .await;
    assert_eq!(report.examined, 0);
    let calls = w.take_calls();
    assert_eq!(calls, vec!["Query"; 16]);

    // One stranded record.
    w.strand("PCS-R-1", CONTAINERS[0], 10 * 60_000).await;
    let report = w
        .gate
        .reconcile(w.index.as_ref(), &config, &w.invocation("rec-1"))
        .await;
    assert_eq!((report.examined, report.reconciled), (1, 1), "{report:?}");
    let calls = w.take_calls();
    assert_eq!(count(&calls, "Query"), 16, "{calls:?}");
    assert_eq!(
        without_queries(&calls),
        ["UpdateItem", "PutItem", "TransactWriteItems"]
    );

    // Twelve stranded records: 3 calls each, and still one Query per shard (each shard's stale
    // records fit one page of 25).
    let mut shards = BTreeMap::new();
    for i in 0..12 {
        let r = w
            .strand(&format!("PCS-R-{}", i + 2), &container(i), 10 * 60_000)
            .await;
        *shards.entry(inflight_shard(&r.event_key)).or_insert(0usize) += 1;
    }
    assert!(shards.values().all(|n| *n < config.page_size));
    let report = w
        .gate
        .reconcile(w.index.as_ref(), &config, &w.invocation("rec-2"))
        .await;
    assert_eq!((report.examined, report.reconciled), (12, 12), "{report:?}");
    let calls = w.take_calls();
    assert_eq!(count(&calls, "Query"), 16, "{calls:?}");
    assert_eq!(count(&calls, "UpdateItem"), 12, "{calls:?}");
    assert_eq!(count(&calls, "PutItem"), 12, "{calls:?}");
    assert_eq!(count(&calls, "TransactWriteItems"), 12, "{calls:?}");
    assert_eq!(calls.len(), 16 + 3 * 12, "{calls:?}");

    // Finished records leave the sparse index: the next run reads 16 empty pages.
    let report = w
        .gate
        .reconcile(w.index.as_ref(), &config, &w.invocation("rec-3"))
        .await;
    assert_eq!(report.examined, 0);
    assert_eq!(w.take_calls(), vec!["Query"; 16]);
}

#[tokio::test]
async fn reconciler_pages_cost_one_query_each() {
    let w = World::new("pages").await;
    let config = ReconcilerConfig {
        page_size: 1,
        ..ReconcilerConfig::default()
    };
    // Two stranded records in one shard, pages of one: that shard costs at least two Queries
    // (DynamoDB may add a last empty page when a page ends exactly on the limit).
    let mut by_shard: BTreeMap<String, Vec<IdempotencyRecord>> = BTreeMap::new();
    let mut i = 0;
    while by_shard.values().all(|v| v.len() < 2) {
        let r = w
            .strand(&format!("PCS-P-{i}"), &container(i), 10 * 60_000)
            .await;
        by_shard
            .entry(inflight_shard(&r.event_key))
            .or_default()
            .push(r);
        i += 1;
    }
    let stranded = i;
    let report = w
        .gate
        .reconcile(w.index.as_ref(), &config, &w.invocation("rec"))
        .await;
    assert_eq!(report.reconciled, stranded, "{report:?}");
    let calls = w.take_calls();
    assert_eq!(count(&calls, "UpdateItem"), stranded, "{calls:?}");
    assert_eq!(count(&calls, "PutItem"), stranded, "{calls:?}");
    assert_eq!(count(&calls, "TransactWriteItems"), stranded, "{calls:?}");
    // Pages: per shard, one per record plus at most one empty last page.
    let queries = count(&calls, "Query");
    let min_pages: usize =
        16 + by_shard.values().map(|v| v.len()).sum::<usize>() - by_shard.len().min(16);
    assert!(
        queries >= min_pages && queries <= 16 + stranded,
        "{queries} Queries for {stranded} records in {} shards: {calls:?}",
        by_shard.len()
    );
}

/// "Someone else" acting on every record of a page after the `Query` and before the
/// reconciler's take-over ([`RacedIndex`]): the race a second reconciler or a late consumer makes.
struct SomeoneElse {
    other: DynamoStore,
    commit_instead: bool,
}

#[async_trait]
impl AfterRead for SomeoneElse {
    async fn after_read(&self, page: &InFlightPage) -> Result<(), StoreError> {
        for r in &page.entries {
            let owner = r.lease_owner.clone().unwrap_or_default();
            let now = T0;
            let taken = self
                .other
                .take_over(&r.pk, &owner, "someone-else", now + 60_000, now)
                .await?;
            let TakeOver::Taken(full) = taken else {
                panic!("the racing take-over was refused");
            };
            if self.commit_instead {
                let booking = gate::record::BusinessRow::for_record(&full, "ECTD-OTHER", now);
                let out = self
                    .other
                    .commit(&r.pk, "someone-else", "ECTD-OTHER", &booking, now)
                    .await?;
                assert_eq!(out, CommitOutcome::Committed);
            }
        }
        Ok(())
    }
}

async fn racing_world(name: &str, commit_instead: bool) -> World {
    let mut w = World::new(name).await;
    let inner = w.index.clone();
    w.index = Arc::new(RacedIndex {
        inner,
        after: SomeoneElse {
            other: w.other.clone(),
            commit_instead,
        },
    });
    w
}

#[tokio::test]
async fn reconciler_duplicate_costs_one_refused_take_over() {
    for (name, commit_instead) in [("race-lease", false), ("race-commit", true)] {
        let w = racing_world(name, commit_instead).await;
        w.strand("PCS-D-1", CONTAINERS[3], 10 * 60_000).await;
        let report = w
            .gate
            .reconcile(
                w.index.as_ref(),
                &ReconcilerConfig::default(),
                &w.invocation("rec"),
            )
            .await;
        assert_eq!((report.examined, report.live_lease), (1, 1), "{report:?}");
        let calls = w.take_calls();
        assert_eq!(count(&calls, "Query"), 16, "{calls:?}");
        assert_eq!(without_queries(&calls), ["UpdateItem"], "{name}");
    }
}

#[tokio::test]
async fn reconciler_skips_a_live_lease_without_a_call() {
    let w = World::new("live").await;
    // Created 10 minutes ago, but its owner renewed the lease (take-over by a consumer).
    let r = w.strand("PCS-L-1", CONTAINERS[1], 10 * 60_000).await;
    let taken = w
        .other
        .take_over(
            &r.pk,
            r.lease_owner.as_deref().unwrap_or_default(),
            "consumer",
            T0 + 60_000,
            T0,
        )
        .await
        .expect("take-over");
    assert!(matches!(taken, TakeOver::Taken(_)));
    let report = w
        .gate
        .reconcile(
            w.index.as_ref(),
            &ReconcilerConfig::default(),
            &w.invocation("rec"),
        )
        .await;
    assert_eq!((report.examined, report.live_lease), (1, 1), "{report:?}");
    assert_eq!(w.take_calls(), vec!["Query"; 16]);
}
