//! A store whose every pooled connection is on a writer that was demoted: one statement heals
//! within its own attempts. Its first attempt meets 25006 on a stale connection; the store drops
//! that connection and every other idle one to the same server, so the next attempt connects
//! afresh (through the proxy, to the promoted standby) instead of spending the attempts on the
//! other stale connections. Real PostgreSQL 15: a primary, its streaming standby and a TCP proxy
//! that keeps old connections where they are (`pg_cluster`, `pg_fault_proxy`).
//!
//! ```text
//! scripts/with-postgres.sh cargo test -p integration-tests --test pg_demoted_pool
//! ```

use gate::clock::{Clock, SystemClock};
use gate::store::{IdempotencyStore, Reservation};
use gate_postgres::{PostgresConfig, PostgresStore};
use gate_testkit::conformance::sample_record;
use integration_tests::pg_cluster::{url_at, PgCluster};
use integration_tests::pg_fault_proxy::FaultProxy;

/// The store's pool: more idle connections than a statement has attempts would cover if the
/// store dropped only the connection that failed (4 attempts: `RETRY_BACKOFF_MS` + 1).
const POOL_SIZE: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_left_on_a_demoted_writer_heals_within_one_statement() {
    let cluster = tokio::task::block_in_place(PgCluster::start);
    let proxy = FaultProxy::start(cluster.primary.addr()).await;
    let store = PostgresStore::with_config(&PostgresConfig::new(url_at(proxy.addr()), POOL_SIZE))
        .expect("a store through the proxy");
    store.migrate().await.expect("migrations");

    // Fill the pool: rounds of POOL_SIZE reserves at once until the proxy has seen as many
    // connections (a round opens a new connection for every statement that finds none idle).
    let now = SystemClock.now_ms();
    let mut warm = 0;
    for round in 0..20 {
        if proxy.accepted() >= POOL_SIZE {
            break;
        }
        let records: Vec<_> = (0..POOL_SIZE)
            .map(|i| sample_record("demoted", &format!("warm-{round}-{i}"), "warm", now))
            .collect();
        let answers =
            futures::future::join_all(records.iter().map(|r| store.reserve(r, now))).await;
        for answer in answers {
            assert!(
                matches!(answer, Ok(Reservation::Reserved)),
                "a warm-up reserve on the first writer: {answer:?}"
            );
            warm += 1;
        }
    }
    assert!(
        proxy.accepted() >= POOL_SIZE,
        "the pool holds {POOL_SIZE} connections to the first writer (the proxy saw {})",
        proxy.accepted()
    );

    // The failover: the writer read-only for the sessions still on it (the proxy keeps them
    // there), the standby promoted once caught up, new connections sent to it.
    tokio::task::block_in_place(|| {
        cluster.primary.demote_for_sessions();
        cluster.wait_caught_up();
        cluster.standby.promote();
    });
    proxy.switch_target(cluster.standby.addr());
    let accepted_before = proxy.accepted();

    let now = SystemClock.now_ms();
    let record = sample_record("demoted", "after-failover", "new-holder", now);
    let answer = store.reserve(&record, now).await;
    assert!(
        matches!(answer, Ok(Reservation::Reserved)),
        "one reserve after the failover, with every pooled connection on the demoted writer: \
         {answer:?}"
    );
    assert!(
        proxy.accepted() > accepted_before,
        "the reserve ran on a new connection"
    );
    let on_new_writer = cluster.standby.psql(&format!(
        "SELECT count(*) FROM gate.idempotency WHERE pk = '{}'",
        record.pk
    ));
    assert_eq!(
        on_new_writer.trim(),
        "1",
        "the record is on the promoted standby"
    );
    let warm_on_new_writer = cluster.standby.psql(
        "SELECT count(*) FROM gate.idempotency WHERE pk LIKE 'demoted#%' \
         AND lease_owner = 'warm'",
    );
    assert_eq!(
        warm_on_new_writer.trim(),
        warm.to_string(),
        "the synchronous standby has every warm-up reserve"
    );
}
