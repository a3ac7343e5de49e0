//! The library handlers with a subscriber capturing every log line of the process at TRACE (the
//! gate, the AWS SDK, hyper, reqwest; text and JSON), plus the `Debug` of every report and the
//! `error` attribute of every record.

use super::*;

// --- 1. the library handlers ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_handlers_log_no_secret_at_trace() {
    let logs = capture();
    tracing::info!("capture check {}", "library");
    let aws = aws("logs-lib").await;
    let behaviour = Arc::new(Mutex::new(Behaviour::default()));
    let terminal = support::spawn(hostile(behaviour.clone())).await;

    // Wired as `truck_slot::lambda::build` wires it: the token from Secrets Manager.
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
    let mut terminal_config = HttpTerminalConfig::new(terminal.base_url.clone());
    terminal_config.token = Some(fetch_api_token(&secrets, &aws.secret_arn).await.unwrap());
    let http = Arc::new(HttpTerminal::new(terminal_config).unwrap());
    let manual = Arc::new(SqsManualQueue::new(
        sqs_client().await,
        aws.moto.manual_url.clone(),
    ));
    let gate = Gate {
        config: GateConfig::new("logs-lib"),
        store: Arc::new(aws.store.clone()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            http.clone(),
            vec!["ECT-DELTA".into()],
        )),
        manual: manual.clone(),
        clock: Arc::new(SystemClock),
    };
    let invocation = |id: &str| Invocation {
        request_id: id.into(),
        deadline_ms: SystemClock.now_ms() + 120_000,
    };
    let mut reports = String::new();

    // Records a dead worker left; the consumer gets those past the claim horizon again.
    let late = strand(&gate, &aws.store, "lib", &behaviour).await;
    assert_eq!(late.len(), 2);

    // The consumer, every path.
    let mut bodies = consumer_bodies("lib", &behaviour);
    bodies.extend(late);
    let event: SqsEvent = serde_json::from_value(sqs_event(&bodies)).unwrap();
    let report = gate.handle_batch(event, &invocation("inv-1")).await;
    reports.push_str(&format!("{report:?}\n"));
    assert!(
        report
            .records
            .iter()
            .any(|r| matches!(r.outcome, gate::consumer::RecordOutcome::Committed { .. })),
        "{report:?}"
    );

    // A terminal without Idempotency-Key support: manual routing.
    let mut no_key = gate.clone();
    no_key.config.server_supports_idempotency_key = false;
    let body = notification("PCS-lib-nokey", &container("CSQU305438")).to_string();
    let event: SqsEvent = serde_json::from_value(sqs_event(&[body])).unwrap();
    let report = no_key.handle_batch(event, &invocation("inv-2")).await;
    reports.push_str(&format!("{report:?}\n"));

    // The reconciler over the stranded records.
    let run = gate
        .reconcile(
            &aws.store,
            &ReconcilerConfig::default(),
            &invocation("inv-rec"),
        )
        .await;
    reports.push_str(&format!("{run:?}\n"));
    // Of six stranded records, the consumer finished the one past retention without a slot;
    // the reconciler re-sends the four inside the claim horizon under their keys (the re-send is
    // the lookup: their lookup behaviours are never asked) and commits two, retries one (a claim
    // that fails with an echo), refuses a slot id quoting the PIN (a person gets it,
    // the id named by its keyed digest), and routes the one past retention whose lookup fails
    // with an echo. It also takes the three records the consumer released after a transient
    // answer (503, 401, not JSON): the reconciler selects by lease end, and they fail
    // again the same way.
    assert_eq!(
        (run.examined, run.reconciled, run.manual, run.transient),
        (5 + 3, 2, 2, 1 + 3),
        "{run:?}"
    );

    // Positive controls.
    assert_terminal_got_the_secrets(&terminal.seen());
    let manual_bodies = drain(&aws.moto.manual_url).await;
    assert!(
        manual_bodies.iter().any(|b| b.contains(PIN)),
        "the manual queue keeps the original body for the person booking by hand"
    );
    let text = String::from_utf8_lossy(&logs.functions.0.lock().unwrap()).into_owned();
    let everything = String::from_utf8_lossy(&logs.everything.0.lock().unwrap()).into_owned();
    for expected in [
        "capture check library",
        "MSKU1234565",
        "body rejected",
        // `Gate::reconcile` is one sweep; the Lambda runner logs the run (the binaries' test).
        "reconciler sweep finished",
    ] {
        assert!(text.contains(expected), "the capture lacks {expected:?}");
    }
    assert!(
        everything.contains("\"level\":\"TRACE\""),
        "TRACE was captured"
    );

    // The checks.
    assert_clean("the logs", &text);
    let filtered = assert_only_filtered_lines_hold_secrets(&everything);
    eprintln!("{filtered} library log lines below INFO held a secret and are filtered");
    assert_clean("the reports", &reports);
    assert_clean(
        "the records' errors",
        &record_errors(&aws.moto.idempotency).await,
    );
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
    let _ = &aws.moto.bookings;
}
