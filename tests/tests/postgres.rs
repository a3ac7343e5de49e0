//! `PostgresStore` against a real PostgreSQL server: the store conformance suite, the
//! migrations, the partial in-flight index, the faults a PostgreSQL user meets (an answer lost
//! after the commit, a failover, serialization failures and deadlocks, a statement timeout, a
//! lock wait) and the incident replay.
//!
//! Needs `GATE_TEST_DATABASE_URL` (a superuser's connection string; each test works in a schema
//! of its own, so tests run in parallel): `scripts/with-postgres.sh cargo test -p
//! integration-tests --test postgres` starts a throwaway server and sets it; `make test` does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gate::record::{BusinessRow, RecordStatus};
use gate::store::BusinessRows;
use gate::store::{CommitOutcome, IdempotencyStore, Reservation, StoreError};
use gate_postgres::{PostgresConfig, PostgresStore, MIGRATIONS, MIGRATIONS_TABLE};
use gate_testkit::conformance::{sample_record, NOW_MS};
use integration_tests::database_url;
use integration_tests::pg_proxy::PgProxy;

/// A schema name unique to this process and call, from `case` (lowercase, `_`, at most 63).
fn schema_for(case: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let case: String = case
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("t{stamp}_{}_{n}_{case}", std::process::id());
    name.truncate(63);
    name
}

fn config(url: &str, case: &str) -> PostgresConfig {
    PostgresConfig::new(url, 4).with_schema(schema_for(case))
}

async fn migrated(config: &PostgresConfig) -> PostgresStore {
    let store = PostgresStore::with_config(config).expect("store");
    store.migrate().await.expect("migrate");
    store
}

/// A fresh, migrated schema for `case`.
async fn fresh_store(case: &str) -> PostgresStore {
    migrated(&config(&database_url(), case)).await
}

// The store conformance suite, one test per case (the list lives once, in `gate_testkit::conformance`),
// each case in a fresh schema, plus every case in turn in one schema.
gate_testkit::store_conformance_tests!(case => Arc::new(fresh_store(case).await));

// The operator's port (gatectl's scans and audit history), each case in a fresh schema.
mod operator {
    use super::*;
    gate_testkit::operator_store_conformance_tests!(case => Arc::new(fresh_store(case).await));
}

/// The address of the test server, from a URL `postgresql://user@host:port/db?..`.
fn server_addr(url: &str) -> SocketAddr {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let host_port = rest.split(['/', '?']).next().unwrap_or(rest);
    host_port
        .parse()
        .unwrap_or_else(|_| panic!("GATE_TEST_DATABASE_URL: expected postgresql://user@IP:PORT/.."))
}

/// A proxy in front of the test server, and the connection string through it.
async fn proxied() -> (Arc<PgProxy>, String) {
    let url = database_url();
    let upstream = server_addr(&url);
    let (proxy, addr) = PgProxy::start(upstream).await;
    (
        proxy,
        url.replacen(&upstream.to_string(), &addr.to_string(), 1),
    )
}

#[tokio::test]
async fn migrations_apply_once_are_recorded_and_may_run_at_once() {
    let config = config(&database_url(), "migrations");
    let stores: Vec<PostgresStore> = (0..4)
        .map(|_| PostgresStore::with_config(&config).expect("store"))
        .collect();
    // Four processes starting at once (cold starts): each migration applied once.
    let applied = futures::future::join_all(stores.iter().map(|s| s.migrate())).await;
    let mut applied: Vec<Vec<i32>> = applied.into_iter().map(|r| r.expect("migrate")).collect();
    applied.sort();
    let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(applied, vec![vec![], vec![], vec![], all.clone()]);
    assert_eq!(
        stores[0].migrate().await.expect("migrate"),
        Vec::<i32>::new()
    );
    let client = stores[0].pool().get().await.expect("connection");
    let rows = client
        .query(
            &format!(
                "SELECT version, name FROM {}.{MIGRATIONS_TABLE} ORDER BY version",
                config.schema
            ),
            &[],
        )
        .await
        .expect("select");
    let recorded: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let expected: Vec<(i32, String)> = MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_string()))
        .collect();
    assert_eq!(recorded, expected);
}

/// The in-flight index is a partial index over records with a shard, the reconciler's query
/// can use it, and the view the metrics role may read has no `request` column (the claim
/// request holds a secret) nor the labels.
#[tokio::test]
async fn the_in_flight_index_is_partial_and_serves_the_reconciler_query() {
    let store = fresh_store("index").await;
    let client = store.pool().get().await.expect("connection");
    let schema = store.schema();
    let def: String = client
        .query_one(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = \
             'idempotency_in_flight'",
            &[&schema],
        )
        .await
        .expect("index")
        .get(0);
    assert!(
        def.ends_with("(inflight_shard, created_at_ms, pk) WHERE (inflight_shard IS NOT NULL)"),
        "{def}"
    );
    client
        .batch_execute("SET enable_seqscan = off")
        .await
        .expect("set");
    let plan: Vec<String> = client
        .query(
            &format!(
                "EXPLAIN SELECT pk FROM {schema}.in_flight WHERE inflight_shard = '07' AND \
                 created_at_ms < 5 AND (created_at_ms, pk) > (0, '') \
                 ORDER BY created_at_ms, pk LIMIT 3"
            ),
            &[],
        )
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        plan.iter()
            .any(|l| l.contains("using idempotency_in_flight")),
        "{plan:#?}"
    );
    let columns: Vec<String> = client
        .query(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = 'in_flight' ORDER BY ordinal_position",
            &[&schema],
        )
        .await
        .expect("columns")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        columns,
        [
            "pk",
            "event_key",
            "status",
            "lease_owner",
            "lease_until_ms",
            "created_at_ms",
            "expires_at_s",
            "inflight_shard"
        ]
    );
}

/// A commit whose transaction committed on the server but whose answer never came back (the
/// connection cut after the server's `ReadyForQuery`): the store retries on a new connection,
/// the retry meets the commit it repeats and answers `Committed`; one business row. The same
/// for a reserve (its own reservation, same lease token: `Reserved`).
#[tokio::test]
async fn an_answer_lost_after_the_commit_is_recognised_by_the_retry() {
    let (proxy, url) = proxied().await;
    let store = migrated(&config(&url, "lost_answer")).await;
    let r = sample_record("lost", "lost-answer", "owner-lost-1", NOW_MS);

    proxy.cut_after_answer_to("owner-lost-1");
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    assert_eq!(proxy.cuts(), 1, "the reserve's answer was not cut");
    assert_eq!(store.get(&r.pk).await.expect("get"), Some(r.clone()));

    let booking = BusinessRow::for_record(&r, "SLOT-LOST-ANSWER", NOW_MS + 10);
    proxy.cut_after_answer_to("SLOT-LOST-ANSWER");
    let out = store
        .commit(
            &r.pk,
            "owner-lost-1",
            "SLOT-LOST-ANSWER",
            &booking,
            NOW_MS + 10,
        )
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    assert_eq!(proxy.cuts(), 2, "the commit's answer was not cut");
    let stored = store.get(&r.pk).await.expect("get").expect("record");
    assert_eq!(stored.status, RecordStatus::Committed);
    assert_eq!(stored.effect_id.as_deref(), Some("SLOT-LOST-ANSWER"));
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
        Some(booking)
    );
}

/// A failover: every connection of the pool is reset at once. The next operations succeed on
/// new connections (the pool drops the closed ones; a statement that met a reset connection is
/// retried), and their answers are right.
#[tokio::test]
async fn a_failover_resets_every_connection_and_the_pool_recovers() {
    let (proxy, url) = proxied().await;
    let store = Arc::new(migrated(&config(&url, "failover")).await);
    let records: Vec<_> = (0..8)
        .map(|i| sample_record("failover", &format!("r{i}"), &format!("owner-{i}"), NOW_MS))
        .collect();
    // Fill the pool: four statements at once.
    let reserved =
        futures::future::join_all(records[..4].iter().map(|r| store.reserve(r, NOW_MS))).await;
    assert!(reserved
        .iter()
        .all(|r| *r.as_ref().expect("reserve") == Reservation::Reserved));
    let before = proxy.connections();
    assert!(before >= 2, "the pool opened {before} connections");

    proxy.reset_all();
    let reserved =
        futures::future::join_all(records.iter().map(|r| store.reserve(r, NOW_MS))).await;
    for (r, outcome) in records.iter().zip(reserved) {
        // The first four are this reservation's own (same lease token): Reserved again.
        assert_eq!(
            outcome.expect("reserve after the failover"),
            Reservation::Reserved,
            "{}",
            r.pk
        );
    }
    assert!(
        proxy.connections() > before,
        "no new connection after the reset"
    );
    for r in &records {
        assert_eq!(store.get(&r.pk).await.expect("get"), Some(r.clone()));
    }
}

/// Installs a trigger on `idempotency` that fails the next `n` inserts (or upserts) with
/// SQLSTATE `code`, counted by a sequence (not rolled back with the failing statement).
async fn fail_next_inserts(store: &PostgresStore, code: &str, n: i64) {
    let schema = store.schema();
    let client = store.pool().get().await.expect("connection");
    client
        .batch_execute(&format!(
            "CREATE SEQUENCE {schema}.injected; \
             CREATE FUNCTION {schema}.inject() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
               IF nextval('{schema}.injected') <= {n} THEN \
                 RAISE EXCEPTION 'injected failure' USING ERRCODE = '{code}'; \
               END IF; \
               RETURN NEW; \
             END $$; \
             CREATE TRIGGER inject BEFORE INSERT ON {schema}.idempotency \
               FOR EACH ROW EXECUTE FUNCTION {schema}.inject();"
        ))
        .await
        .expect("trigger");
}

/// A serialization failure (`40001`) and a deadlock (`40P01`), as the server reports them, are
/// retried: after up to three the statement succeeds; after four in a row the caller gets
/// `TransactionConflict` (transient: the event is redelivered) and nothing was written.
#[tokio::test]
async fn serialization_failures_and_deadlocks_are_retried() {
    for (code, case) in [("40001", "serialization"), ("40P01", "deadlock")] {
        let store = fresh_store(case).await;
        fail_next_inserts(&store, code, 3).await;
        let r = sample_record(case, "retried", "owner-a", NOW_MS);
        assert_eq!(
            store.reserve(&r, NOW_MS).await.expect("reserve"),
            Reservation::Reserved,
            "{code}"
        );
        assert_eq!(store.get(&r.pk).await.expect("get"), Some(r));

        let store = fresh_store(&format!("{case}_spent")).await;
        fail_next_inserts(&store, code, 4).await;
        let r = sample_record(case, "spent", "owner-a", NOW_MS);
        let out = store.reserve(&r, NOW_MS).await;
        assert!(
            matches!(out, Err(StoreError::TransactionConflict(_))),
            "{code}: {out:?}"
        );
        assert_eq!(store.get(&r.pk).await.expect("get"), None);
    }
}

/// A record locked by a long transaction: with a statement timeout, the commit gives up with a
/// clear transient error naming it (nothing written) and succeeds once the lock is gone; with a
/// lock timeout, the same, naming the lock wait.
#[tokio::test]
async fn statement_and_lock_timeouts_are_clear_transient_errors() {
    let url = database_url();
    for (case, statement_timeout, lock_timeout, named) in [
        (
            "stmt_timeout",
            Some(Duration::from_millis(300)),
            None,
            "statement timeout",
        ),
        (
            "lock_timeout",
            None,
            Some(Duration::from_millis(300)),
            "lock wait timeout",
        ),
    ] {
        let mut config = config(&url, case);
        config.statement_timeout = statement_timeout;
        config.lock_timeout = lock_timeout;
        let store = migrated(&config).await;
        let r = sample_record(case, "locked", "owner-a", NOW_MS);
        assert_eq!(
            store.reserve(&r, NOW_MS).await.expect("reserve"),
            Reservation::Reserved
        );

        let mut holder = store.pool().get().await.expect("connection");
        let tx = holder.transaction().await.expect("begin");
        tx.execute(
            &format!(
                "SELECT 1 FROM {}.idempotency WHERE pk = $1 FOR UPDATE",
                config.schema
            ),
            &[&r.pk],
        )
        .await
        .expect("lock");
        let booking = BusinessRow::for_record(&r, "SLOT-T", NOW_MS + 1);
        let out = store
            .commit(&r.pk, "owner-a", "SLOT-T", &booking, NOW_MS + 1)
            .await;
        match &out {
            Err(StoreError::Unavailable(msg)) => assert!(msg.message().contains(named), "{msg}"),
            other => panic!("{case}: {other:?}"),
        }
        assert_eq!(
            store.business_row(&r.event_key).await.expect("booking"),
            None
        );
        tx.rollback().await.expect("rollback");
        let out = store
            .commit(&r.pk, "owner-a", "SLOT-T", &booking, NOW_MS + 2)
            .await
            .expect("commit");
        assert_eq!(out, CommitOutcome::Committed);
    }
}

/// A connection string that does not parse is a configuration error that never shows the
/// string (it holds the password); `Debug` of the config redacts it.
#[test]
fn a_bad_connection_string_is_reported_without_its_secret() {
    let err = PostgresStore::connect("postgresql://gate:s3cret@[::1:5432/x", 1)
        .expect_err("must not parse");
    assert!(!err.to_string().contains("s3cret"), "{err}");
    let config = PostgresConfig::new("postgresql://gate:s3cret@127.0.0.1/gate", 1);
    assert!(!format!("{config:?}").contains("s3cret"));
}

/// The incident replay through PostgreSQL prints the same report as through the memory store:
/// 39 slots, 39 bookings, 46 duplicates suppressed.
#[tokio::test]
async fn the_incident_replays_through_postgres_with_the_same_figures() {
    use sim::replay::{self, HandlerKind, ReplayOptions};
    use sim::scenario::Scenario;
    use sim::stores::{self, StoreKind};

    let scenario = Scenario::load("monday-2025-06-09").unwrap();
    let store = stores::build_at(StoreKind::Postgres, None, Some(&database_url()))
        .await
        .unwrap();
    let postgres = replay::run(
        &scenario,
        ReplayOptions {
            handler: HandlerKind::Gated,
            store: Some(store),
        },
    )
    .await
    .unwrap();
    let memory = replay::run(&scenario, ReplayOptions::gated())
        .await
        .unwrap();
    assert_eq!(postgres.slots_issued, 39);
    assert_eq!(postgres.tms_bookings, 39);
    assert_eq!(postgres.duplicates_suppressed, 46);
    assert_eq!(postgres.still_in_flight, 0);
    assert_eq!(
        serde_json::to_value(&postgres).unwrap(),
        serde_json::to_value(&memory).unwrap(),
        "PostgreSQL and the memory store give the same report"
    );
}

/// The consumer's store selected by configuration (`STORE=postgres`, `DATABASE_URL`, the
/// migrations at cold start) and built by the wiring (`gate_lambda::build_store`) processes
/// an event: the slot is claimed once and committed with its booking; the duplicate is absorbed.
#[tokio::test]
async fn the_wiring_builds_the_postgres_store_from_configuration() {
    use gate::clock::{Clock, ManualClock};
    use gate::consumer::{Invocation, RecordOutcome};
    use gate::manual::MemoryManualQueue;
    use gate_lambda::{build_store, fixed_env, Config, DatabaseUrl, StoreConfig};
    use integration_tests::field_cases::{gate, terminal_core, LOST_ANSWER_BODY, T0};
    use integration_tests::{sqs_event, unique};
    use sim::dst::CoreTerminal;

    let url = database_url();
    let integration = unique("pg-wiring");
    // Its own schema: the default one (`gate`) would keep the event's row from an earlier run
    // against the same database.
    let schema = schema_for("wiring");
    let config = Config::<()>::from_env(fixed_env(&[
        ("DATABASE_SCHEMA", schema.as_str()),
        ("INTEGRATION_NAME", integration.as_str()),
        (
            "MANUAL_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/1/manual",
        ),
        ("STORE", "postgres"),
        ("DATABASE_URL", url.as_str()),
        ("DATABASE_POOL_SIZE", "2"),
        ("DATABASE_RUN_MIGRATIONS", "true"),
    ]))
    .expect("configuration");
    let StoreConfig::Postgres(settings) = &config.lambda.store else {
        panic!(
            "STORE=postgres selects PostgreSQL: {:?}",
            config.lambda.store
        );
    };
    assert!(matches!(settings.url, DatabaseUrl::Local(_)));
    // No AWS call is made: the connection string is local (`DATABASE_URL`), the queue unused.
    let aws = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    // PostgreSQL's columns are fixed: a label is checked against the neutral names whatever the
    // integration's columns, so `written_at` under truck-slot's names is an init error here
    // (on DynamoDB it is the integration's own label).
    let refused = build_store(
        &config.lambda.store,
        &aws,
        gate::record::RowColumns::LEGACY,
        &["written_at"],
    )
    .await
    .err()
    .expect("a label named like a PostgreSQL column is refused");
    assert!(
        refused.to_string().contains("label_names") && refused.to_string().contains("written_at"),
        "{refused}"
    );
    let (store, _index, _purge) = build_store(
        &config.lambda.store,
        &aws,
        gate::record::RowColumns::NEUTRAL,
        &[],
    )
    .await
    .expect("store built, migrated");
    let clock = Arc::new(ManualClock::new(T0));
    let core = terminal_core(&clock);
    let manual = Arc::new(MemoryManualQueue::new());
    let gate = gate(
        store.clone(),
        &integration,
        Arc::new(CoreTerminal::new(core.clone())),
        manual.clone(),
        clock.clone() as Arc<dyn Clock>,
    );
    let deliver = |message: &'static str, request: &'static str| {
        let invocation = Invocation {
            request_id: request.into(),
            deadline_ms: clock.now_ms() + 60_000,
        };
        let gate = &gate;
        async move {
            gate.handle_batch(sqs_event(&[(message, LOST_ANSWER_BODY)]), &invocation)
                .await
        }
    };
    let first = deliver("m-pg-1", "inv-pg-1").await;
    let slot = core
        .slots()
        .first()
        .map(|s| s.effect_id.clone())
        .expect("a slot");
    assert_eq!(
        first.records[0].outcome,
        RecordOutcome::Committed { effect_id: slot }
    );
    assert!(first.response.batch_item_failures.is_empty());
    let second = deliver("m-pg-2", "inv-pg-2").await;
    assert_eq!(
        second.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(core.slots_issued(), 1);
    assert!(manual.items().is_empty());
    let event_key = first.records[0].event_key.clone().expect("event key");
    assert!(store
        .get(&gate::record::record_pk(&integration, &event_key))
        .await
        .expect("get")
        .is_some_and(|r| r.status == RecordStatus::Committed));
}
