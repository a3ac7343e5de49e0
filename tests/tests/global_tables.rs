//! DynamoDB global tables are refused at cold start (`gate_lambda::store::verify_single_region`,
//! `gate_dynamo::ReplicationError`): a multi-Region eventually consistent table checks a
//! condition in one Region only (two Regions could both reserve one key), a strongly consistent
//! one refuses the commit's transaction. moto has no global tables (its `DescribeTable` lists no
//! replicas), so a small proxy in front of it adds to the answer what DynamoDB answers for a
//! replicated table (`Replicas`, `MultiRegionConsistency`, `GlobalTableWitnesses`); every other
//! request, and the rest of the answer, is moto's. The decision on each shape of `DescribeTable`
//! is tested on its own in `gate_dynamo::replication`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gate_lambda::store::build_store;
use gate_lambda::StoreConfig;
use integration_tests::{dynamo_client, fresh_tables, moto_endpoint, sdk_config};
use serde_json::{json, Value};

/// The proxy's state: what to add to whose `DescribeTable` answer, whether to deny it, and the
/// operations seen (`X-Amz-Target` without its prefix).
#[derive(Default)]
struct Rewrite {
    /// Table name → members merged into the answer's `Table`.
    describe: Mutex<HashMap<String, Value>>,
    /// Answer every `DescribeTable` with `AccessDeniedException`, as for a role without it.
    deny_describe: Mutex<bool>,
    seen: Mutex<Vec<String>>,
    moto: String,
    http: reqwest::Client,
}

impl Rewrite {
    fn seen(&self, operation: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|o| *o == operation).count()
    }
}

async fn forward(State(rw): State<Arc<Rewrite>>, headers: HeaderMap, body: Bytes) -> Response {
    let operation = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split('.').nth(1))
        .unwrap_or("")
        .to_string();
    rw.seen.lock().unwrap().push(operation.clone());
    if operation == "DescribeTable" && *rw.deny_describe.lock().unwrap() {
        let answer = json!({
            "__type": "com.amazon.coral.service#AccessDeniedException",
            "Message": "User is not authorized to perform: dynamodb:DescribeTable",
        });
        return (StatusCode::BAD_REQUEST, answer.to_string()).into_response();
    }
    let mut request = rw.http.post(&rw.moto).body(body);
    for (name, value) in &headers {
        if !matches!(name.as_str(), "host" | "content-length") {
            request = request.header(name, value);
        }
    }
    let answer = request.send().await.expect("moto answers");
    let status = StatusCode::from_u16(answer.status().as_u16()).expect("status");
    let bytes = answer.bytes().await.expect("moto's answer");
    if operation != "DescribeTable" || !status.is_success() {
        return (status, bytes).into_response();
    }
    let mut doc: Value = serde_json::from_slice(&bytes).expect("DescribeTable answer is JSON");
    let name = doc["Table"]["TableName"].as_str().unwrap_or("").to_string();
    if let Some(Value::Object(extra)) = rw.describe.lock().unwrap().get(&name) {
        let table = doc["Table"].as_object_mut().expect("Table");
        for (k, v) in extra {
            table.insert(k.clone(), v.clone());
        }
    }
    (status, doc.to_string()).into_response()
}

/// The proxy on a free loopback port in front of moto; its URL.
async fn proxy() -> (Arc<Rewrite>, String) {
    let rw = Arc::new(Rewrite {
        moto: moto_endpoint(),
        http: reqwest::Client::new(),
        ..Rewrite::default()
    });
    let app = axum::Router::new().fallback(forward).with_state(rw.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (rw, url)
}

/// Fresh tables in moto, named after `name`: (idempotency table, business table).
async fn tables(name: &str) -> (String, String) {
    fresh_tables(&dynamo_client().await, name).await
}

/// The store of the tables as the consumer builds it at cold start, through `endpoint`; the
/// start's error as text.
async fn build_via(
    endpoint: &str,
    (idempotency_table, business_table): (String, String),
    verify_conditional_writes: bool,
) -> Result<(), String> {
    let aws = sdk_config()
        .await
        .into_builder()
        .endpoint_url(endpoint)
        .build();
    let config = StoreConfig::DynamoDb {
        idempotency_table,
        business_table,
        verify_conditional_writes,
    };
    build_store(&config, &aws, gate::record::RowColumns::NEUTRAL, &[])
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A table in one Region (moto's, as it answers): the check passes and the canary runs after it.
#[tokio::test]
async fn tables_in_one_region_start() {
    let (rw, endpoint) = proxy().await;
    build_via(&endpoint, tables("global-none").await, true)
        .await
        .expect("single-Region tables start");
    assert_eq!(rw.seen("DescribeTable"), 2, "both tables described");
    assert_eq!(rw.seen("PutItem"), 2, "then the canary's two writes");
}

/// The idempotency table with a replica and no consistency mode (DynamoDB's default, eventual):
/// refused with one line naming the table, the mode and the Regions, before any write.
#[tokio::test]
async fn an_eventually_consistent_global_table_is_refused_before_any_write() {
    let (rw, endpoint) = proxy().await;
    let (records, business) = tables("global-mrec").await;
    rw.describe.lock().unwrap().insert(
        records.clone(),
        json!({
            "GlobalTableVersion": "2019.11.21",
            "Replicas": [{"RegionName": "eu-central-1", "ReplicaStatus": "ACTIVE"}],
        }),
    );
    let message = build_via(&endpoint, (records.clone(), business), true)
        .await
        .expect_err("a global table must not start");
    assert_eq!(
        message,
        format!(
            "VERIFY_CONDITIONAL_WRITES: table {records} is a DynamoDB global table with \
             multi-Region eventual consistency (replicas: eu-central-1): a conditional write is \
             checked only in the Region it is sent to, so two Regions could both reserve one key \
             and both call the server; the gate needs a table in one Region (docs/DEPLOYING.md, \
             \"DynamoDB global tables\")"
        )
    );
    assert_eq!(rw.seen("PutItem"), 0, "nothing written");
}

/// The business table in strong consistency (two replicas and a witness): refused for the
/// commit's transaction, which DynamoDB does not run on such a table.
#[tokio::test]
async fn a_strongly_consistent_business_table_is_refused() {
    let (rw, endpoint) = proxy().await;
    let (records, business) = tables("global-mrsc").await;
    rw.describe.lock().unwrap().insert(
        business.clone(),
        json!({
            "MultiRegionConsistency": "STRONG",
            "Replicas": [
                {"RegionName": "us-east-1", "ReplicaStatus": "ACTIVE"},
                {"RegionName": "us-east-2", "ReplicaStatus": "ACTIVE"},
            ],
            "GlobalTableWitnesses": [{"RegionName": "us-west-2", "WitnessStatus": "ACTIVE"}],
        }),
    );
    let message = build_via(&endpoint, (records, business.clone()), true)
        .await
        .expect_err("a strongly consistent global table must not start");
    assert!(
        message.starts_with(&format!(
            "VERIFY_CONDITIONAL_WRITES: table {business} is a DynamoDB global table with \
             multi-Region strong consistency (replicas: us-east-1, us-east-2, us-west-2 \
             (witness)): DynamoDB refuses transactions on it (the commit is a TransactWriteItems)"
        )),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    assert_eq!(rw.seen("PutItem"), 0, "nothing written");
}

/// Without `dynamodb:DescribeTable` the function cannot know: it does not start, and says what
/// it needs.
#[tokio::test]
async fn a_describe_table_refused_stops_the_start() {
    let (rw, endpoint) = proxy().await;
    *rw.deny_describe.lock().unwrap() = true;
    let message = build_via(&endpoint, tables("global-denied").await, true)
        .await
        .expect_err("the check could not run");
    assert!(
        message.starts_with(
            "VERIFY_CONDITIONAL_WRITES: the global-table check could not run (it needs \
             dynamodb:DescribeTable): store unavailable: DescribeTable "
        ),
        "{message}"
    );
    assert!(message.contains("AccessDeniedException"), "{message}");
    assert_eq!(rw.seen("PutItem"), 0, "nothing written");
}

/// `VERIFY_CONDITIONAL_WRITES=false` skips the cold-start checks, this one with the canary.
#[tokio::test]
async fn the_checks_are_skipped_when_disabled() {
    let (rw, endpoint) = proxy().await;
    let (records, business) = tables("global-skipped").await;
    rw.describe.lock().unwrap().insert(
        records.clone(),
        json!({"Replicas": [{"RegionName": "eu-central-1", "ReplicaStatus": "ACTIVE"}]}),
    );
    build_via(&endpoint, (records, business), false)
        .await
        .expect("no check, no refusal");
    assert_eq!(rw.seen("DescribeTable"), 0);
}
