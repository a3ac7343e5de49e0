//! Hostile-review attacks on the lease extension before a server call
//! (`IdempotencyStore::extend_lease`, `Gate::lease_for_call`) at the store, the same cases on
//! the memory store, DynamoDB (moto) and PostgreSQL: an extension never resurrects a record
//! that is no longer `in_flight` under its owner (committed by itself or by the holder that
//! took it over, finished to a person, or never there), and a refused extension writes nothing.
//! Needs moto (`scripts/with-moto.sh`) and `GATE_TEST_DATABASE_URL` (`scripts/with-postgres.sh`).

use std::sync::atomic::{AtomicU64, Ordering};

use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, IdempotencyStore, Reservation, TakeOver,
};
use gate_postgres::{PostgresConfig, PostgresStore};
use gate_testkit::conformance::{sample_record, LEASE_MS, NOW_MS};
use integration_tests::{fresh_store, unique};

async fn reserved(
    store: &dyn IdempotencyStore,
    prefix: &str,
    name: &str,
    owner: &str,
) -> IdempotencyRecord {
    let r = sample_record(prefix, name, owner, NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    r
}

async fn stored(store: &dyn IdempotencyStore, pk: &str) -> IdempotencyRecord {
    store.get(pk).await.expect("get").expect("the record")
}

/// Every attack on `store`, records under `prefix`.
async fn extension_attacks(store: &dyn IdempotencyStore, prefix: &str) {
    let late = NOW_MS + LEASE_MS + 1;

    // Never there: nothing extended, nothing created.
    let missing = format!("{prefix}#no-such-record");
    assert!(!store
        .extend_lease(&missing, "owner-x", late + LEASE_MS, late)
        .await
        .expect("extend_lease"));
    assert_eq!(store.get(&missing).await.expect("get"), None);

    // Committed by its own holder: a late extension (a retry arriving after the commit) is
    // refused and leaves the committed record as it is.
    let a = reserved(store, prefix, "own-commit", "owner-a").await;
    let row = BusinessRow::for_record(&a, "E-a", NOW_MS + 10);
    assert_eq!(
        store
            .commit(&a.pk, "owner-a", "E-a", &row, NOW_MS + 10)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    let committed = stored(store, &a.pk).await;
    assert_eq!(committed.status, RecordStatus::Committed);
    assert!(!store
        .extend_lease(&a.pk, "owner-a", NOW_MS + 20 + LEASE_MS, NOW_MS + 20)
        .await
        .expect("extend_lease"));
    assert_eq!(
        stored(store, &a.pk).await,
        committed,
        "a refused extension wrote"
    );

    // Taken over after its lease ran out and committed by the new holder: the old holder's
    // extension (its slow store answered at last) is refused, nothing changes.
    let b = reserved(store, prefix, "their-commit", "owner-b").await;
    match store
        .take_over(&b.pk, "owner-b", "owner-c", late + LEASE_MS, late)
        .await
        .expect("take_over")
    {
        TakeOver::Taken(_) => {}
        TakeOver::Refused => panic!("take-over of an expired lease refused"),
    }
    let row = BusinessRow::for_record(&b, "E-c", late + 5);
    assert_eq!(
        store
            .commit(&b.pk, "owner-c", "E-c", &row, late + 5)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    let theirs = stored(store, &b.pk).await;
    assert!(!store
        .extend_lease(&b.pk, "owner-b", late + 10 + LEASE_MS, late + 10)
        .await
        .expect("extend_lease"));
    assert_eq!(stored(store, &b.pk).await, theirs, "the old holder wrote");

    // Finished to a person by its holder (routing pending, the lease kept): not in flight, so
    // no extension, even by that holder.
    let d = reserved(store, prefix, "to-person", "owner-d").await;
    assert_eq!(
        store
            .finish(
                &d.pk,
                "owner-d",
                RecordStatus::Manual,
                "server_rejected",
                b"{\"manual\":true}",
                FinishGuard::Lease,
                NOW_MS + 30,
            )
            .await
            .expect("finish"),
        FinishOutcome::Finished
    );
    let finished = stored(store, &d.pk).await;
    assert!(!store
        .extend_lease(&d.pk, "owner-d", NOW_MS + 40 + LEASE_MS, NOW_MS + 40)
        .await
        .expect("extend_lease"));
    assert_eq!(
        stored(store, &d.pk).await,
        finished,
        "a finished record's lease moved"
    );
}

#[tokio::test]
async fn extension_attacks_on_the_memory_store() {
    extension_attacks(&MemoryStore::new(), "break-lease-mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_attacks_on_dynamodb() {
    let base = unique("break-lease");
    let store = fresh_store(&base).await;
    extension_attacks(&store, &base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_attacks_on_postgresql() {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let url = integration_tests::database_url();
    let schema = format!(
        "break_lease_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let store = PostgresStore::with_config(&PostgresConfig::new(&url, 4).with_schema(schema))
        .expect("store");
    store.migrate().await.expect("migrate");
    extension_attacks(&store, "break-lease-pg").await;
}
