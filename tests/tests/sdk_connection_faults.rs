//! Connection faults the AWS SDK hands over without a retry of its own (awslabs/aws-sdk-rust
//! #1402, an HTTP/2 `GOAWAY` as `DispatchFailure`; #440, `IncompleteMessage`;
//! aws/aws-lambda-web-adapter #830, a keep-alive connection dead after a freeze), injected by a
//! TCP proxy in front of moto and in front of the terminal simulator
//! ([`integration_tests::http_cut_proxy`]): a connection closed or reset after its request was
//! forwarded (the write landed, its answer lost), and idle keep-alive connections killed.
//!
//! The DynamoDB client makes one attempt per request (`store_via_with(.., 1)`): the SDK never
//! retries, so every fault reaches the store's own code, as the faults above do in production.
//! Right values: every write recognises itself (one record, committed once; one business row;
//! one slot), nothing reaches a person.
//!
//! Run with `scripts/with-moto.sh cargo test -p integration-tests --test sdk_connection_faults`.

use std::sync::Arc;

use gate::clock::ManualClock;
use gate::consumer::{Invocation, RecordOutcome};
use gate::manual::MemoryManualQueue;
use gate::record::{BusinessRow, RecordStatus};
use gate::store::BusinessRows;
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, GuardOutcome, IdempotencyStore, Reservation,
};
use gate_dynamo::DynamoStore;
use gate_testkit::conformance::{sample_natural_key, sample_record};
use integration_tests::fault_proxy::store_via_with;
use integration_tests::field_cases::{gate, terminal_core, LOST_ANSWER_BODY, T0};
use integration_tests::http_cut_proxy::{Cut, HttpCutProxy, Match};
use integration_tests::{dynamo_client, moto_endpoint, sqs_event, unique};
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig};

const OWNER: &str = "req-1/n#0";

/// A store whose client reaches moto through a fresh cut proxy, one attempt per request.
async fn store_behind_proxy(name: &str) -> (Arc<HttpCutProxy>, DynamoStore) {
    let (proxy, endpoint) = HttpCutProxy::start(&moto_endpoint()).await;
    let store = store_via_with(&endpoint, name, 1).await;
    (proxy, store)
}

/// Every write of the record's life, each with its connection failed after the write reached
/// moto (closed for some, reset for the others): each one sent once more and recognised as its
/// own, the record committed once with its business row.
#[tokio::test]
async fn every_write_whose_answer_was_lost_on_its_connection_recognises_itself() {
    let (proxy, store) = store_behind_proxy("sdk-cut").await;
    let prefix = unique("cut");
    let now = T0;
    let r = sample_record(&prefix, "every-write", OWNER, now);

    proxy.cut_after_forward(Match::AmzTarget("PutItem"), 1, Cut::Close);
    assert_eq!(
        store.reserve(&r, now).await.expect("reserve"),
        Reservation::Reserved
    );
    assert_eq!(
        proxy.forwarded_count("PutItem"),
        2,
        "{:?}",
        proxy.forwarded()
    );

    proxy.cut_after_forward(Match::AmzTarget("PutItem"), 1, Cut::Reset);
    let nk = sample_natural_key(&r, now);
    assert_eq!(
        store.guard(&r, &nk, now + 1).await.expect("guard"),
        GuardOutcome::Held
    );
    assert_eq!(proxy.forwarded_count("PutItem"), 4);

    proxy.cut_after_forward(Match::AmzTarget("UpdateItem"), 1, Cut::Close);
    assert!(store
        .extend_lease(&r.pk, OWNER, now + 60_000, now + 2)
        .await
        .expect("extend"));
    assert_eq!(proxy.forwarded_count("UpdateItem"), 2);

    proxy.cut_after_forward(Match::AmzTarget("TransactWriteItems"), 1, Cut::Reset);
    let booking = BusinessRow::for_record(&r, "EFFECT-1", now + 3);
    assert!(matches!(
        store
            .commit(&r.pk, OWNER, "EFFECT-1", &booking, now + 3)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    ));
    assert_eq!(proxy.forwarded_count("TransactWriteItems"), 2);
    assert_eq!(proxy.cuts(), 4);

    let record = store.get(&r.pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Committed);
    assert_eq!(record.effect_id.as_deref(), Some("EFFECT-1"));
    assert_eq!(record.effect_ids.len(), 1);
    assert_eq!(record.lease_owner.as_deref(), Some(OWNER));
    let row = store
        .business_row(&r.event_key)
        .await
        .expect("row")
        .expect("a business row");
    assert_eq!(row.effect_id, "EFFECT-1");
    assert_eq!(bookings_rows(&store).await, 1, "one business row");
}

/// A release and a finish (a routing's mark) whose connections failed after they landed: the
/// re-send meets its own write (the same condition, the same values; the old item already
/// finished by this holder).
#[tokio::test]
async fn a_release_and_a_finish_whose_answers_were_lost_recognise_themselves() {
    let (proxy, store) = store_behind_proxy("sdk-cut-fin").await;
    let prefix = unique("cut-fin");
    let now = T0;
    let released = sample_record(&prefix, "released", OWNER, now);
    let finished = sample_record(&prefix, "finished", OWNER, now);
    for r in [&released, &finished] {
        assert_eq!(
            store.reserve(r, now).await.expect("reserve"),
            Reservation::Reserved
        );
    }

    proxy.cut_after_forward(Match::AmzTarget("UpdateItem"), 1, Cut::Reset);
    store
        .release_lease(&released.pk, OWNER, now + 1)
        .await
        .expect("release");
    let after = store.get(&released.pk).await.expect("get").expect("record");
    assert_eq!(after.status, RecordStatus::InFlight);
    assert_eq!(after.lease_until_ms, Some(0), "released");

    proxy.cut_after_forward(Match::AmzTarget("UpdateItem"), 1, Cut::Close);
    let outcome = store
        .finish(
            &finished.pk,
            OWNER,
            RecordStatus::Manual,
            "to a person",
            b"{}",
            FinishGuard::Lease,
            now + 2,
        )
        .await
        .expect("finish");
    assert_eq!(outcome, FinishOutcome::Finished);
    assert_eq!(proxy.forwarded_count("UpdateItem"), 4, "each sent twice");
    assert_eq!(proxy.cuts(), 2);
    let after = store.get(&finished.pk).await.expect("get").expect("record");
    assert_eq!(after.status, RecordStatus::Manual);
    assert!(after.route_pending);
}

/// A notification like the field faults' sample with its own id, container and window start hour
/// (two hours long).
fn notification(id: &str, container: &str, start_hour: u32) -> String {
    LOST_ANSWER_BODY
        .replace("PCS-F13-3", id)
        .replace("MWCU6059784", container)
        .replace("T08:00:00Z", &format!("T{start_hour:02}:00:00Z"))
        .replace("T10:00:00Z", &format!("T{:02}:00:00Z", start_hour + 2))
}

/// The consumer end to end, DynamoDB behind one cut proxy and the terminal simulator behind
/// another. First a notification whose reserve, guard and commit each lose their answer on a
/// closed or reset connection, and whose claim does too (the terminal made the slot); then one
/// through a clean run (keep-alive connections left idle in both clients' pools); then every idle
/// keep-alive connection dies (an environment frozen and thawed) and a third notification
/// arrives. Right: each notification booked once (one slot each), committed once with one
/// business row, nothing to a person; no batch item failure for the first two, and the third
/// committed within three deliveries (the store's idle connections it meets all dead).
#[tokio::test]
async fn the_consumer_books_once_through_lost_answers_and_dead_keep_alive_connections() {
    let (store_proxy, store) = store_behind_proxy("sdk-cut-e2e").await;
    let clock = Arc::new(ManualClock::new(T0));
    let core = terminal_core(&clock);
    let (terminal_addr, _server) = sim::terminal::spawn(core.clone()).await.expect("terminal");
    let (terminal_proxy, terminal_url) = HttpCutProxy::start(&terminal_addr.to_string()).await;
    let terminal = HttpTerminal::new(HttpTerminalConfig::new(terminal_url)).expect("client");
    let manual = Arc::new(MemoryManualQueue::new());
    let integration = unique("cut-e2e");
    let store = Arc::new(store);
    let g = gate(
        store.clone(),
        &integration,
        Arc::new(terminal),
        manual.clone(),
        clock.clone(),
    );
    // Notification `n` delivered up to `deliveries` times (SQS's redelivery of a batch item
    // failure); its effect id once committed.
    let run = |n: u32, body: String, deliveries: u32| {
        let g = &g;
        async move {
            let message_id = format!("m-cut-{n}");
            for delivery in 1..=deliveries {
                let invocation = Invocation {
                    request_id: format!("inv-cut-{n}-{delivery}"),
                    deadline_ms: T0 + 60_000,
                };
                let report = g
                    .handle_batch(
                        sqs_event(&[(message_id.as_str(), body.as_str())]),
                        &invocation,
                    )
                    .await;
                if report.response.batch_item_failures.is_empty() {
                    return match &report.records[0].outcome {
                        RecordOutcome::Committed { effect_id } => effect_id.clone(),
                        other => panic!("notification {n}, delivery {delivery}: {other:?}"),
                    };
                }
                println!(
                    "notification {n}, delivery {delivery}: a batch item failure: {:?}",
                    report.records
                );
            }
            panic!("notification {n}: not committed in {deliveries} deliveries")
        }
    };

    // The reserve's `PutItem` cut; its re-send let through; the guard's `PutItem` cut.
    store_proxy.cut_after_forward(Match::AmzTarget("PutItem"), 1, Cut::Close);
    store_proxy.cut_after_forward_skipping(Match::AmzTarget("PutItem"), 1, 1, Cut::Reset);
    store_proxy.cut_after_forward(Match::AmzTarget("TransactWriteItems"), 1, Cut::Close);
    terminal_proxy.cut_after_forward(Match::Route("POST", "/slots"), 1, Cut::Reset);
    let first = run(1, LOST_ANSWER_BODY.to_string(), 1).await;
    assert_eq!(core.slots_issued(), 1, "one claim made one slot");
    assert_eq!(
        terminal_proxy.forwarded_count("POST /slots"),
        2,
        "the claim sent once more"
    );
    assert_eq!(store_proxy.cuts(), 3);
    assert_eq!(terminal_proxy.cuts(), 1);

    let second = run(2, notification("PCS-F13-4", "CSQU3054383", 12), 1).await;
    // Every idle connection dies, unforwarded: nothing a dead connection carried landed. The
    // store's client may hold more than one idle connection (hyper opens another when a request
    // asks before the last one is back in its pool), so the reserve's one re-send can meet a
    // second dead one: then the record is a batch item failure that SQS delivers again.
    store_proxy.kill_idle();
    terminal_proxy.kill_idle();
    let third = run(3, notification("PCS-F13-5", "ABCD1234560", 16), 3).await;
    assert!(
        store_proxy.killed() >= 1,
        "a request met a dead DynamoDB connection"
    );
    assert_eq!(
        terminal_proxy.killed(),
        1,
        "the claim met a dead terminal connection"
    );

    assert_eq!(core.slots_issued(), 3, "one slot per notification");
    let slots: Vec<String> = core.slots().into_iter().map(|s| s.effect_id).collect();
    assert_eq!(slots, [first, second, third]);
    assert!(manual.items().is_empty(), "nothing to a person");
    assert_eq!(bookings_rows(&store).await, 3, "one business row each");
    for slot in &slots {
        let row = store
            .business_row(&slot_event(&store, slot).await)
            .await
            .expect("row")
            .expect("booked");
        assert_eq!(&row.effect_id, slot);
    }
}

/// The business rows in the store's business table (a consistent scan).
async fn bookings_rows(store: &DynamoStore) -> usize {
    let out = dynamo_client()
        .await
        .scan()
        .table_name(store.business_table())
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    out.items().len()
}

/// The event key of the business row booked with `slot` (one scan).
async fn slot_event(store: &DynamoStore, slot: &str) -> String {
    let out = dynamo_client()
        .await
        .scan()
        .table_name(store.business_table())
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    let columns = store.row_columns();
    out.items()
        .iter()
        .find(|item| {
            item.values()
                .any(|v| v.as_s().is_ok_and(|s| s.as_str() == slot))
        })
        .and_then(|item| item.get(columns.event_key))
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_else(|| panic!("no business row holds slot {slot}"))
}

/// The core's client under `Idempotency-Key` against the test kit's server (which honours keys)
/// behind the cut proxy: a call whose connection was closed or reset after the server made the
/// effect is sent once more, the same bytes under the same key, and gets the stored answer.
/// Right: one effect per key, the effect's id as the outcome, each call forwarded twice; through
/// [`gate_http::ServerClient`] (a new connection for the re-send) and through [`gate_http::call`].
#[tokio::test]
async fn a_call_whose_connection_failed_is_sent_once_more_under_its_key() {
    use gate::effect::CallOutcome;
    use gate::idempotency_key::JsonIdAt;
    use gate_testkit::{IdempotencyServer, ServerConfig};
    const JOBS: JsonIdAt = JsonIdAt::new("job server", "/id");

    let clock = Arc::new(ManualClock::new(T0));
    let server = IdempotencyServer::start(ServerConfig::new("/jobs", "id"), clock)
        .await
        .expect("server");
    let (proxy, base) = HttpCutProxy::start(server.url()).await;
    let clients = gate_http::ServerClient::build("gate-test/1", |b| {
        b.timeout(std::time::Duration::from_secs(5))
    })
    .expect("clients");
    let cases = [
        ("k-close", Cut::Close, true),
        ("k-reset", Cut::Reset, true),
        ("k-plain", Cut::Reset, false),
    ];
    for (key, cut, fresh) in cases {
        proxy.cut_after_forward(Match::Route("POST", "/jobs"), 1, cut);
        let request = clients
            .pooled()
            .post(format!("{base}/jobs"))
            .header("content-type", "application/json")
            .body(format!("{{\"job\":\"{key}\"}}"));
        let outcome = if fresh {
            clients.call(request, key, &JOBS).await
        } else {
            gate_http::call(request, key, &JOBS).await
        };
        let made = server.effects();
        let ids = made
            .iter()
            .find(|(k, _)| k.contains(key))
            .map(|(_, ids)| ids.clone())
            .unwrap_or_default();
        assert_eq!(ids.len(), 1, "{key}: one effect, {made:?}");
        match outcome {
            CallOutcome::Done(effect) => assert_eq!(effect.effect_id, ids[0], "{key}"),
            other => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(server.effects_made(), 3);
    assert_eq!(proxy.cuts(), 3);
    assert_eq!(
        proxy.forwarded_count("POST /jobs"),
        6,
        "each call sent twice"
    );
}

/// A call and its re-send end within the exchange limit ([`gate_http::ServerClient::with_exchange_limit`]):
/// a server that reads the request and closes the connection 500 ms later without an answer
/// gets no re-send from a client limited to 200 ms (nothing is left of it), and one re-send from
/// a client without a limit. Right: 1 request, then 2; neither call is `Done`.
#[tokio::test]
async fn a_re_send_never_outlives_the_exchange_limit() {
    use gate::effect::CallOutcome;
    use gate::idempotency_key::JsonIdAt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    const JOBS: JsonIdAt = JsonIdAt::new("job server", "/id");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                    counted.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                drop(socket);
            });
        }
    });
    for (limit, expected) in [(Some(Duration::from_millis(200)), 1), (None, 2)] {
        requests.store(0, Ordering::SeqCst);
        let built =
            gate_http::ServerClient::build("gate-test/1", |b| b.timeout(Duration::from_secs(5)))
                .expect("clients");
        let clients = match limit {
            Some(limit) => built.with_exchange_limit(limit),
            None => built,
        };
        let request = clients
            .pooled()
            .post(format!("http://{addr}/jobs"))
            .header("content-type", "application/json")
            .body("{\"job\":\"limited\"}");
        let outcome = clients.call(request, "k-limit", &JOBS).await;
        assert!(
            !matches!(outcome, CallOutcome::Done(_)),
            "{limit:?}: {outcome:?}"
        );
        assert_eq!(
            requests.load(Ordering::SeqCst),
            expected,
            "requests sent with the limit {limit:?}"
        );
    }
}
