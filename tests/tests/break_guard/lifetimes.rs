//! The guard's lifetime: late copies after it expired, a configured key TTL, and a collision
//! the reconciler finds.

use super::*;

// ---- Lifetimes ------------------------------------------------------------------------------

/// A late copy under a new id, and a late redelivery of the first event, after the natural-key
/// item has expired (the window's end plus the key TTL): the window is over, so neither calls.
#[tokio::test]
async fn late_copies_after_the_guard_expired_never_call() {
    let w = World::new(memory(), "bg-late");
    let a = body("PCS-BG-11", W1, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    let ttl_ms = gate::consumer::DEFAULT_KEY_TTL_S * 1_000;
    w.clock.set_ms(W1_END_MS + ttl_ms + 2_000);
    let b = body("PCS-BG-11-COPY", W1, 25_000);
    let out = w.deliver("inv-2", &[("m2", &a), ("m3", &b)]).await;
    assert!(
        out.iter().all(|o| !is_committed(o)),
        "a late message was committed: {out:?}"
    );
    assert_eq!(w.slots(), 1);
}

/// The natural-key item must outlive the record it guards: a deployment with a key TTL longer
/// than the default (`KeyTtlSeconds`, here 40 days) keeps its records 40 days past the event's
/// end, and the guard of the natural key must not expire before them (the architecture: it
/// "expires with the event (its end plus the key TTL)"). Read on DynamoDB (moto), where the item
/// can be read as stored.
#[tokio::test]
async fn the_guard_outlives_the_record_with_a_configured_key_ttl() {
    let (_proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = store_via(&endpoint, "bg-ttl").await;
    let table = store_table(&store);
    let integration = unique("bgttl");
    let mut config = GateConfig::new(&integration);
    config.key_ttl_s = 40 * 24 * 3_600;
    let w = World::with_config(Arc::new(store), config);
    let a = body("PCS-BG-12", W1, 25_000);
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    let record = w.record(&a).await;
    let nk_pk = format!("{integration}#nk#{CONTAINER}#{}", W1.0);
    let item = integration_tests::dynamo_client()
        .await
        .get_item()
        .table_name(&table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(nk_pk.clone()),
        )
        .consistent_read(true)
        .send()
        .await
        .expect("get_item")
        .item
        .unwrap_or_else(|| panic!("no natural-key item {nk_pk}"));
    let guard_expires_at_s: i64 = item
        .get("expires_at")
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .expect("expires_at");
    assert!(
        guard_expires_at_s >= record.expires_at_s,
        "the guard expires at {guard_expires_at_s}, {} s before the record it guards ({})",
        record.expires_at_s - guard_expires_at_s,
        record.expires_at_s
    );
}

fn store_table(store: &gate_dynamo::DynamoStore) -> String {
    store.idempotency_table().to_string()
}

/// A copy whose worker died after its reserve, before its guard, while the first event then
/// committed: the reconciler resumes the copy, meets the first's guard and hands the copy to a
/// person, uncalled; the copy's redelivery is then a duplicate of the `manual` record, so the
/// person gets one item, naming both event keys. (Its body is the stored request: the reconciler
/// keeps no SQS body.)
#[tokio::test]
async fn a_collision_found_by_the_reconciler_reaches_a_person_once() {
    let store = memory();
    let w = World::new(store.clone(), "bg-rec-collision");
    let a = body("PCS-BG-13", W1, 25_000);
    let b = body("PCS-BG-13-COPY", W1, 25_000);
    // The copy reserved, its worker dead before the guard.
    let now = w.clock.now_ms();
    let n = parse_notification(&b, now, &["ECT-DELTA".to_string()]).expect("body");
    let mut copy = w.gate.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &truck_slot::derive_keys(&n).expect("keys"),
        &w.invocation("inv-dead"),
        now,
    );
    copy.lease_owner = Some("inv-dead#0".into());
    copy.lease_until_ms = Some(now + 30_000);
    assert_eq!(
        w.store.reserve(&copy, now).await.expect("reserve"),
        Reservation::Reserved
    );
    let out = w.deliver("inv-1", &[("m1", &a)]).await;
    assert!(is_committed(&out[0]), "{out:?}");
    w.clock.advance_ms(150_000);
    let report = w
        .gate
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &w.invocation("rec-1"),
        )
        .await;
    assert_eq!((report.reconciled, report.manual), (0, 1), "{report:?}");
    let out = w.deliver("inv-2", &[("m2", &b)]).await;
    assert_eq!(out, [RecordOutcome::Duplicate(RecordStatus::Manual)]);
    let items = w.manual.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].reason, ManualReason::NaturalKeyCollision);
    assert_eq!(items[0].event_key.as_deref(), Some(event_key(&b).as_str()));
    assert!(items[0].detail.contains(&event_key(&a)), "{items:?}");
    assert_eq!(w.slots(), 1);
}
