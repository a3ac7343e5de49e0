//! The business row's columns named by the integration, on DynamoDB (moto):
//! the store the Lambda wiring builds (`gate_lambda::build_store` with the integration's
//! `row_columns`, as `build_gate` calls it) writes truck-slot's TMS bookings under the deployed
//! names (`source_event`, `slot_id`, `booked_at`) and payments' rows under the neutral ones
//! (`source_event`, `effect_id`, `written_at`); a row the previous release wrote (`slot_id`,
//! `booked_at`) reads back through the operator's read port; a store laid out with an
//! integration's own names (its own key too) passes the commit cases of the conformance suite.

use std::collections::BTreeSet;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::MemoryManualQueue;
use gate::record::{record_pk, RowColumns};
use gate::store::Store;
use gate::Integration;
use gate_dynamo::DynamoStore;
use gate_lambda::store::open_operator_store;
use gate_lambda::{build_store, fixed_env, Config, SecretString};
use gate_testkit::{IdempotencyServer, MismatchAnswer, ServerConfig};
use integration_tests::field_cases::{gate, terminal_core, LOST_ANSWER_BODY, T0};
use integration_tests::{
    dynamo_client, fresh_store_with_columns, sdk_config, sqs_event, unique, wiring_config,
};
use sim::dst::CoreTerminal;

/// Every item of `table`, as moto stores it.
async fn raw_items(table: &str) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    dynamo_client()
        .await
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan")
        .items()
        .to_vec()
}

fn names(item: &std::collections::HashMap<String, AttributeValue>) -> BTreeSet<&str> {
    item.keys().map(String::as_str).collect()
}

fn invocation(request_id: &str, clock: &ManualClock) -> Invocation {
    Invocation {
        request_id: request_id.into(),
        deadline_ms: clock.now_ms() + 60_000,
    }
}

/// A label named like one of the store's columns is an init error, reported before the store is
/// checked: the tables here do not exist, so the conditional-write check would fail first
/// otherwise. The same label under truck-slot's names is the integration's own, and the check
/// runs (and fails on the missing tables).
#[tokio::test]
async fn a_label_named_like_a_column_is_refused_before_the_store_is_checked() {
    let config = Config::<()>::from_env(fixed_env(&[
        ("INTEGRATION_NAME", "rows-labels"),
        (
            "MANUAL_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/1/manual",
        ),
        ("IDEMPOTENCY_TABLE", "no-such-idempotency-table"),
        ("BOOKINGS_TABLE", "no-such-business-table"),
    ]))
    .expect("configuration");
    let aws = sdk_config().await;
    let labels = ["invoice", "written_at"];
    let refused = build_store(&config.lambda.store, &aws, RowColumns::NEUTRAL, &labels)
        .await
        .err()
        .expect("refused");
    let text = refused.to_string();
    assert!(
        text.contains("label_names") && text.contains("\"written_at\""),
        "{text}"
    );
    let checked = build_store(&config.lambda.store, &aws, RowColumns::LEGACY, &labels)
        .await
        .err()
        .expect("the check fails on the missing tables");
    assert!(!checked.to_string().contains("label_names"), "{checked}");
}

/// Truck-slot's consumer, its store built by the wiring with truck-slot's columns, commits a
/// TMS booking with exactly the deployed table's names: the TMS reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_truck_slot_consumer_writes_the_tms_booking_names() {
    let (config, _, bookings) = wiring_config(&unique("rows-truck")).await;
    let clock = Arc::new(ManualClock::new(T0));
    let core = terminal_core(&clock);
    let manual = Arc::new(MemoryManualQueue::new());
    let columns = truck_slot::TruckSlot::new(
        Arc::new(CoreTerminal::new(core.clone())),
        vec!["ECT-DELTA".into()],
    )
    .row_columns();
    let (store, _, _) = build_store(&config.lambda.store, &sdk_config().await, columns, &[])
        .await
        .expect("store");
    assert_eq!(store.row_columns(), columns);
    let gate = gate(
        store,
        &config.lambda.gate.integration,
        Arc::new(CoreTerminal::new(core.clone())),
        manual.clone(),
        clock.clone() as Arc<dyn Clock>,
    );
    let out = gate
        .handle_batch(
            sqs_event(&[("m-rows-1", LOST_ANSWER_BODY)]),
            &invocation("inv-rows-1", &clock),
        )
        .await;
    let slot = core.slots().first().expect("a slot").effect_id.clone();
    assert_eq!(
        out.records[0].outcome,
        RecordOutcome::Committed {
            effect_id: slot.clone()
        }
    );

    let items = raw_items(&bookings).await;
    assert_eq!(items.len(), 1);
    let item = &items[0];
    assert_eq!(
        names(item),
        BTreeSet::from([
            "source_event",
            "slot_id",
            "booked_at",
            "container",
            "terminal",
            "window_start",
            "window_end"
        ])
    );
    assert_eq!(item["slot_id"], AttributeValue::S(slot));
    assert_eq!(item["booked_at"], AttributeValue::N(T0.to_string()));
    assert_eq!(
        item["source_event"],
        AttributeValue::S(out.records[0].event_key.clone().expect("event key"))
    );
    assert!(manual.items().is_empty());
}

/// payments (no `row_columns` of its own) through the same wiring: its rows carry the neutral
/// names, never the truck-slot ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payments_consumer_writes_the_neutral_names() {
    let base = unique("rows-pay");
    let (config, _, bookings) = wiring_config(&base).await;
    let clock = Arc::new(ManualClock::new(T0));
    let api = ServerConfig::new("/v1/charges", "id")
        .id_prefix("ch")
        .mismatch(MismatchAnswer::Conflict)
        .without_lookup()
        .retention_ms(payments::KEY_RETENTION_MS);
    let server = IdempotencyServer::start(api, clock.clone())
        .await
        .expect("a loopback port");
    let integration = payments::Payments {
        url: server.url().to_string(),
        key: SecretString::new("sk_test_rows"),
        http: gate_http::builder("payments-rows")
            .build()
            .expect("an HTTP client"),
    };
    assert_eq!(integration.row_columns(), RowColumns::NEUTRAL);
    let (store, _, _) = build_store(
        &config.lambda.store,
        &sdk_config().await,
        integration.row_columns(),
        integration.label_names(),
    )
    .await
    .expect("store");
    let gate = Gate {
        config: GateConfig::new(base.as_str()),
        store: store.clone(),
        integration: Arc::new(integration),
        manual: Arc::new(MemoryManualQueue::new()),
        clock: clock.clone(),
    };
    let body = serde_json::json!({"invoice_id": "INV-7", "customer": "cus_7",
        "amount_minor": 12_507, "currency": "EUR", "payment_method": "pm_card_4242"})
    .to_string();
    let out = gate
        .handle_batch(
            sqs_event(&[("m-pay-1", body.as_str())]),
            &invocation("inv-pay-1", &clock),
        )
        .await;
    let RecordOutcome::Committed { effect_id } = &out.records[0].outcome else {
        panic!("committed: {:?}", out.records[0].outcome);
    };
    assert_eq!(server.effects_made(), 1);
    let event_key = out.records[0].event_key.clone().expect("event key");
    let record = store
        .get(&record_pk(&base, &event_key))
        .await
        .expect("get")
        .expect("the record");

    let items = raw_items(&bookings).await;
    assert_eq!(items.len(), 1);
    let item = &items[0];
    let mut expected = BTreeSet::from(["source_event", "effect_id", "written_at"]);
    expected.extend(record.labels.keys().map(String::as_str));
    assert!(!record.labels.is_empty(), "payments labels its records");
    assert_eq!(names(item), expected);
    assert_eq!(item["effect_id"], AttributeValue::S(effect_id.clone()));
    assert_eq!(item["written_at"], AttributeValue::N(T0.to_string()));
    assert_eq!(item["source_event"], AttributeValue::S(event_key));
}

/// A row the previous release wrote into any business table (`slot_id`, `booked_at`) reads
/// back through the read port gatectl opens with payments' (neutral) names, its labels intact
/// and no label named after an old column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_previous_release_wrote_reads_back_through_the_read_port() {
    let (config, _, bookings) = wiring_config(&unique("rows-old")).await;
    let n = |v: i64| AttributeValue::N(v.to_string());
    let s = |v: &str| AttributeValue::S(v.to_string());
    dynamo_client()
        .await
        .put_item()
        .table_name(&bookings)
        .item("source_event", s("ab12"))
        .item("slot_id", s("ch_old"))
        .item("booked_at", n(T0 - 86_400_000))
        .item("invoice", s("INV-1"))
        .send()
        .await
        .expect("put the old row");
    let port = open_operator_store(
        &config.lambda.store,
        &sdk_config().await,
        RowColumns::NEUTRAL,
    )
    .await
    .expect("the read port");
    let row = port
        .business_row("ab12")
        .await
        .expect("booking")
        .expect("the old row");
    assert_eq!(row.source_event, "ab12");
    assert_eq!(row.effect_id, "ch_old");
    assert_eq!(row.written_at_ms, T0 - 86_400_000);
    assert_eq!(
        row.labels,
        gate::record::Labels::from([("invoice".to_string(), "INV-1".to_string())])
    );
}

/// An integration's own layout, its key too.
const OWN: RowColumns = RowColumns {
    event_key: "invoice_event",
    effect_id: "charge_id",
    written_at: "charged_at",
};

/// A store on fresh tables whose business table is keyed by [`OWN`]'s key.
async fn own_layout_store(base: &str) -> (Arc<DynamoStore>, String) {
    let (store, bookings) = fresh_store_with_columns(base, OWN).await;
    (Arc::new(store), bookings)
}

/// The commit cases of the conformance suite on a store laid out with an integration's own
/// names: the row is written and read under them, and a label named like one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_cases_pass_with_an_integrations_own_names() {
    let (store, bookings) = own_layout_store("rows-own").await;
    let as_store = || store.clone() as Arc<dyn Store>;
    gate_testkit::conformance::commit_writes_record_and_booking(as_store(), "own-commit").await;
    gate_testkit::conformance::commit_refuses_a_label_named_like_a_row_column(
        as_store(),
        "own-labels",
    )
    .await;
    gate_testkit::conformance::concurrent_commit_one_winner(as_store(), "own-race").await;
    let items = raw_items(&bookings).await;
    assert!(!items.is_empty());
    for item in &items {
        for name in OWN.names() {
            assert!(item.contains_key(name), "{name} in {:?}", names(item));
        }
        for other in [
            "source_event",
            "effect_id",
            "written_at",
            "slot_id",
            "booked_at",
        ] {
            assert!(!item.contains_key(other), "{other} in {:?}", names(item));
        }
    }
}
