//! The Lambda runtime path: the real consumer binary under `cargo lambda watch`, against moto
//! (tables and queues created here) and the terminal simulator, invoked with the `events/` files
//! through `cargo lambda invoke`. Needs `cargo-lambda` on PATH (`make test` installs it into
//! `.venv`) and `MOTO_ENDPOINT`.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use gate::clock::{Clock, SystemClock};
use gate::record::RecordStatus;
use gate::store::IdempotencyStore;
use integration_tests::lambda_watch::{free_port, invoke, workspace_root, Watch};
use integration_tests::{dynamo_client, fresh_queue, fresh_tables, moto_endpoint, sqs_client};
use sim::terminal::{self, TerminalConfig, TerminalCore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_binary_processes_the_event_files_exactly_once() {
    let endpoint = moto_endpoint();
    let dynamo = dynamo_client().await;
    let (idempotency, bookings) = fresh_tables(&dynamo, "lambda").await;
    let sqs = sqs_client().await;
    let manual_url = fresh_queue(&sqs, "lambda-manual").await;
    let core = TerminalCore::new(
        TerminalConfig::default(),
        Arc::new(SystemClock) as Arc<dyn Clock>,
    );
    let (terminal_addr, _server) = terminal::spawn(core.clone()).await.expect("terminal");

    let port = free_port();
    let child = Command::new("cargo")
        .current_dir(workspace_root())
        .args([
            "lambda",
            "watch",
            // Build once; do not rebuild when files change while the test runs.
            "--ignore-changes",
            "-A",
            "127.0.0.1",
            "-P",
            &port.to_string(),
        ])
        .env("AWS_ENDPOINT_URL", &endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "eu-west-1")
        .env("IDEMPOTENCY_TABLE", &idempotency)
        .env("BOOKINGS_TABLE", &bookings)
        .env("MANUAL_QUEUE_URL", &manual_url)
        .env("TERMINAL_BASE_URL", format!("http://{terminal_addr}"))
        .env("INTEGRATION_NAME", "lambda-test")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("cargo lambda watch starts (is cargo-lambda installed? run `make test`)");
    let _watch = Watch(child);

    let empty = serde_json::json!({ "batchItemFailures": [] });
    let first =
        tokio::task::spawn_blocking(move || invoke(port, "consumer", "events/notification.json"))
            .await
            .unwrap();
    assert_eq!(first, empty);
    let batch = tokio::task::spawn_blocking(move || {
        invoke(port, "consumer", "events/batch-duplicates-poison.json")
    })
    .await
    .unwrap();
    assert_eq!(batch, empty, "the poison body is routed, not retried");
    let again =
        tokio::task::spawn_blocking(move || invoke(port, "consumer", "events/notification.json"))
            .await
            .unwrap();
    assert_eq!(again, empty);

    // The terminal: one slot per container, three containers.
    assert_eq!(core.slots_issued(), 3);
    let mut containers: Vec<String> = core
        .slots()
        .into_iter()
        .map(|s| s.equipment_number)
        .collect();
    containers.sort();
    assert_eq!(
        containers,
        vec!["CSQU3054383", "MSKU1234565", "MWCU6059784"]
    );

    // The tables: three committed records with their bookings, the slot ids matching.
    let store = gate::dynamo::DynamoStore::new(dynamo.clone(), &idempotency, &bookings);
    for slot in core.slots() {
        let key = gate::keys::event_key_of(
            &notification_id(&slot.equipment_number),
            &slot.equipment_number,
        );
        let record = store
            .get(&gate::record::record_pk("lambda-test", &key))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no record for {}", slot.equipment_number));
        assert_eq!(record.status, RecordStatus::Committed);
        assert_eq!(record.slot_id.as_deref(), Some(slot.slot_id.as_str()));
        let booking = store.booking(&key).await.unwrap().unwrap();
        assert_eq!(booking.slot_id, slot.slot_id);
    }
    let scanned = dynamo.scan().table_name(&bookings).send().await.unwrap();
    assert_eq!(scanned.count(), 3);

    // The reconciler binary: a record stranded three minutes ago (reserved, lease expired, the
    // claim never sent) is claimed once with its key and committed.
    let now = SystemClock.now_ms();
    let stranded_body = serde_json::json!({
        "notificationId": "PCS-CIS-20261201-000099",
        "equipment_number": "ABCD1234560",
        "preferred_window": {"start": "2027-06-01T08:00:00Z", "end": "2027-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "RLS-999999"
    })
    .to_string();
    let notification =
        gate::notification::parse_notification(&stranded_body, now, &["ECT-DELTA".to_string()])
            .unwrap();
    let keys = gate::gate::derive_keys(&notification).unwrap();
    let helper = gate::gate::Gate {
        config: gate::gate::GateConfig::new("lambda-test", vec!["ECT-DELTA".into()]),
        store: Arc::new(store.clone()),
        terminal: Arc::new(
            gate::terminal::HttpTerminal::new(gate::terminal::HttpTerminalConfig::new(format!(
                "http://{terminal_addr}"
            )))
            .unwrap(),
        ),
        manual: Arc::new(gate::manual::MemoryManualQueue::new()),
        clock: Arc::new(SystemClock),
    };
    let dead = gate::gate::Invocation {
        request_id: "inv-dead".into(),
        deadline_ms: now - 170_000,
    };
    let mut stranded = helper.new_record(&notification, &keys, &dead, now - 200_000);
    stranded.lease_until_ms = Some(now - 170_000);
    store.reserve(&stranded, now).await.unwrap();
    let report = tokio::task::spawn_blocking(move || {
        invoke(port, "reconciler", "events/scheduled-reconcile.json")
    })
    .await
    .unwrap();
    assert_eq!(report["reconciled"], 1, "{report}");
    assert_eq!(report["found_by_lookup"], 0, "{report}");
    let after = store.get(&stranded.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::Committed);
    let abcd: Vec<_> = core
        .slots()
        .into_iter()
        .filter(|s| s.equipment_number == "ABCD1234560")
        .collect();
    assert_eq!(abcd.len(), 1);
    assert_eq!(
        abcd[0].idempotency_key.as_deref(),
        Some(stranded.op_key.as_str())
    );
    assert_eq!(after.slot_id.as_deref(), Some(abcd[0].slot_id.as_str()));

    // The metrics binary: nothing is in_flight any more, no key has two slot ids.
    let signals = tokio::task::spawn_blocking(move || {
        invoke(port, "metrics", "events/scheduled-metrics.json")
    })
    .await
    .unwrap();
    assert_eq!(
        signals,
        serde_json::json!({
            "oldest_in_flight_age_s": 0,
            "in_flight_older_than_10m": 0,
            "multi_slot_keys": 0
        })
    );

    // The manual queue: exactly the poison body, with its reason.
    let received = sqs
        .receive_message()
        .queue_url(&manual_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let body: serde_json::Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(body["original_body"], "{bad");
    assert_eq!(body["reason"], "rejected");
}

/// The notification ids the event files use, by container.
fn notification_id(container: &str) -> String {
    let text =
        std::fs::read_to_string(workspace_root().join("events/batch-duplicates-poison.json"))
            .unwrap()
            + &std::fs::read_to_string(workspace_root().join("events/notification.json")).unwrap();
    let events: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<serde_json::Value>()
        .map(|v| v.unwrap())
        .collect();
    for event in events {
        for record in event["Records"].as_array().unwrap() {
            if let Ok(body) =
                serde_json::from_str::<serde_json::Value>(record["body"].as_str().unwrap())
            {
                if body["equipment_number"] == container {
                    return body["notificationId"].as_str().unwrap().to_string();
                }
            }
        }
    }
    panic!("no notification for {container}")
}
