//! The reserve with its guard on PostgreSQL (one statement) when its answer is lost after the
//! server committed it: the store retries the statement on a new connection, the retry meets
//! its own reservation and answers as if the statement had landed once, the guard's answer
//! included (held by its own row, or the collision it met); nothing is written twice.
//!
//! Needs `GATE_TEST_DATABASE_URL`: `scripts/with-postgres.sh cargo test -p integration-tests
//! --test postgres_reserve_guard`; `make test` does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use gate::store::{GuardOutcome, IdempotencyStore, Reservation, ReserveAndGuard};
use gate_postgres::{PostgresConfig, PostgresStore};
use gate_testkit::conformance::{sample_natural_key, sample_record, NOW_MS};
use integration_tests::database_url;
use integration_tests::pg_proxy::PgProxy;

/// The server's address in a `postgresql://user@IP:PORT/db?..` URL.
fn server_addr(url: &str) -> SocketAddr {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let host_port = rest.split(['/', '?']).next().unwrap_or(rest);
    host_port
        .parse()
        .unwrap_or_else(|_| panic!("GATE_TEST_DATABASE_URL: expected postgresql://user@IP:PORT/.."))
}

/// A migrated schema of its own, reached through a proxy that can cut an answer.
async fn proxied_store(case: &str) -> (std::sync::Arc<PgProxy>, PostgresStore) {
    static N: AtomicU64 = AtomicU64::new(0);
    let schema = format!(
        "rg_{}_{}_{case}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let url = database_url();
    let upstream = server_addr(&url);
    let (proxy, addr) = PgProxy::start(upstream).await;
    let url = url.replacen(&upstream.to_string(), &addr.to_string(), 1);
    let store = PostgresStore::with_config(&PostgresConfig::new(url, 2).with_schema(schema))
        .expect("store");
    store.migrate().await.expect("migrate");
    (proxy, store)
}

#[tokio::test]
async fn a_lost_answer_to_the_reserve_with_its_guard_is_recognised_by_the_retry() {
    let (proxy, store) = proxied_store("lost").await;
    let first = sample_record("rg-lost", "first", "owner-rg-lost-1", NOW_MS);
    let second = sample_record("rg-lost", "second", "owner-rg-lost-2", NOW_MS);
    assert_eq!(first.label("window_start"), second.label("window_start"));

    // The first event key: reserved and guarded by the statement whose answer is cut.
    proxy.cut_after_answer_to("owner-rg-lost-1");
    let out = store
        .reserve_with_guard(&first, Some(&sample_natural_key(&first, NOW_MS)), NOW_MS)
        .await
        .expect("reserve_with_guard");
    assert_eq!(proxy.cuts(), 1, "the statement's answer was not cut");
    assert_eq!(
        out,
        ReserveAndGuard {
            reservation: Reservation::Reserved,
            guard: Some(Ok(GuardOutcome::Held)),
        }
    );
    assert_eq!(
        store.get(&first.pk).await.expect("get"),
        Some(first.clone())
    );

    // A second event key for the same natural key, its answer cut too: reserved, and the
    // collision its landed statement met, naming the first.
    proxy.cut_after_answer_to("owner-rg-lost-2");
    let out = store
        .reserve_with_guard(&second, Some(&sample_natural_key(&second, NOW_MS)), NOW_MS)
        .await
        .expect("reserve_with_guard");
    assert_eq!(proxy.cuts(), 2, "the statement's answer was not cut");
    assert_eq!(
        out,
        ReserveAndGuard {
            reservation: Reservation::Reserved,
            guard: Some(Ok(GuardOutcome::Collision {
                other_event_key: first.event_key.clone()
            })),
        }
    );
    assert_eq!(
        store.get(&second.pk).await.expect("get"),
        Some(second.clone())
    );
    // The first still holds the natural key: its guard was written once, by its own statement.
    assert_eq!(
        store
            .guard(&first, &sample_natural_key(&first, NOW_MS + 1), NOW_MS + 1)
            .await,
        Ok(GuardOutcome::Held)
    );
    assert_eq!(
        store
            .guard(
                &second,
                &sample_natural_key(&second, NOW_MS + 1),
                NOW_MS + 1
            )
            .await,
        Ok(GuardOutcome::Collision {
            other_event_key: first.event_key.clone()
        })
    );
}
