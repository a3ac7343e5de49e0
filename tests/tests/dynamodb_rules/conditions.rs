//! Item 3: the commit's cancellation reasons read by item, not by position. The conformance
//! suite runs on DynamoDB (moto) in the usual item order in `tests/tests/dynamodb.rs`; here the
//! whole suite, with its case where each condition of the commit fails alone and in pairs, runs
//! on a store that builds the transaction's items in reverse order, and must give the same
//! outcomes. And a record that refused is never retried without the natural key.

use std::sync::Arc;

use gate::conformance::{sample_labels, sample_natural_key, sample_record, LEASE_MS, NOW_MS};
use gate::record::BusinessRow;
use gate::store::{CommitOutcome, IdempotencyStore, Reservation, Store, TakeOver};
use integration_tests::fault_proxy::{store_via_with, FaultProxy};
use integration_tests::{fresh_store, moto_endpoint, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_conformance_suite_passes_with_the_commit_items_reversed() {
    let store: Arc<dyn Store> =
        Arc::new(fresh_store("reversed").await.with_commit_items_reversed());
    gate::conformance::run_all(store, &unique("reversed")).await;
}

#[tokio::test]
async fn each_commit_condition_alone_and_in_pairs_with_the_items_reversed() {
    let store: Arc<dyn Store> = Arc::new(
        fresh_store("cc-reversed")
            .await
            .with_commit_items_reversed(),
    );
    gate::conformance::commit_conditions_alone_and_in_pairs(store, &unique("cc-reversed")).await;
}

/// The record refused (its lease taken over) and the natural key held by another event key, in
/// both item orders: refused, in one transaction: no second one "without the natural key".
#[tokio::test]
async fn a_refused_record_is_never_retried_without_the_natural_key() {
    for reversed in [false, true] {
        let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
        let store = store_via_with(&endpoint, "refused-nk", 4).await;
        let store = if reversed {
            store.with_commit_items_reversed()
        } else {
            store
        };
        let prefix = unique("refused-nk");
        let window = sample_labels("2025-06-09T08:00:00Z", "2025-06-09T10:00:00Z");
        let mut holder = sample_record(&prefix, "holder", "owner-h", NOW_MS);
        holder.labels = window.clone();
        let mut r = sample_record(&prefix, "refused", "owner-a", NOW_MS);
        r.labels = window;
        for rec in [&holder, &r] {
            assert_eq!(
                store.reserve(rec, NOW_MS).await.expect("reserve"),
                Reservation::Reserved
            );
        }
        let row = BusinessRow::for_record(&holder, "SLOT-H", NOW_MS + 1);
        let out = store
            .commit(
                &holder.pk,
                "owner-h",
                "SLOT-H",
                &row,
                Some(&sample_natural_key(&row)),
                NOW_MS + 1,
            )
            .await
            .expect("commit of the holder");
        assert_eq!(out, CommitOutcome::Committed);
        let now = NOW_MS + LEASE_MS + 2;
        let taken = match store
            .take_over(&r.pk, "owner-a", "owner-b", now + LEASE_MS, now - 1)
            .await
            .expect("take_over")
        {
            TakeOver::Taken(t) => *t,
            TakeOver::Refused => panic!("take-over refused"),
        };
        let before = proxy.count("TransactWriteItems");
        let row = BusinessRow::for_record(&r, "SLOT-A", now);
        let out = store
            .commit(
                &r.pk,
                "owner-a",
                "SLOT-A",
                &row,
                Some(&sample_natural_key(&row)),
                now,
            )
            .await
            .expect("commit");
        assert_eq!(
            out,
            CommitOutcome::Refused(Box::new(taken)),
            "reversed: {reversed}"
        );
        assert_eq!(
            proxy.count("TransactWriteItems") - before,
            1,
            "reversed: {reversed}: one transaction, no retry without the natural key"
        );
        assert_eq!(store.booking(&r.event_key).await.expect("booking"), None);
    }
}
