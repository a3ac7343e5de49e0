//! Writes that land and lose their answers on DynamoDB (moto, through the fault proxy): the
//! take-over, the finish, a poison body's routing and a past-retention routing recognise
//! themselves.

use super::*;

/// PROBE (held): a redelivery takes over a stranded record; the take-over `UpdateItem` lands and
/// its answer is held 4 s (past the 3 s attempt timeout). Right: the retry meets its own lease,
/// the record is claimed and committed in this invocation, nothing left `in_flight`.
#[tokio::test]
async fn lost_take_over_answer_on_dynamodb() {
    let (proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "UpdateItem", 1, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "losttk").await);
    let integration = unique("losttk");
    let clock = Arc::new(ManualClock::new(T0));
    let terminal = Arc::new(Scripted {
        claim: CallOutcome::Done(Effect {
            effect_id: "S-7".into(),
            subject: Some(OURS.into()),
        }),
        lookup: LookupOutcome::NotFound,
        claims: AtomicUsize::new(0),
    });
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        store.clone(),
        &integration,
        terminal.clone(),
        manual.clone(),
        clock.clone(),
    );
    let b = body("PCS-TAKE-1");
    let created = T0 - 10 * 60_000;
    let n = parse_notification(&b, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let stranded = g.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &Invocation {
            request_id: "inv-dead#0".into(),
            deadline_ms: created + 30_000,
        },
        created,
    );
    assert_eq!(
        store.reserve(&stranded, created).await.expect("reserve"),
        Reservation::Reserved
    );
    let report = g
        .handle_batch(
            sqs_event(&[("m-take", &b)]),
            &Invocation {
                request_id: "inv-2".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    let ops: Vec<String> = proxy.seen();
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Committed {
            effect_id: "S-7".into(),
        },
        "{ops:?}"
    );
    assert_eq!(terminal.claims.load(Ordering::SeqCst), 1);
    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Committed);
    assert!(manual.items().is_empty());
}

/// PROBE (held): a terminal without key support: the record is marked `manual` first (`finish`,
/// the first `UpdateItem`), and that answer is held 4 s. Right: the retry recognises its own
/// mark, one item in the manual queue, the routing confirmed (no `route_pending`, no request).
#[tokio::test]
async fn lost_finish_answer_on_dynamodb() {
    let (proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "UpdateItem", 1, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "lostfin").await);
    let integration = unique("lostfin");
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let mut g = gate(
        store.clone(),
        &integration,
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        manual.clone(),
        clock.clone(),
    );
    g.config.server_supports_idempotency_key = false;
    let b = body("PCS-FIN-1");
    let report = g
        .handle_batch(
            sqs_event(&[("m-fin", &b)]),
            &Invocation {
                request_id: "inv-3".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    let ops = proxy.seen();
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::NoIdempotencySupport),
        "{ops:?}"
    );
    assert_eq!(manual.items().len(), 1);
    let n = parse_notification(&b, T0, &["ECT-DELTA".to_string()]).expect("body");
    let pk = gate::record::record_pk(&integration, &derive_keys(&n).expect("keys").event_key);
    let record = store.get(&pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Manual);
    assert!(!record.route_pending, "routing left pending: {record:?}");
    assert!(record.request.is_empty());
}

/// PROBE (held): a poison body's routing record: its reserve `PutItem` (born `manual`, routing
/// pending) lands and the answer is held 4 s. Right: one item, routing confirmed, `Rejected`.
#[tokio::test]
async fn lost_poison_routing_answer_on_dynamodb() {
    let (_proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "PutItem", 1, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "lostpoi").await);
    let integration = unique("lostpoi");
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        store.clone(),
        &integration,
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        manual.clone(),
        clock.clone(),
    );
    let poison = r#"{"notificationId":"PCS-POISON","equipment_number":"MWCU6059785"}"#;
    let report = g
        .handle_batch(
            sqs_event(&[("m-poison", poison)]),
            &Invocation {
                request_id: "inv-4".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Rejected(_)),
        "{:?}",
        report.records[0].outcome
    );
    assert_eq!(manual.items().len(), 1);
}

/// PROBE (held): a redelivery of a record past the claim horizon (lookup finds nothing): its
/// take-over and its `manual` mark (the first two `UpdateItem`s) both land and lose their
/// answers. Right: one `past_key_retention` item, the record `manual` and confirmed, no claim.
#[tokio::test]
async fn lost_answers_on_past_retention_routing_on_dynamodb() {
    let (proxy, endpoint) =
        FaultProxy::start(&moto_endpoint(), "UpdateItem", 2, Duration::from_secs(4)).await;
    let store: Arc<dyn Store> = Arc::new(store_via(&endpoint, "lostpr").await);
    let integration = unique("lostpr");
    let clock = Arc::new(ManualClock::new(T0));
    let terminal = Arc::new(Scripted {
        claim: CallOutcome::KeyInFlight,
        lookup: LookupOutcome::NotFound,
        claims: AtomicUsize::new(0),
    });
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        store.clone(),
        &integration,
        terminal.clone(),
        manual.clone(),
        clock.clone(),
    );
    let b = body("PCS-PAST-1");
    let created = T0 - 23 * HOUR_MS - 60_000;
    let n = parse_notification(&b, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let stranded = g.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &Invocation {
            request_id: "inv-dead#0".into(),
            deadline_ms: created + 30_000,
        },
        created,
    );
    assert_eq!(
        store.reserve(&stranded, created).await.expect("reserve"),
        Reservation::Reserved
    );
    let report = g
        .handle_batch(
            sqs_event(&[("m-past", &b)]),
            &Invocation {
                request_id: "inv-5".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    let ops = proxy.seen();
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::PastKeyRetention),
        "{ops:?}"
    );
    assert_eq!(terminal.claims.load(Ordering::SeqCst), 0);
    assert_eq!(manual.items().len(), 1);
    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Manual);
    assert!(!record.route_pending);
    assert!(record.request.is_empty());
}
