//! The `gatectl` binary: the variables the functions read, exit codes a script can branch on, and
//! the stack's outputs saying where everything is.

use super::*;

/// The binary: the same variables the functions read, exit codes a script can branch on.
#[tokio::test]
async fn the_binary_exits_with_codes_scripts_can_use() {
    let store = fresh_store("gc-bin").await;
    let sqs = sqs_client().await;
    let manual = fresh_queue(&sqs, "gc-bin-manual").await;
    let integration = unique("gatectl-bin");
    // A record a consumer holds now, for ten minutes of real time.
    let body = World::body("N-BIN", "CSQU3054383");
    let now = now_ms();
    let n = parse_notification(&body, T0, &["ECT-DELTA".to_string()]).unwrap();
    let keys = derive_keys(&n).unwrap();
    let gate = Gate {
        config: gate::consumer::GateConfig::new(integration.as_str()),
        store: Arc::new(store.clone()),
        integration: Arc::new(truck_slot::TruckSlot::new(
            Arc::new(gatectl::truck::NoTerminal),
            vec!["ECT-DELTA".into()],
        )),
        manual: Arc::new(gate::manual::MemoryManualQueue::new()),
        clock: Arc::new(ManualClock::new(now)),
    };
    let record = gate.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &Invocation {
            request_id: "inv-live#0".into(),
            deadline_ms: now + 600_000,
        },
        now,
    );
    store.reserve(&record, now).await.unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gatectl"))
            .args(args)
            .env("AWS_ENDPOINT_URL", moto_endpoint())
            .env("AWS_REGION", "eu-west-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("IDEMPOTENCY_TABLE", store.idempotency_table())
            .env("BOOKINGS_TABLE", store.business_table())
            .env("MANUAL_QUEUE_URL", &manual)
            .env("INTEGRATION_NAME", &integration)
            .env_remove("TERMINAL_BASE_URL")
            .env_remove("GATECTL_STACK")
            .env("USER", "bob")
            .output()
            .expect("gatectl runs")
    };
    let shown = run(&["--json", "show", &record.event_key]);
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let json: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(json[0]["lease_owner"], "inv-live#0");
    assert_eq!(json[0]["lease_live"], true);

    let refused = run(&["finish", &record.event_key, "--slot-id", "S-9", "--yes"]);
    assert_eq!(refused.status.code(), Some(i32::from(exit::REFUSED)));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("held by inv-live#0 until"), "{stderr}");

    // A stranded record (its lease expired ten minutes ago): without --yes and with no
    // terminal on stdin nothing is confirmed and nothing written.
    let stranded_body = World::body("N-BIN-2", "MSKU1234565");
    let n2 = parse_notification(&stranded_body, T0, &["ECT-DELTA".to_string()]).unwrap();
    let stranded = gate.config.new_record(
        &truck_slot::event(&n2).unwrap(),
        &derive_keys(&n2).unwrap(),
        &Invocation {
            request_id: "inv-dead#0".into(),
            deadline_ms: now - 600_000,
        },
        now - 900_000,
    );
    store.reserve(&stranded, now).await.unwrap();
    let unconfirmed = run(&["finish", &stranded.event_key, "--slot-id", "S-9"]);
    assert_eq!(
        unconfirmed.status.code(),
        Some(i32::from(exit::NOT_CONFIRMED))
    );
    assert!(String::from_utf8_lossy(&unconfirmed.stderr).contains("pass --yes"));
    assert_eq!(store.get(&stranded.pk).await.unwrap().unwrap(), stranded);
    let dry = run(&[
        "--json",
        "--dry-run",
        "cancel",
        &stranded.event_key,
        "--reason",
        "x",
    ]);
    assert_eq!(dry.status.code(), Some(0));
    assert_eq!(store.get(&stranded.pk).await.unwrap().unwrap(), stranded);
    let done = run(&[
        "--json",
        "finish",
        &stranded.event_key,
        "--slot-id",
        "S-9",
        "--yes",
    ]);
    assert_eq!(
        done.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let after = store.get(&stranded.pk).await.unwrap().unwrap();
    assert_eq!(after.effect_id.as_deref(), Some("S-9"));
    // The operator's lease token is the core's (`Invocation::new`): `gatectl:bob/` and a nonce
    // of 64 random bits, 16 lowercase hex digits.
    let owner = after.lease_owner.unwrap();
    let nonce = owner.strip_prefix("gatectl:bob/").unwrap_or_default();
    assert!(
        nonce.len() == 16 && nonce.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
        "{owner}"
    );
    let missing = run(&["finish", &"0".repeat(64), "--slot-id", "S-9"]);
    assert_eq!(missing.status.code(), Some(i32::from(exit::NOT_FOUND)));
    let lookup = run(&["lookup", &record.event_key]);
    assert_eq!(lookup.status.code(), Some(i32::from(exit::CONFIG)));
    assert!(String::from_utf8_lossy(&lookup.stderr).contains("TERMINAL_BASE_URL"));
    let usage = run(&["finish", &record.event_key]);
    assert_eq!(usage.status.code(), Some(i32::from(exit::USAGE)));
    assert_eq!(store.get(&record.pk).await.unwrap().unwrap(), record);
}

/// `--stack NAME`: the tables, queues and settings from the stack's outputs and parameters
/// (moto's CloudFormation), read by the binary as by the library.
#[tokio::test]
async fn the_stack_says_where_everything_is() {
    let store = fresh_store("gc-stack").await;
    let sqs = sqs_client().await;
    let manual = fresh_queue(&sqs, "gc-stack-manual").await;
    let dlq = fresh_queue(&sqs, "gc-stack-dlq").await;
    let cfn = aws_sdk_cloudformation::Client::new(&integration_tests::sdk_config().await);
    let name = unique("gc-stack");
    let template = json!({
        "Parameters": {
            "IntegrationName": {"Type": "String"},
            "TerminalBaseUrl": {"Type": "String"},
            "TerminalApiTokenSecretArn": {"Type": "String", "Default": ""},
            "KeyTtlSeconds": {"Type": "Number"},
        },
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {
            "IdempotencyTableName": {"Value": store.idempotency_table()},
            "BookingsTableName": {"Value": store.business_table()},
            "ManualBookingQueueUrl": {"Value": manual},
            "NotificationDeadLetterQueueUrl": {"Value": dlq},
            "NotificationQueueUrl": {"Value": {"Ref": "Placeholder"}},
        },
    });
    let param = |k: &str, v: &str| {
        aws_sdk_cloudformation::types::Parameter::builder()
            .parameter_key(k)
            .parameter_value(v)
            .build()
    };
    cfn.create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .parameters(param("IntegrationName", "stack-integration"))
        .parameters(param("TerminalBaseUrl", "https://slots.example"))
        .parameters(param("KeyTtlSeconds", "1814400"))
        .send()
        .await
        .expect("create stack in moto");
    let (t, c) = Targets::from_stack(&TruckSlotStack, &cfn, &name)
        .await
        .expect("targets");
    assert_eq!(
        t.store,
        gate_lambda::StoreConfig::DynamoDb {
            idempotency_table: store.idempotency_table().to_string(),
            business_table: store.business_table().to_string(),
            verify_conditional_writes: true,
        }
    );
    assert_eq!(
        t.call(gatectl::targets::StoreCall::InFlight),
        (
            "dynamodb:Query".to_string(),
            format!("{}/index/InFlight", store.idempotency_table())
        )
    );
    assert_eq!(t.manual_queue_url, manual);
    assert_eq!(t.dead_letter_queue_url.as_deref(), Some(dlq.as_str()));
    assert!(t.notification_queue_url.is_some());
    assert_eq!(t.gate.integration, "stack-integration");
    assert_eq!(t.gate.key_ttl_s, 1_814_400);
    assert_eq!(c.token_secret_arn, None);
    assert_eq!(t.source, format!("stack {name}"));
    let missing = Targets::from_stack(&TruckSlotStack, &cfn, "no-such-stack")
        .await
        .unwrap_err();
    assert_eq!(missing.exit_code(), exit::NOT_FOUND, "{missing}");

    let out = Command::new(env!("CARGO_BIN_EXE_gatectl"))
        .args(["--stack", &name, "--json", "list", "in-flight"])
        .env("AWS_ENDPOINT_URL", moto_endpoint())
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env_remove("IDEMPOTENCY_TABLE")
        .output()
        .expect("gatectl runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!([])
    );
}
