//! The runbooks' log lines exist: the real consumer binary under `cargo lambda watch` (JSON logs,
//! as Lambda writes them with `LoggingConfig: JSON`), against moto and a scripted terminal, is
//! fed a short replay (a new notification, its redelivery, the same event with other content, a
//! poison body, a claim the terminal refuses with 503, the same container and window under a new
//! notificationId) and every record must end in exactly one `record processed` line carrying the
//! outcome and the fields the runbooks name (`docs/OPERATING.md`, "Runbooks"): `fields.outcome`,
//! `fields.detail`, `fields.event_key`, `fields.message_id`, `fields.subject`,
//! `fields.effect_id`; the notification under a new notificationId is held back by the natural
//! key's guard before any call (`Manual`, `natural_key_collision`) with a WARN line naming both
//! event keys (`fields.other_event_key`). Needs `cargo-lambda` on PATH and `MOTO_ENDPOINT`.

#[path = "../../integrations/truck-slot/tests/support/mod.rs"]
mod support;

use integration_tests::lambda_watch::{invoke, workspace_root, MotoStore, WatchCommand};
use integration_tests::unique;
use serde_json::{json, Value};
use truck_slot::keys::event_key_of;

const A: &str = "CSQU3054383";
const REFUSED: &str = "MWCU6059784";
/// The WARN line of a natural-key collision held back by the guard (quoted by the runbooks).
const NATURAL_KEY_COLLISION_LINE: &str =
    "natural-key collision: another event key holds this natural key; to a person, not called";

fn window(days_ahead: i64) -> Value {
    let start = chrono::Utc::now().date_naive() + chrono::Duration::days(days_ahead);
    json!({"start": format!("{start}T08:00:00Z"), "end": format!("{start}T10:00:00Z")})
}

fn body(id: &str, equipment: &str, window: &Value) -> String {
    json!({"notificationId": id, "equipment_number": equipment, "preferred_window": window,
           "terminal": "ECT-DELTA", "pin": "RLS-104233"})
    .to_string()
}

/// An SQS event of `(message id, body)` records.
fn event(records: &[(&str, &str)]) -> String {
    serde_json::to_string(&gate_testkit::sqs_event(records)).expect("an SQS event serialises")
}

/// The `fields` of every JSON log line whose message is `message`.
fn lines(stdout: &str, message: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("fields").cloned())
        .filter(|f| f["message"] == message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_ends_in_one_outcome_line_with_the_fields_the_runbooks_name() {
    let moto = MotoStore::fresh("outcomes").await;
    let terminal = support::spawn(|seen| {
        let request: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
        let equipment = request["equipment_number"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if equipment == REFUSED {
            return support::raw(503, "try again later");
        }
        let key = seen
            .header("idempotency-key")
            .unwrap_or("")
            .trim_matches('"');
        let slot = format!("S-{}", &key[..key.len().min(12)]);
        support::json(201, json!({"slot_id": slot, "equipment_number": equipment}))
    })
    .await;

    let dir = std::env::temp_dir().join(unique("outcome-logs"));
    std::fs::create_dir_all(&dir).unwrap();
    let w = window(3);
    let a = body("PCS-OUT-000001", A, &w);
    let a_other_content = body("PCS-OUT-000001", A, &window(4));
    let a_new_id = body("PCS-OUT-000002", A, &w);
    let refused = body("PCS-OUT-000003", REFUSED, &w);
    let events = [
        event(&[
            ("m-new", &a),
            ("m-poison", "{not json"),
            ("m-refused", &refused),
        ]),
        event(&[("m-redelivery", &a)]),
        event(&[("m-other-content", &a_other_content)]),
        event(&[("m-new-id", &a_new_id)]),
    ];
    let mut files = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let path = dir.join(format!("event-{i}.json"));
        std::fs::write(&path, e).unwrap();
        files.push(path);
    }

    let mut watch = WatchCommand::new();
    let port = watch.port();
    watch
        .against_moto()
        .consumer_of(&moto, "outcomes", &terminal.base_url)
        .json_logs(None);
    let watch = watch.spawn_logged(&dir);

    let mut answers = Vec::new();
    for file in files {
        let answer = tokio::task::spawn_blocking(move || invoke(port, "consumer", &file))
            .await
            .unwrap();
        answers.push(answer);
    }
    assert_eq!(
        answers[0],
        json!({"batchItemFailures": [{"itemIdentifier": "m-refused"}]}),
        "only the 503 is retried"
    );
    let (stdout, _) = watch.stop().await;

    let processed = lines(&stdout, "record processed");
    let by_message = |id: &str| -> Value {
        let found: Vec<&Value> = processed.iter().filter(|f| f["message_id"] == id).collect();
        assert_eq!(
            found.len(),
            1,
            "exactly one outcome line for {id}; the lines: {processed:#?}"
        );
        found[0].clone()
    };
    assert_eq!(processed.len(), 6, "one line per record: {processed:#?}");

    let key_a = event_key_of("PCS-OUT-000001", A);
    let key_a_new_id = event_key_of("PCS-OUT-000002", A);
    let new = by_message("m-new");
    assert_eq!(new["outcome"], "Committed");
    assert_eq!(new["event_key"], key_a.as_str());
    assert_eq!(new["subject"], A);
    assert!(new["effect_id"].as_str().unwrap().starts_with("S-"));

    // DuplicateRatioHigh: `fields.outcome = "Duplicate"`, with the event key repeated.
    let dup = by_message("m-redelivery");
    assert_eq!(dup["outcome"], "Duplicate");
    assert_eq!(dup["detail"], "committed");
    assert_eq!(dup["event_key"], key_a.as_str());

    let mismatch = by_message("m-other-content");
    assert_eq!(mismatch["outcome"], "Mismatch");
    assert_eq!(mismatch["event_key"], key_a.as_str());

    let poison = by_message("m-poison");
    assert_eq!(poison["outcome"], "Rejected");
    assert_eq!(poison["detail"], "not_json");

    // DeadLetters, EventsWaiting: `fields.outcome = "Retry"` with the reason in `detail`.
    let retry = by_message("m-refused");
    assert_eq!(retry["outcome"], "Retry");
    assert!(retry["detail"].as_str().unwrap().contains("503"), "{retry}");
    assert_eq!(retry["subject"], REFUSED);

    // NaturalKeyCollisions: the second event key for the same container and window is guarded
    // before its call and goes to a person (never claimed); a WARN line names both event keys
    // with the container.
    let collided = by_message("m-new-id");
    assert_eq!(collided["outcome"], "Manual");
    assert_eq!(collided["detail"], "natural_key_collision");
    assert_eq!(collided["event_key"], key_a_new_id.as_str());
    assert_eq!(collided["subject"], A);
    assert_eq!(collided["effect_id"], "", "never called, so no slot");
    let claims_for_a = terminal
        .seen()
        .iter()
        .filter(|seen| seen.method == "POST")
        .filter(|seen| {
            serde_json::from_slice::<Value>(&seen.body).unwrap_or(Value::Null)["equipment_number"]
                == A
        })
        .count();
    assert_eq!(
        claims_for_a, 1,
        "one claim for container A: the first event key's"
    );
    let warned = lines(&stdout, NATURAL_KEY_COLLISION_LINE);
    assert_eq!(warned.len(), 1, "{stdout}");
    assert_eq!(warned[0]["event_key"], key_a_new_id.as_str());
    assert_eq!(warned[0]["other_event_key"], key_a.as_str());
    assert_eq!(warned[0]["subject"], A);

    // Every outcome the runbooks cite (`fields.outcome = "X"` in docs/OPERATING.md) is in the logs,
    // and every log line they quote exists.
    let runbooks = std::fs::read_to_string(workspace_root().join("docs/OPERATING.md")).unwrap();
    let cited: Vec<&str> = runbooks
        .split("fields.outcome = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(
        cited.contains(&"Duplicate") && cited.contains(&"Retry"),
        "{cited:?}"
    );
    for outcome in &cited {
        let known = [
            "Committed",
            "AlreadyCommitted",
            "Duplicate",
            "DuplicateInFlight",
            "LeaseLost",
            "Mismatch",
            "Rejected",
            "Manual",
            "Retry",
            "NotStarted",
        ];
        assert!(
            known.contains(outcome),
            "docs/OPERATING.md cites an unknown outcome {outcome:?}"
        );
        if *outcome == "DuplicateInFlight" {
            // A copy while the first is in flight needs two concurrent workers; the gate's
            // tests cover it (`RecordOutcome::code` names it).
            continue;
        }
        assert!(
            processed.iter().any(|f| f["outcome"] == *outcome),
            "docs/OPERATING.md cites {outcome:?}, the logs have none"
        );
    }
    for quoted in ["record processed", NATURAL_KEY_COLLISION_LINE] {
        assert!(
            runbooks.contains(quoted),
            "docs/OPERATING.md quotes {quoted:?}"
        );
        assert!(stdout.contains(quoted), "the logs hold {quoted:?}");
    }

    // The EMF document of that invocation counts the collision.
    let collisions: f64 = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
        .filter_map(|v| v["NaturalKeyCollisions"].as_f64())
        .sum();
    assert_eq!(collisions, 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}
