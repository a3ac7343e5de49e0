//! The real `consumer` and `reconciler` binaries under `cargo lambda watch` with
//! `AWS_LAMBDA_LOG_LEVEL=TRACE`, their stdout and stderr captured.

use super::*;

// --- 2. the binaries under cargo lambda watch ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_binaries_log_no_secret_at_trace() {
    let aws = aws("logs-bin").await;
    let behaviour = Arc::new(Mutex::new(Behaviour::default()));
    let terminal = support::spawn(hostile(behaviour.clone())).await;

    let dir = std::env::temp_dir().join(unique("no-secrets-in-logs"));
    std::fs::create_dir_all(&dir).unwrap();
    // Records a dead worker left (the reconciler's), those past the claim horizon delivered
    // again to the consumer (its lookup path).
    let gate = Gate {
        config: GateConfig::new("logs-bin"),
        store: Arc::new(aws.store.clone()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(
                HttpTerminal::new(HttpTerminalConfig::new(terminal.base_url.clone())).unwrap(),
            ),
            vec!["ECT-DELTA".into()],
        )),
        manual: Arc::new(gate::manual::MemoryManualQueue::new()),
        clock: Arc::new(SystemClock),
    };
    let late = strand(&gate, &aws.store, "bin", &behaviour).await;
    let consumer_event = dir.join("consumer.json");
    let mut bodies = consumer_bodies("bin", &behaviour);
    bodies.extend(late);
    std::fs::write(&consumer_event, sqs_event(&bodies).to_string()).unwrap();
    let metrics_event = workspace_root().join("events/scheduled-metrics.json");
    let schedule_event = dir.join("reconcile.json");
    std::fs::write(&schedule_event, "{\"job\":\"reconcile\"}").unwrap();

    let have_cargo_lambda = Command::new("cargo")
        .args(["lambda", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        have_cargo_lambda,
        "cargo-lambda is not on PATH: run `make test`, or put .venv/bin on PATH"
    );
    let mut watch = WatchCommand::new();
    let port = watch.port();
    watch
        .against_moto()
        .consumer_of(&aws.moto, "logs-bin", &terminal.base_url)
        .json_logs(Some("TRACE"))
        .command()
        .env("TERMINAL_API_TOKEN_SECRET_ARN", &aws.secret_arn)
        .env_remove("TERMINAL_API_TOKEN")
        .env_remove("LOG_SENSITIVE_BODIES");
    let watch = watch.spawn_logged(&dir);

    let file = consumer_event.clone();
    let answer = tokio::task::spawn_blocking(move || invoke(port, "consumer", &file))
        .await
        .unwrap();
    let failures = answer["batchItemFailures"].as_array().unwrap().len();
    assert!(failures >= 3, "503, 401, not JSON are retried: {answer}");

    let file = schedule_event.clone();
    let run = tokio::task::spawn_blocking(move || invoke(port, "reconciler", &file))
        .await
        .unwrap();
    assert_eq!(
        (
            &run["examined"],
            &run["reconciled"],
            &run["manual"],
            &run["transient"]
        ),
        // The scheduled run sweeps four times (at 0, 15, 30 and 45 s). The first as in
        // `the_handlers_log_no_secret_at_trace`: two re-sends committed, a refused slot id and a
        // failing lookup past retention to a person, four records retried (one claim and the
        // three the consumer released after a transient answer); each later sweep retries the
        // same four again.
        (&json!(8 + 3 * 4), &json!(2), &json!(2), &json!(4 + 3 * 4)),
        "{run}"
    );
    // The metrics function publishes the store signals (PutMetricData to moto's CloudWatch).
    let published =
        tokio::task::spawn_blocking(move || invoke(port, "metrics-publisher", &metrics_event))
            .await
            .unwrap();

    let (stdout, stderr) = watch.stop().await;
    let text = format!("{stdout}\n{stderr}");

    // Positive controls: the functions' own JSON lines at TRACE were captured, the token came
    // from Secrets Manager and reached the terminal, the PIN went to the terminal and the queue.
    for expected in [
        "terminal API token read from Secrets Manager",
        "record processed",
        "MSKU1234565",
        "body rejected",
        "reconciler run finished",
        "TRACE logging: other crates are capped at INFO",
    ] {
        assert!(
            text.contains(expected),
            "the capture lacks {expected:?}; stdout:\n{}\nstderr:\n{}",
            &stdout[..stdout.len().min(4000)],
            &stderr[..stderr.len().min(4000)]
        );
    }
    assert!(
        !text.contains("raw JSON event received from Lambda"),
        "lambda_runtime's TRACE payload line must be filtered"
    );
    assert_terminal_got_the_secrets(&terminal.seen());
    let manual_bodies = drain(&aws.moto.manual_url).await;
    assert!(manual_bodies.iter().any(|b| b.contains(PIN)));

    assert_clean("the binaries' stdout and stderr", &text);
    assert_clean("the invoke answers", &format!("{answer} {run} {published}"));
    let errors = record_errors(&aws.moto.idempotency).await;
    assert!(
        errors.contains("terminal answered 400")
            && errors.contains("failed (lookup: terminal answered 500"),
        "the records' errors describe the answers in our words (status, type, length, digest): \
         {errors}"
    );
    assert_clean("the records' errors", &errors);
    let details: Vec<String> = manual_bodies
        .iter()
        .map(|b| {
            serde_json::from_str::<Value>(b).unwrap()["detail"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_clean("the manual queue's details", &details.join("\n"));

    // The EMF documents (on stdout) and the published metrics. The counters' documents: the
    // consumer's one per invocation; the reconciler's one per sweep (four), written as each sweep
    // ends. Their `Reconciled` values add up to the run's.
    let emf: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
        .collect();
    let counters: Vec<&Value> = emf
        .iter()
        .filter(|v| v.get("Reconciled").is_some())
        .collect();
    assert_eq!(
        counters.len(),
        1 + 4,
        "the consumer's document and one per sweep: {emf:?}"
    );
    assert_eq!(
        counters
            .iter()
            .map(|v| v["Reconciled"].as_i64().unwrap_or_default())
            .sum::<i64>(),
        run["reconciled"].as_i64().unwrap(),
        "{emf:?}"
    );
    assert_clean("the EMF documents", &format!("{emf:?}"));
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&sdk_config().await);
    let metrics = cloudwatch
        .list_metrics()
        .namespace("ExactlyOnceGate")
        .send()
        .await
        .unwrap();
    assert!(
        !metrics.metrics().is_empty(),
        "the metrics function published"
    );
    assert_clean("the published metrics", &format!("{metrics:?}"));
    let _ = std::fs::remove_dir_all(&dir);
}
