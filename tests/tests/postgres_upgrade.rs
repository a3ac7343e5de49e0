//! A PostgreSQL schema of the gate's previous release upgraded by `PostgresStore::migrate`
//! (migration 1: the legacy columns `slot_id`, `slot_ids`, the legacy view `multi_slot`;
//! migration 2: the neutral vocabulary): its rows are read, committed over and counted
//! as before.
//!
//! Needs `GATE_TEST_DATABASE_URL`, as `tests/postgres.rs`: `scripts/with-postgres.sh cargo test
//! -p integration-tests --test postgres_upgrade`.

use gate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
use gate::store::audit::AuditLog;
use gate::store::BusinessRows;
use gate::store::{CommitOutcome, IdempotencyStore, InFlightIndex};
use gate_postgres::{PostgresConfig, PostgresStore, MIGRATIONS, MIGRATIONS_TABLE};
use gate_testkit::conformance::{sample_record, NOW_MS};
use integration_tests::database_url;

/// Inserts `r` as migration 1 stores it (legacy `slot_id`, `slot_ids`).
async fn insert_v1(client: &tokio_postgres::Client, schema: &str, r: &IdempotencyRecord) {
    let ids: Vec<String> = r.effect_ids.iter().cloned().collect();
    let labels = serde_json::to_string(&r.labels).expect("labels");
    client
        .execute(
            &format!(
                "INSERT INTO {schema}.idempotency (pk, event_key, status, fingerprint, request, \
                 op_key, lease_owner, lease_until_ms, created_at_ms, updated_at_ms, expires_at_s, \
                 slot_id, slot_ids, inflight_shard, labels) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15::text::jsonb)"
            ),
            &[
                &r.pk,
                &r.event_key,
                &r.status.as_str(),
                &r.fingerprint,
                &r.request,
                &r.op_key,
                &r.lease_owner,
                &r.lease_until_ms,
                &r.created_at_ms,
                &r.updated_at_ms,
                &r.expires_at_s,
                &r.effect_id,
                &ids,
                &r.inflight_shard,
                &labels,
            ],
        )
        .await
        .expect("insert a version-1 row");
}

#[tokio::test]
async fn rows_of_the_previous_layout_are_read_committed_over_and_counted() {
    let schema = format!(
        "t{}_upgrade_v1",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let store = PostgresStore::with_config(
        &PostgresConfig::new(database_url(), 4).with_schema(schema.clone()),
    )
    .expect("store");

    // The schema as the previous release left it: migration 1 applied and recorded.
    let v1 = MIGRATIONS
        .iter()
        .find(|m| m.version == 1)
        .expect("migration 1");
    let client = store.pool().get().await.expect("connection");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.{MIGRATIONS_TABLE} (version integer PRIMARY KEY, \
               name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now()); \
             SET search_path TO {schema}; {} ; RESET search_path; \
             INSERT INTO {schema}.{MIGRATIONS_TABLE} (version, name) VALUES (1, '{}')",
            v1.sql, v1.name
        ))
        .await
        .expect("migration 1");

    // In flight, held by owner-a, an effect id already recorded (a holder that lost its lease
    // returned it): the new holder commits that id, and no other.
    let mut held = sample_record("pg-upgrade", "held", "owner-a", NOW_MS);
    held.effect_ids = ["S-RECORDED".to_string()].into();
    insert_v1(&client, &schema, &held).await;
    // Committed, with two distinct effect ids: the multi-effect signal counts it.
    let mut two = sample_record("pg-upgrade", "two", "owner-b", NOW_MS);
    two.status = RecordStatus::Committed;
    two.effect_id = Some("S-A".into());
    two.effect_ids = ["S-A".to_string(), "S-B".to_string()].into();
    two.inflight_shard = None;
    two.lease_until_ms = None;
    insert_v1(&client, &schema, &two).await;
    client
        .execute(
            &format!(
                "INSERT INTO {schema}.business_rows (source_event, slot_id, labels, booked_at_ms) \
                 VALUES ($1, 'S-A', '{{}}'::jsonb, $2)"
            ),
            &[&two.event_key, &NOW_MS],
        )
        .await
        .expect("a version-1 business row");
    drop(client);

    assert_eq!(
        store.migrate().await.expect("migrate"),
        vec![2, 3, 4],
        "from version 1: the neutral names (2), the purge indexes (3), the audit history (4)"
    );

    assert_eq!(store.get(&two.pk).await.expect("get"), Some(two.clone()));
    // A record of the previous layout takes gatectl's audit lines (the table of version 4).
    assert!(store.history(&two.pk).await.expect("history").is_empty());
    let line = gate::store::audit::AuditEntry {
        at_ms: NOW_MS,
        who: "gatectl:alice".into(),
        action: "finish".into(),
        detail: "after the upgrade".into(),
    };
    store.append_history(&two.pk, &line).await.expect("append");
    assert_eq!(store.history(&two.pk).await.expect("history"), vec![line]);
    assert_eq!(
        store
            .business_row(&two.event_key)
            .await
            .expect("booking")
            .map(|b| b.effect_id),
        Some("S-A".to_string())
    );
    assert_eq!(store.multi_effect_keys().await.expect("multi"), 1);
    assert_eq!(store.get(&held.pk).await.expect("get"), Some(held.clone()));

    let row = BusinessRow::for_record(&held, "S-RECORDED", NOW_MS + 5);
    assert!(matches!(
        store
            .commit(&held.pk, "owner-a", "S-RECORDED", &row, NOW_MS + 5)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    ));
    let after = store.get(&held.pk).await.expect("get").expect("record");
    assert_eq!(after.status, RecordStatus::Committed);
    assert_eq!(after.effect_id.as_deref(), Some("S-RECORDED"));
    assert_eq!(after.effect_ids, ["S-RECORDED".to_string()].into());
    assert_eq!(
        store.business_row(&held.event_key).await.expect("booking"),
        Some(row)
    );
    assert_eq!(store.multi_effect_keys().await.expect("multi"), 1);

    let client = store.pool().get().await.expect("connection");
    let views: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.views WHERE table_schema = $1 \
             ORDER BY table_name",
            &[&schema],
        )
        .await
        .expect("views")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(views, ["in_flight", "multi_effect"]);
}
