//! Slots issued for another container: never committed for ours, with or without a store fault
//! and in a race with the reconciler; two slot ids for one key are counted.

use super::*;

/// FINDING (high). A claim answered with a slot for another container: `settle_claim` adds that
/// slot id to the record's `effect_ids` (unfenced, before its fenced `finish`). When the finish
/// does not land (a store error, or the lease was lost), the record stays `in_flight` holding a
/// foreign slot id. Past the claim horizon, the reconciler's routing to a person
/// (`FinishGuard::LeaseAndNoEffect`) is refused because a slot id is recorded, and
/// `after_refused_finish` commits the first recorded slot id: the foreign slot is booked for our
/// container in the TMS, and no person is told.
///
/// Right: a slot issued for another container is never committed for ours; the record ends
/// `failed`/`manual` with an item in the manual queue.
async fn foreign_slot_case(store: Arc<dyn Store>, integration: &str) {
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let b = body("PCS-FOREIGN-1");
    let created = T0 - (23 * HOUR_MS - 5 * 60_000);
    let n = parse_notification(&b, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");

    // 1. A stranded record (its worker died before claiming), 22 h 55 min old.
    let consumer_terminal = Arc::new(Scripted {
        claim: CallOutcome::Done(Effect {
            effect_id: "S-FOREIGN".into(),
            subject: Some(FOREIGN.into()),
        }),
        lookup: LookupOutcome::NotFound,
        claims: AtomicUsize::new(0),
    });
    // Its first finish fails without writing (a throttled or unreachable store after the SDK's
    // retries).
    let failing = Arc::new(FaultyStore::new(store.clone(), 0, FaultRates::NONE, "inv-"));
    failing.fail_finishes(1);
    let consumer = gate(
        failing,
        integration,
        consumer_terminal.clone(),
        manual.clone(),
        clock.clone(),
    );
    let stranded = consumer.config.new_record(
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

    // 2. A redelivery takes it over and claims; the terminal answers a slot for another
    //    container; the finish that would route it to a person fails (store unavailable).
    let report = consumer
        .handle_batch(
            sqs_event(&[("m-1", &b)]),
            &Invocation {
                request_id: "inv-1".into(),
                deadline_ms: T0 + 60_000,
            },
        )
        .await;
    assert!(
        matches!(report.records[0].outcome, RecordOutcome::Retry(_)),
        "{:?}",
        report.records[0].outcome
    );

    // 3. Ten minutes later (past the 23 h claim horizon) the reconciler runs; the terminal's
    //    lookup endpoint fails.
    clock.advance_ms(10 * 60_000);
    let reconciler = gate(
        store.clone(),
        integration,
        Arc::new(Scripted {
            claim: CallOutcome::Transient(AnswerDetail::new("unused")),
            lookup: LookupOutcome::Transient(AnswerDetail::new("lookup answered 503")),
            claims: AtomicUsize::new(0),
        }),
        manual.clone(),
        clock.clone(),
    );
    let run = reconciler
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &Invocation {
                request_id: "rec-1".into(),
                deadline_ms: clock.now_ms() + 120_000,
            },
        )
        .await;
    assert_eq!(run.examined, 1, "{run:?}");

    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    let booking = store
        .business_row(&record.event_key)
        .await
        .expect("booking");
    assert_eq!(
        booking.as_ref().map(|b| b.effect_id.as_str()),
        None,
        "a slot issued for {FOREIGN} was booked for {OURS}; record {:?} slot {:?}, manual {:?}",
        record.status,
        record.effect_id,
        manual.items().iter().map(|i| i.reason).collect::<Vec<_>>()
    );
    assert_ne!(record.status, RecordStatus::Committed);
    assert!(
        !manual.items().is_empty(),
        "nobody was told about the foreign slot"
    );
}

#[tokio::test]
async fn foreign_slot_is_never_committed_on_memory() {
    foreign_slot_case(Arc::new(MemoryStore::new()), "foreign-mem").await;
}

#[tokio::test]
async fn foreign_slot_is_never_committed_on_dynamodb() {
    let store = integration_tests::fresh_store("foreign").await;
    foreign_slot_case(Arc::new(store), &unique("foreign")).await;
}

/// FINDING (medium). A record whose `effect_ids` already holds a slot id recorded by a holder that
/// lost its lease (`record_effect_id`, the `LeaseLost` path) and is then committed by the new
/// holder with another slot id holds two distinct slot ids. The memory store counts it in
/// `multi_effect_keys` (1); `DynamoStore::commit` adds to `effect_ids` but never sets `multi_effect`,
/// so on DynamoDB the distinct-slot signal reads 0: the terminal issued two slots for one key and
/// the alarm meant for exactly that stays silent.
async fn two_slots_counted(store: Arc<dyn Store>, integration: &str) {
    let clock = Arc::new(ManualClock::new(T0));
    let g = gate(
        store.clone(),
        integration,
        Arc::new(Scripted {
            claim: CallOutcome::KeyInFlight,
            lookup: LookupOutcome::NotFound,
            claims: AtomicUsize::new(0),
        }),
        Arc::new(MemoryManualQueue::new()),
        clock.clone(),
    );
    let b = body("PCS-TWO-SLOTS");
    let n = parse_notification(&b, T0, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let holder = Invocation {
        request_id: "inv-b#0".into(),
        deadline_ms: T0 + 60_000,
    };
    let record = g
        .config
        .new_record(&truck_slot::event(&n).expect("event"), &keys, &holder, T0);
    assert_eq!(
        store.reserve(&record, T0).await.expect("reserve"),
        Reservation::Reserved
    );
    // The old holder's claim came back with S-1 after its lease was taken over by inv-b#0: its
    // commit was refused and it recorded S-1 (what `commit_effect` does on `LeaseLost`).
    let after = store
        .record_effect_id(&record.pk, "S-1", T0 + 1)
        .await
        .expect("record_effect_id")
        .expect("record");
    assert_eq!(after.status, RecordStatus::InFlight);
    // The holder's own claim returned S-2 (a terminal that ignored the key): it commits S-2.
    let booking = gate::record::BusinessRow::for_record(&record, "S-2", T0 + 2);
    assert_eq!(
        store
            .commit(&record.pk, "inv-b#0", "S-2", &booking, T0 + 2,)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    let now = store.get(&record.pk).await.expect("get").expect("record");
    assert_eq!(now.effect_ids.len(), 2, "{:?}", now.effect_ids);
    assert_eq!(
        store.multi_effect_keys().await.expect("multi_effect_keys"),
        1,
        "a key with two distinct slot ids must be counted by the distinct-slot signal"
    );
}

#[tokio::test]
async fn two_slot_ids_are_counted_on_memory() {
    two_slots_counted(Arc::new(MemoryStore::new()), "two-mem").await;
}

#[tokio::test]
async fn two_slot_ids_are_counted_on_dynamodb() {
    let store = integration_tests::fresh_store("two").await;
    two_slots_counted(Arc::new(store), &unique("two")).await;
}

/// The consumer's terminal for the race variant: its claim waits for `land`, then answers a slot
/// for another container.
struct PausedForeignClaim {
    land: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl SlotTerminal for PausedForeignClaim {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        self.land.notified().await;
        CallOutcome::Done(Effect {
            effect_id: "S-FOREIGN".into(),
            subject: Some(FOREIGN.into()),
        })
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// The reconciler's terminal for the race variant: its lookup finds nothing, but first lets the
/// consumer's paused claim land and waits until the consumer is done.
struct LookupLetsClaimLand {
    land: Arc<tokio::sync::Notify>,
    consumer_done: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl SlotTerminal for LookupLetsClaimLand {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        CallOutcome::KeyInFlight
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        self.land.notify_one();
        self.consumer_done.notified().await;
        LookupOutcome::NotFound
    }
}

/// FINDING (high), the same as [`foreign_slot_case`] with no store fault: the field faults'
/// second input (record 23 h - 30 s old, a redelivery takes it over and claims, the reconciler's
/// clock 45 s ahead routes it past the horizon) where the terminal answers the paused claim with
/// a slot for another container. The consumer records the foreign slot id (unfenced), its
/// `failed` mark is refused (lease lost); the reconciler's routing is refused by the no-slot
/// guard and it commits the foreign slot. Right: nothing booked under a foreign slot; a person gets the record.
async fn foreign_slot_race(store: Arc<dyn Store>, integration: &str) {
    let clock = Arc::new(ManualClock::new(T0));
    let manual = Arc::new(MemoryManualQueue::new());
    let land = Arc::new(tokio::sync::Notify::new());
    let consumer_done = Arc::new(tokio::sync::Notify::new());
    let b = body("PCS-FOREIGN-2");
    let created = T0 - (23 * HOUR_MS - 30_000);
    let n = parse_notification(&b, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let consumer = gate(
        store.clone(),
        integration,
        Arc::new(PausedForeignClaim { land: land.clone() }),
        manual.clone(),
        clock.clone(),
    );
    let stranded = consumer.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &Invocation {
            request_id: "inv-0#0".into(),
            deadline_ms: created + 30_000,
        },
        created,
    );
    assert_eq!(
        store.reserve(&stranded, created).await.expect("reserve"),
        Reservation::Reserved
    );
    let task = {
        let done = consumer_done.clone();
        let b = b.clone();
        tokio::spawn(async move {
            let r = consumer
                .handle_batch(
                    sqs_event(&[("m-race", &b)]),
                    &Invocation {
                        request_id: "inv-1".into(),
                        deadline_ms: T0 + 30_000,
                    },
                )
                .await;
            done.notify_one();
            r
        })
    };
    while store
        .get(&stranded.pk)
        .await
        .expect("get")
        .and_then(|r| r.lease_owner)
        .as_deref()
        != Some("inv-1#0")
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reconciler = gate(
        store.clone(),
        integration,
        Arc::new(LookupLetsClaimLand {
            land,
            consumer_done,
        }),
        manual.clone(),
        Arc::new(integration_tests::field_cases::OffsetClock {
            base: clock.clone(),
            offset_ms: 45_000,
        }),
    );
    let run = reconciler
        .reconcile(
            store.as_ref(),
            &ReconcilerConfig::default(),
            &Invocation {
                request_id: "rec-1".into(),
                deadline_ms: T0 + 165_000,
            },
        )
        .await;
    let consumer_report = task.await.expect("consumer");
    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    let booking = store
        .business_row(&record.event_key)
        .await
        .expect("booking");
    assert_eq!(
        booking.map(|b| b.effect_id),
        None,
        "foreign slot booked: record {:?} {:?}, consumer {:?}, run {run:?}, manual {:?}",
        record.status,
        record.effect_id,
        consumer_report.records[0].outcome,
        manual.items().iter().map(|i| i.reason).collect::<Vec<_>>()
    );
    assert!(!manual.items().is_empty());
}

#[tokio::test]
async fn foreign_slot_race_on_memory() {
    foreign_slot_race(Arc::new(MemoryStore::new()), "race-mem").await;
}

#[tokio::test]
async fn foreign_slot_race_on_dynamodb() {
    let store = integration_tests::fresh_store("race").await;
    foreign_slot_race(Arc::new(store), &unique("race")).await;
}
