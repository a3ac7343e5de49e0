//! Events the typed deserialiser would refuse, sent to the real binaries under `cargo lambda
//! watch` (logging at TRACE) against moto: none fails the invocation with the
//! payload in an error line.
//!
//! * The ingress: a header value holding a control character (U+0001, NUL, a line break) in
//!   `webhook-signature`, `webhook-id` or another header is answered `400` with a problem
//!   (`invalid_header`) naming the header, logged in the one `webhook` line and counted
//!   (`WebhooksRejected`, `Reason=invalid_header`); nothing is queued.
//! * The consumer: a record whose `messageAttributes` are not what Lambda's SQS event gives is
//!   routed to the manual queue once (`record_unreadable`, with its body) and acknowledged.
//! * The reconciler: a scheduled input that is a bare string runs the pass anyway.
//!
//! No header value (a valid `webhook-id` only as its keyed digest), attribute, body or input appears in any
//! line the watcher printed. Needs `cargo-lambda` on PATH and `MOTO_ENDPOINT`
//! (`scripts/with-moto.sh cargo test -p integration-tests --test unreadable_events`).

use integration_tests::lambda_watch::{dated_events, invoke, MotoStore, WatchCommand};
use integration_tests::{fresh_queue, unique};
use serde_json::{json, Value};

/// Every message of `queue_url` (up to 10), bodies only, deleted.
async fn drain(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Vec<String> {
    let out = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("ReceiveMessage");
    let mut bodies = Vec::new();
    for m in out.messages() {
        bodies.push(m.body().unwrap_or_default().to_string());
        sqs.delete_message()
            .queue_url(queue_url)
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .send()
            .await
            .expect("DeleteMessage");
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_the_runtime_cannot_read_are_answered_counted_and_never_logged() {
    let moto = MotoStore::fresh("unreadable").await;
    let sqs = &moto.sqs;
    let notifications_url = fresh_queue(sqs, "unreadable-notifications").await;
    let logs = std::env::temp_dir().join(unique("unreadable-watch"));
    let mut watch = WatchCommand::new();
    let port = watch.port();
    watch
        .against_moto()
        .json_logs(Some("TRACE"))
        // The terminal is never called: the only readable record below is routed before any
        // claim.
        .consumer_of(&moto, "unreadable-test", "http://127.0.0.1:9")
        .ingress_to(&notifications_url);
    let watch = watch.spawn_logged(&logs);
    let events = dated_events("unreadable-events");
    let invoke_with = |name: &str, event: &Value, function: &'static str| {
        let file = events.join(name);
        std::fs::write(&file, event.to_string()).unwrap();
        async move {
            tokio::task::spawn_blocking(move || invoke(port, function, file))
                .await
                .unwrap()
        }
    };
    // Every value below carries a marker that must never reach a log line.
    let mut markers: Vec<String> = Vec::new();

    // --- the ingress ------------------------------------------------------------------------
    let sample: Value = serde_json::from_str(
        &std::fs::read_to_string(events.join("webhook-portbase.json")).unwrap(),
    )
    .unwrap();
    let id = sample["headers"]["webhook-id"]
        .as_str()
        .unwrap()
        .to_string();
    let cases = [
        ("webhook-signature", "\u{1}", "header `webhook-signature`"),
        ("webhook-id", "\u{0}", "header `webhook-id`"),
        ("x-forwarded-for", "\n", "another header"),
        ("webhook-signature", "\r\n", "header `webhook-signature`"),
    ];
    for (n, (header, bad, named)) in cases.iter().enumerate() {
        let marker = format!("HEADERMARKER{n}");
        let mut event = sample.clone();
        event["headers"][*header] = Value::String(format!("{marker}{bad}tail"));
        markers.push(marker);
        let answer = invoke_with(&format!("ingress-{n}.json"), &event, "ingress").await;
        assert_eq!(answer["statusCode"], 400, "{header}: {answer}");
        assert_eq!(
            answer["headers"]["content-type"],
            "application/problem+json"
        );
        let problem: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
        assert_eq!(problem["reason"], "invalid_header");
        assert_eq!(problem["status"], 400);
        assert_eq!(
            problem["type"],
            "tag:exactly-once-gate,2026:webhooks/invalid-header"
        );
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(named), "{detail}");
    }
    assert_eq!(drain(sqs, &notifications_url).await, Vec::<String>::new());

    // --- the consumer -----------------------------------------------------------------------
    let notification: Value =
        serde_json::from_str(&std::fs::read_to_string(events.join("notification.json")).unwrap())
            .unwrap();
    let mut record = notification["Records"][0].clone();
    let body = record["body"].as_str().unwrap().to_string();
    let pin = serde_json::from_str::<Value>(&body).unwrap()["pin"]
        .as_str()
        .unwrap()
        .to_string();
    markers.push(pin.clone());
    markers.push("ATTRIBUTEMARKER".into());
    record["messageId"] = json!("m-unreadable");
    record["messageAttributes"] = json!({ "x": "ATTRIBUTEMARKER\u{1}" });
    let answer = invoke_with("consumer.json", &json!({ "Records": [record] }), "consumer").await;
    assert_eq!(answer, json!({ "batchItemFailures": [] }), "acknowledged");
    let routed = drain(sqs, &moto.manual_url).await;
    assert_eq!(routed.len(), 1, "{routed:?}");
    let item: Value = serde_json::from_str(&routed[0]).unwrap();
    assert_eq!(item["reason"], "rejected");
    assert_eq!(item["original_body"], body.as_str());
    assert_eq!(item["message_id"], "m-unreadable");
    assert!(
        item["detail"]
            .as_str()
            .unwrap()
            .starts_with("record_unreadable: the SQS record at position 0 could not be read: its `messageAttributes`"),
        "{item}"
    );

    // --- the reconciler ---------------------------------------------------------------------
    markers.push("SCHEDULEMARKER".into());
    let report = invoke_with(
        "reconciler.json",
        &json!("SCHEDULEMARKER\u{1}"),
        "reconciler",
    )
    .await;
    assert_eq!(report["reconciled"], 0, "the pass ran: {report}");

    let (stdout, stderr) = watch.stop().await;
    let text = format!("{stdout}\n{stderr}");
    for marker in &markers {
        assert!(
            !text.contains(marker.as_str()),
            "the output holds {marker:?}:\n{text}"
        );
    }
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    // A rejected request is unsigned: its webhook-id is never logged as sent, only as its keyed
    // digest, and only when it is a valid id (no unverified header value in a log line).
    let webhook: Vec<(&Value, &Value, bool)> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "webhook")
        .map(|l| {
            let digest = l["fields"]["webhook_id_digest"].as_str().unwrap_or("");
            (
                &l["fields"]["outcome"],
                &l["fields"]["webhook_id"],
                !digest.is_empty(),
            )
        })
        .collect();
    let (outcome, none) = (json!("invalid_header"), json!(""));
    assert_eq!(
        webhook,
        vec![
            (&outcome, &none, true),
            (&outcome, &none, false),
            (&outcome, &none, true),
            (&outcome, &none, true),
        ],
        "one line per request, the webhook-id's digest only when the id is valid:\n{text}"
    );
    assert!(
        !text.contains(id.as_str()),
        "the unsigned webhook-id as sent:\n{text}"
    );
    let rejected: u64 = lines
        .iter()
        .filter(|l| l.get("_aws").is_some() && l["Reason"] == "invalid_header")
        .filter_map(|l| l["WebhooksRejected"].as_u64())
        .sum();
    assert_eq!(rejected, 4, "WebhooksRejected by Reason:\n{text}");
    assert!(
        !text.contains("deserialization into LambdaEvent"),
        "no runtime deserialisation error:\n{text}"
    );
    assert!(
        lines.iter().any(|l| l["fields"]["message"]
            == "the scheduled input is not an object with a string `job`; running the pass anyway"
            && l["fields"]["input"] == "a string"),
        "the reconciler's warning names the input's shape:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&events);
    let _ = std::fs::remove_dir_all(&logs);
}
