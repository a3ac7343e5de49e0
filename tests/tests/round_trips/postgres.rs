//! The consumer's round trips on PostgreSQL, counted on the wire by the stores bench's counting
//! proxy ([`super::pg_wire`]: an extended-protocol exchange, `Sync` answered by `ReadyForQuery`,
//! is one round trip; the per-transaction `BEGIN; SET LOCAL ..` and `COMMIT` the store sends in
//! the same write as its statement are counted apart and add no wait).
//!
//! What the design gives, one statement per store operation (`gate_postgres`):
//!
//! | case | round trips |
//! | --- | --- |
//! | new event | **2**: the reserve with its guard (one statement of data-modifying CTEs), the commit (record and business row, one statement) |
//! | duplicate of a finished event | **1**: the reserve, its conflict answering with the record |
//! | duplicate while the first is in flight (live lease) | **1** |
//! | a second event key for a natural key another holds | **3**: the reserve with its guard (refused, the holder in the same answer), `manual`, routed (the manual queue is not the store) |
//! | redelivery of a stranded record (expired lease) | **4**: the reserve (a conflict: no guard written), the take-over, its own guard again, the commit |
//! | an integration with no natural key: new event / duplicate | **2** (reserve, commit) / **1** |
//!
//! Needs `GATE_TEST_DATABASE_URL` (`scripts/with-postgres.sh`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use gate_postgres::{PostgresConfig, PostgresStore};
use integration_tests::database_url;

use super::pg_wire::{self, WireCounts};
use super::*;

/// The gate over a `PostgresStore` connected through the counting proxy (one connection), and
/// a second store on the same schema, connected directly ("someone else", not counted).
struct PgWorld {
    gate: Gate,
    counts: Arc<WireCounts>,
    clock: Arc<ManualClock>,
    other: PostgresStore,
}

/// The server's address in a `postgresql://user@IP:PORT/db?..` URL.
fn server_addr(url: &str) -> SocketAddr {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let host_port = rest.split(['/', '?']).next().unwrap_or(rest);
    host_port
        .parse()
        .unwrap_or_else(|_| panic!("GATE_TEST_DATABASE_URL: expected postgresql://user@IP:PORT/.."))
}

impl PgWorld {
    async fn new(name: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let schema = format!(
            "rt_{}_{}_{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let url = database_url();
        let upstream = server_addr(&url);
        let (counts, proxy) = pg_wire::start(upstream).await.expect("proxy");
        let proxied = url.replacen(&upstream.to_string(), &proxy.to_string(), 1);
        let store = |u: &str| {
            PostgresStore::with_config(&PostgresConfig::new(u, 1).with_schema(schema.clone()))
                .expect("store")
        };
        let other = store(&url);
        other.migrate().await.expect("migrate");
        let counted = store(&proxied);
        // The connection opened (and checked writable) before anything is counted.
        counted.get("warm-up").await.expect("warm-up");
        let clock = Arc::new(ManualClock::new(T0));
        let gate = Gate {
            config: GateConfig::new(format!("rt-{name}")),
            store: Arc::new(counted),
            integration: Arc::new(truck_slot::TruckSlot::new(
                Arc::new(KeyedTerminal::default()),
                vec!["ECT-DELTA".to_string()],
            )),
            manual: Arc::new(MemoryManualQueue::new()),
            clock: clock.clone(),
        };
        counts.take();
        Self {
            gate,
            counts,
            clock,
            other,
        }
    }

    fn invocation(&self, request_id: &str) -> Invocation {
        Invocation {
            request_id: request_id.to_string(),
            deadline_ms: self.clock.now_ms() + 60_000,
        }
    }

    /// The round trips since the last call.
    fn take_round_trips(&self) -> u64 {
        self.counts.take().round_trips
    }
}

#[tokio::test]
async fn postgres_new_event_costs_two_round_trips_and_a_duplicate_one() {
    let w = PgWorld::new("consumer").await;
    let inv = w.invocation("req-1");
    let b = body("PCS-PG-1", CONTAINERS[0], 4711);
    let report = w.gate.handle_batch(sqs_event(&[("m1", &b)]), &inv).await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Committed { .. }),
        "{report:?}"
    );
    assert_eq!(w.take_round_trips(), 2, "a new event");

    let report = w.gate.handle_batch(sqs_event(&[("m2", &b)]), &inv).await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(w.take_round_trips(), 1, "a duplicate of a committed event");

    // A duplicate while the first delivery still holds a live lease (only its reserve exists).
    let b2 = body("PCS-PG-2", CONTAINERS[1], 4711);
    let n = parse_notification(&b2, T0, &["ECT-DELTA".into()]).expect("parses");
    let keys = derive_keys(&n).expect("keys");
    let record = w.gate.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &w.invocation("req-first"),
        T0,
    );
    assert_eq!(
        w.other.reserve(&record, T0).await.expect("reserve"),
        Reservation::Reserved
    );
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m3", &b2)]), &w.invocation("req-second"))
        .await;
    assert_eq!(report.records[0].outcome, RecordOutcome::DuplicateInFlight);
    assert_eq!(w.take_round_trips(), 1, "a duplicate in flight");
}

#[tokio::test]
async fn postgres_natural_key_collision_costs_three_round_trips_and_no_call() {
    let w = PgWorld::new("collision").await;
    let inv = w.invocation("req-1");
    let first = body("PCS-PG-NK-1", CONTAINERS[2], 4711);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m1", &first)]), &inv)
        .await;
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert_eq!(w.take_round_trips(), 2);
    let second = body("PCS-PG-NK-2", CONTAINERS[2], 4711);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m2", &second)]), &inv)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::NaturalKeyCollision)
    );
    assert_eq!(
        w.take_round_trips(),
        3,
        "reserve with guard, manual, routed"
    );
    let second_key = truck_slot::keys::event_key_of("PCS-PG-NK-2", CONTAINERS[2]);
    let stored = w
        .other
        .get(&format!("rt-collision#{second_key}"))
        .await
        .expect("get")
        .expect("record");
    assert_eq!(stored.status, RecordStatus::Manual);
    assert!(
        stored.effect_ids.is_empty(),
        "the second event key was called"
    );
}

#[tokio::test]
async fn postgres_redelivery_of_a_stranded_record_takes_over_in_four_round_trips() {
    let w = PgWorld::new("takeover").await;
    let created = w.clock.now_ms() - 5 * 60_000;
    let b = body("PCS-PG-3", CONTAINERS[3], 4711);
    let n = parse_notification(&b, created, &["ECT-DELTA".into()]).expect("parses");
    let keys = derive_keys(&n).expect("keys");
    let dead = Invocation {
        request_id: "dead-PCS-PG-3".to_string(),
        deadline_ms: created,
    };
    let record = w.gate.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &dead,
        created,
    );
    assert_eq!(
        w.other.reserve(&record, created).await.expect("reserve"),
        Reservation::Reserved
    );
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m2", &b)]), &w.invocation("req-2"))
        .await;
    assert!(report.records[0].took_over);
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    assert_eq!(
        w.take_round_trips(),
        4,
        "reserve (conflict), take-over, guard, commit"
    );
}

#[tokio::test]
async fn postgres_without_a_natural_key_a_new_event_costs_two_round_trips() {
    let mut w = PgWorld::new("unguarded").await;
    w.gate.integration = Arc::new(Unguarded);
    let inv = w.invocation("req-1");
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m1", "INV-PG-1")]), &inv)
        .await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Committed { .. }),
        "{report:?}"
    );
    assert_eq!(w.take_round_trips(), 2);
    let report = w
        .gate
        .handle_batch(sqs_event(&[("m2", "INV-PG-1")]), &inv)
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Committed)
    );
    assert_eq!(w.take_round_trips(), 1);
}
