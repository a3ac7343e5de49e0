//! Tests of `stores`.

use super::*;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "set {name}: run under scripts/with-postgres.sh scripts/with-moto.sh (make test does)"
        )
    })
}

/// The smoke test of the harness (`make test`): a handful of events on both stores; the
/// round trips, not the times. A new event is the reserve with the natural key's guard, then the
/// commit: on PostgreSQL the first is one statement (2 round trips), on DynamoDB two requests (3);
/// a duplicate is the reserve alone on either store (1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_event_is_two_round_trips_on_postgres_three_on_dynamodb_a_duplicate_one() {
    let plan = Plan {
        events: 5,
        duplicates: 3,
        warmup: 3,
        runs: 1,
    };
    // Tomorrow's window (the gate refuses ended windows and windows over a year ahead).
    let window = crate::window();
    let stamp = format!("smoke{}", std::process::id());
    let runs = run(
        &env("GATE_TEST_DATABASE_URL"),
        &env("MOTO_ENDPOINT"),
        &stamp,
        &plan,
        &window,
    )
    .await
    .expect("the harness runs");
    let stores: Vec<&str> = runs.iter().map(|r| r.store).collect();
    assert_eq!(stores, vec!["postgresql", "dynamodb-moto"]);
    for r in &runs {
        let (n, d) = (&r.new, &r.duplicate);
        assert_eq!((n.deliveries, d.deliveries), (5, 3), "{}", r.store);
        let new_event = if r.store == "postgresql" { 2 } else { 3 };
        assert_eq!(
            (n.round_trips_min, n.round_trips_max),
            (new_event, new_event),
            "{}: round trips per new event",
            r.store
        );
        assert_eq!(
            (d.round_trips_min, d.round_trips_max),
            (1, 1),
            "{}: round trips per duplicate",
            r.store
        );
        let calls = |m: &[(&str, u64)]| -> BTreeMap<String, u64> {
            m.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        assert_eq!(
            n.port_calls,
            calls(&[("commit", 5), ("reserve_with_guard", 5)])
        );
        assert_eq!(d.port_calls, calls(&[("reserve_with_guard", 3)]));
    }
    // On the wire: PostgreSQL executes one unnamed statement per round trip (parsed with it,
    // nothing prepared apart), each wrapped in its own transaction by two simple queries sent in
    // the same write (`BEGIN; SET LOCAL` the default timeouts, and `COMMIT`); DynamoDB sends a
    // PutItem per reserve and per guard and a TransactWriteItems per commit.
    assert_eq!(
        runs[0].new.wire,
        calls_of(&[("executed", 10), ("prepared", 10), ("simple", 20)])
    );
    assert_eq!(
        runs[0].duplicate.wire,
        calls_of(&[("executed", 3), ("prepared", 3), ("simple", 6)])
    );
    assert_eq!(
        runs[1].new.wire,
        calls_of(&[("PutItem", 10), ("TransactWriteItems", 5)])
    );
    assert_eq!(runs[1].duplicate.wire, calls_of(&[("PutItem", 3)]));
}

fn calls_of(m: &[(&str, u64)]) -> BTreeMap<String, u64> {
    m.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}
