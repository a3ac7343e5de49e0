//! `gatectl` through each runbook case on a stack whose store is PostgreSQL (`STORE=postgres`):
//! the same cases as `runbooks.rs` (`kit`: `show`, `lookup`, `finish` from the server, `list
//! in-flight`, `cancel`, `list manual`, `list multi-effect`, `reconcile KEY`, the audit history),
//! the store opened as `gatectl` opens it from the stack's variables, each case in a fresh
//! schema; SQS (the manual queue) is moto's. Run with
//! `scripts/with-postgres.sh scripts/with-moto.sh cargo test -p gatectl --test runbooks_postgres`
//! (`make test` does).

#[path = "runbooks/job_client_kit.rs"]
mod job_client_kit;
#[path = "runbooks/kit.rs"]
mod kit;
#[path = "runbooks/payments_kit.rs"]
mod payments_kit;
#[path = "runbooks/truck_slot_kit.rs"]
mod truck_slot_kit;

crate::runbooks!(
    truck_slot_runbooks_on_postgres,
    crate::truck_slot_kit::TruckSlotFixture,
    Postgres
);
crate::runbooks!(
    job_client_runbooks_on_postgres,
    crate::job_client_kit::JobClientFixture,
    Postgres
);
crate::runbooks!(
    payments_runbooks_on_postgres,
    crate::payments_kit::PaymentsFixture,
    Postgres
);

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use gate::store::{IdempotencyStore, Reservation};
use gate_postgres::{PostgresConfig, PostgresStore};
use gate_testkit::conformance::sample_record;
use integration_tests::{fresh_queue, moto_endpoint, sdk_config, sqs_client, unique};
use serde_json::Value;

/// The `gatectl` binary on a stack whose `Store` is `postgres`: `--stack NAME` reads `Store` and
/// `DatabaseUrlSecretArn` from the stack's parameters and the connection string from that secret
/// (as the functions do; the schema from `DATABASE_SCHEMA` in the environment, which the stack
/// does not set), then `show` and `list in-flight` read a record a consumer holds there. The
/// record is placed relative to the real clock the binary reads.
#[tokio::test]
async fn the_binary_operates_a_postgres_stack_named_by_its_parameters() {
    let url = std::env::var("GATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| panic!("set GATE_TEST_DATABASE_URL (scripts/with-postgres.sh)"));
    let schema = fresh_name("s", "gc_bin_pg");
    let store = PostgresStore::with_config(&PostgresConfig::new(&url, 1).with_schema(&schema))
        .expect("store");
    store.migrate().await.expect("migrate");
    let integration = unique("gatectl-pg");
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_millis(),
    )
    .expect("ms");
    let record = sample_record(&integration, "held", "inv-live#0", now - 1_000);
    assert_eq!(
        store.reserve(&record, now).await.expect("reserve"),
        Reservation::Reserved
    );

    let aws = sdk_config().await;
    let secret_arn = aws_sdk_secretsmanager::Client::new(&aws)
        .create_secret()
        .name(unique("gatectl-database-url"))
        .secret_string(&url)
        .send()
        .await
        .expect("create the secret in moto")
        .arn()
        .expect("arn")
        .to_string();
    let manual = fresh_queue(&sqs_client().await, "gc-bin-pg-manual").await;
    let name = unique("gc-pg-stack");
    let template = serde_json::json!({
        "Parameters": {
            "IntegrationName": {"Type": "String"},
            "TerminalBaseUrl": {"Type": "String"},
            "Store": {"Type": "String"},
            "DatabaseUrlSecretArn": {"Type": "String"},
        },
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"ManualBookingQueueUrl": {"Value": manual}},
    });
    let param = |k: &str, v: &str| {
        aws_sdk_cloudformation::types::Parameter::builder()
            .parameter_key(k)
            .parameter_value(v)
            .build()
    };
    aws_sdk_cloudformation::Client::new(&aws)
        .create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .parameters(param("IntegrationName", &integration))
        .parameters(param("TerminalBaseUrl", "https://slots.example"))
        .parameters(param("Store", "postgres"))
        .parameters(param("DatabaseUrlSecretArn", &secret_arn))
        .send()
        .await
        .expect("create stack in moto");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gatectl"))
            .args(["--stack", &name, "--json"])
            .args(args)
            .env("AWS_ENDPOINT_URL", moto_endpoint())
            .env("AWS_REGION", "eu-west-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("DATABASE_SCHEMA", &schema)
            .env_remove("DATABASE_URL")
            .env_remove("STORE")
            .env_remove("IDEMPOTENCY_TABLE")
            .env_remove("GATECTL_STACK")
            .output()
            .expect("gatectl runs");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!stderr.contains(&url), "the connection string was printed");
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let shown = run(&["show", &record.event_key]);
    assert_eq!(shown[0]["pk"], record.pk.as_str());
    assert_eq!(shown[0]["status"], "in_flight");
    assert_eq!(shown[0]["lease_owner"], "inv-live#0");
    assert_eq!(shown[0]["history"], serde_json::json!([]));
    let listed = run(&["list", "in-flight", "--older-than", "0s"]);
    let keys: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|r| r["event_key"].as_str())
        .collect();
    assert_eq!(keys, vec![record.event_key.as_str()]);
}

/// A failed call on PostgreSQL names the SQL operation and the relation, as one on DynamoDB
/// names the IAM action and the table: here a schema the migrations never created, read by
/// `list in-flight` (exit 1, transient), its message never holding the connection string.
#[tokio::test]
async fn a_failed_call_names_the_sql_operation_and_the_relation() {
    let url = std::env::var("GATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| panic!("set GATE_TEST_DATABASE_URL (scripts/with-postgres.sh)"));
    let schema = fresh_name("s", "gc_unmigrated");
    let out = list_in_flight(&url, &schema, "gatectl-pg-err").await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("failed: SELECT on {schema}.in_flight: ")),
        "{stderr}"
    );
    assert!(stderr.contains("run the migrations"), "{stderr}");
    assert!(!stderr.contains(&url), "the connection string was printed");
}

/// A privilege the database refuses (SQLSTATE 42501 `insufficient_privilege`) exits with the
/// permission code, as DynamoDB's `AccessDenied` does, naming the SQL operation and the relation:
/// here a login role that was granted nothing reads a migrated schema (`list in-flight`), and
/// the message never holds the connection string.
#[tokio::test]
async fn a_refused_privilege_exits_with_the_permission_code() {
    let url = std::env::var("GATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| panic!("set GATE_TEST_DATABASE_URL (scripts/with-postgres.sh)"));
    let schema = fresh_name("s", "gc_denied");
    let store = PostgresStore::with_config(&PostgresConfig::new(&url, 1).with_schema(&schema))
        .expect("store");
    store.migrate().await.expect("migrate");
    let role = fresh_name("r", "gc_nogrants");
    store
        .pool()
        .get()
        .await
        .expect("connection")
        .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
        .await
        .expect("create the role");
    // with-postgres.sh trusts every role on loopback (but gate_tls): the same server and
    // database as the superuser `gate`, as a role without grants.
    let role_url = url.replacen("postgresql://gate@", &format!("postgresql://{role}@"), 1);
    assert_ne!(role_url, url, "the test server's URL names the role gate");
    let out = list_in_flight(&role_url, &schema, "gatectl-pg-denied").await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(i32::from(gatectl::error::exit::PERMISSION)),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("may not SELECT on {schema}.in_flight")),
        "{stderr}"
    );
    assert!(stderr.contains("(42501)"), "{stderr}");
    assert!(
        !stderr.contains(&role_url),
        "the connection string was printed"
    );
}

/// A PostgreSQL identifier no other test uses: `prefix` and a unique name from `stem`, lower
/// case, every character not alphanumeric an `_`.
fn fresh_name(prefix: &str, stem: &str) -> String {
    format!(
        "{prefix}{}",
        unique(stem).replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    )
    .to_ascii_lowercase()
}

/// `gatectl list in-flight` as an operator runs it on a PostgreSQL stack: the store at `url` in
/// `schema`, a fresh manual queue at moto, the integration named after `name`, no DynamoDB table,
/// server or stack set.
async fn list_in_flight(url: &str, schema: &str, name: &str) -> std::process::Output {
    let manual = fresh_queue(&sqs_client().await, &format!("{name}-manual")).await;
    Command::new(env!("CARGO_BIN_EXE_gatectl"))
        .args(["list", "in-flight"])
        .env("AWS_ENDPOINT_URL", moto_endpoint())
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("STORE", "postgres")
        .env("DATABASE_URL", url)
        .env("DATABASE_SCHEMA", schema)
        .env("MANUAL_QUEUE_URL", &manual)
        .env("INTEGRATION_NAME", unique(name))
        .env_remove("IDEMPOTENCY_TABLE")
        .env_remove("TERMINAL_BASE_URL")
        .env_remove("GATECTL_STACK")
        .output()
        .expect("gatectl runs")
}
