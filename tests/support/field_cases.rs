//! The three field faults, each a scenario with its own right values, written once over any
//! `IdempotencyStore` and run on the memory store and on DynamoDB (moto):
//!
//! 1. a reserve whose write landed but whose answer was lost, retried by the client
//!    ([`a_reserve_whose_answer_was_lost_commits_at_once`]);
//! 2. a holder whose lease was taken over while its claim was in transit
//!    ([`lease_lost_while_the_claim_was_in_transit`]);
//! 3. a record that must outlive its event ([`a_record_outlives_its_event`]).
//!
//! The store double that loses answers is [`LostAnswers`]. Every clock here is a [`ManualClock`] at
//! [`T0`]: nothing depends on today's date.

use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::manual::{ManualItem, ManualQueue, ManualQueueError, ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::{record_pk, BusinessRow, IdempotencyRecord, NaturalKey, RecordStatus};
use gate::signals::Counts;
use gate::store::{IdempotencyStore, Reservation, Store};
use sim::dst::CoreTerminal;
use sim::terminal::{TerminalConfig, TerminalCore};
use tokio::sync::Notify;
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::{CallOutcome, LookupOutcome, SlotTerminal};

use crate::sqs_event;

mod lost_answers;
pub use lost_answers::LostAnswers;

/// 2027-05-31T06:00:00Z in epoch **milliseconds**: the day before the field faults' sample window
/// (2027-06-01 08:00-10:00Z). A fixed, simulated time.
pub const T0: i64 = 1_811_743_200_000;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The first field fault's input (a reserve whose answer was lost), verbatim.
pub const LOST_ANSWER_BODY: &str = r#"{"notificationId":"PCS-F13-3","equipment_number":"MWCU6059784","preferred_window":{"start":"2027-06-01T08:00:00Z","end":"2027-06-01T10:00:00Z"},"terminal":"ECT-DELTA","pin":"RLS-104233","gross_mass_kg":25000}"#;

/// A clock `offset_ms` ahead of `base` (a host whose clock runs fast).
pub struct OffsetClock {
    /// True time.
    pub base: Arc<ManualClock>,
    /// How far ahead, milliseconds.
    pub offset_ms: i64,
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> i64 {
        self.base.now_ms() + self.offset_ms
    }
}

/// A terminal simulator core at `clock` with the default 24 h key retention.
pub fn terminal_core(clock: &Arc<ManualClock>) -> Arc<TerminalCore> {
    TerminalCore::new(TerminalConfig::default(), clock.clone() as Arc<dyn Clock>)
}

/// A gate over `store` booking at ECT-DELTA through `terminal`, at `clock`.
pub fn gate(
    store: Arc<dyn IdempotencyStore>,
    integration: &str,
    terminal: Arc<dyn SlotTerminal>,
    manual: Arc<dyn ManualQueue>,
    clock: Arc<dyn Clock>,
) -> Gate {
    Gate {
        config: GateConfig::new(integration),
        store,
        integration: Arc::new(truck_slot::TruckSlot::new(
            terminal,
            vec!["ECT-DELTA".into()],
        )),
        manual,
        clock,
    }
}

fn pk_of(integration: &str, body: &str, now_ms: i64) -> String {
    let n = parse_notification(body, now_ms, &["ECT-DELTA".to_string()]).expect("body");
    record_pk(integration, &derive_keys(&n).expect("keys").event_key)
}

/// Input 1: one SQS record whose first reserve `PutItem` lands but whose answer is lost; the
/// client retries it and meets its own reservation. `store` must inject that fault on its first
/// reserve. Right: a successful reserve, claimed and committed in the same invocation, no
/// duplicate counted, no batch item failure, one slot.
pub async fn a_reserve_whose_answer_was_lost_commits_at_once(
    store: Arc<dyn IdempotencyStore>,
    integration: &str,
) {
    let clock = Arc::new(ManualClock::new(T0));
    let core = terminal_core(&clock);
    let manual = Arc::new(MemoryManualQueue::new());
    let g = gate(
        store.clone(),
        integration,
        Arc::new(CoreTerminal::new(core.clone())),
        manual.clone(),
        clock.clone(),
    );
    let invocation = Invocation {
        request_id: "inv-f13".into(),
        deadline_ms: T0 + 60_000,
    };
    let report = g
        .handle_batch(sqs_event(&[("m-f13-3", LOST_ANSWER_BODY)]), &invocation)
        .await;
    let slot = core.slots().first().map(|s| s.effect_id.clone());
    assert_eq!(core.slots_issued(), 1, "one claim, one slot");
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Committed {
            effect_id: slot.clone().expect("a slot"),
        }
    );
    assert!(report.response.batch_item_failures.is_empty());
    let counts = Counts::of_batch(&report);
    assert_eq!((counts.duplicates, counts.committed), (0, 1), "{counts:?}");
    let record = store
        .get(&pk_of(integration, LOST_ANSWER_BODY, T0))
        .await
        .expect("get")
        .expect("record");
    assert_eq!(record.status, RecordStatus::Committed);
    assert_eq!(record.effect_id, slot);
    assert!(manual.items().is_empty());
}

/// A terminal whose claims wait until `land` is notified before they reach the simulator (the
/// request paused in transit).
struct PausedClaims {
    inner: CoreTerminal,
    land: Arc<Notify>,
}

#[async_trait]
impl SlotTerminal for PausedClaims {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        self.land.notified().await;
        self.inner.claim(op_key, request).await
    }
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.inner.lookup(op_key, request).await
    }
}

/// Where, in the reconciler's routing of the record to a person, the consumer's paused claim
/// lands and its commit runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    /// Right after the reconciler's lookup found nothing, before it marks the record.
    AfterLookup,
    /// After the reconciler marked the record, before its manual send.
    BeforeManualSend,
}

/// The reconciler's terminal: its lookup can let the consumer's claim land and wait for the
/// consumer to finish.
struct HookedLookup {
    inner: CoreTerminal,
    hook: Option<Arc<Hook>>,
}

/// The reconciler's manual queue: its first send can let the consumer's claim land and wait
/// for the consumer to finish.
struct HookedManual {
    inner: Arc<MemoryManualQueue>,
    hook: Option<Arc<Hook>>,
}

/// Lets the consumer's claim land once, then waits until the consumer is done.
struct Hook {
    land: Arc<Notify>,
    consumer_done: Arc<Notify>,
    fired: std::sync::atomic::AtomicBool,
}

impl Hook {
    async fn fire(&self) {
        if !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.land.notify_one();
            self.consumer_done.notified().await;
        }
    }
}

#[async_trait]
impl SlotTerminal for HookedLookup {
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        self.inner.claim(op_key, request).await
    }
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        let found = self.inner.lookup(op_key, request).await;
        if let Some(hook) = &self.hook {
            hook.fire().await;
        }
        found
    }
}

#[async_trait]
impl ManualQueue for HookedManual {
    async fn send(&self, item: ManualItem) -> Result<(), ManualQueueError> {
        if let Some(hook) = &self.hook {
            hook.fire().await;
        }
        self.inner.send(item).await
    }
}

/// What [`lease_lost_while_the_claim_was_in_transit`] ends with.
#[derive(Debug)]
pub struct FenceResult {
    /// The consumer's outcome for the redelivered record.
    pub consumer: RecordOutcome,
    /// The record at the end.
    pub record: IdempotencyRecord,
    /// Slots the terminal issued.
    pub slots: Vec<String>,
    /// Whether a TMS booking exists, with its slot.
    pub booking: Option<String>,
    /// The manual queue's items: (reason, event key).
    pub manual: Vec<(ManualReason, Option<String>)>,
}

/// Input 2: an `in_flight` record 23 h minus 30 s old by the consumer's clock; a redelivery takes
/// it over and claims, the request paused in transit; the reconciler, its clock 45 s ahead,
/// judges the record past the claim horizon (24 h key retention minus 1 h), finds nothing by
/// lookup and routes the record to a person; the consumer's claim lands at `landing` and its
/// commit runs. Right: no committed event is ever also in the manual queue; the record ends
/// either committed with the consumer's slot (the reconciler's routing is refused because the
/// slot was recorded first) or `manual` with the slot routed to a person as `unbooked_slot`.
pub async fn lease_lost_while_the_claim_was_in_transit(
    store: Arc<dyn Store>,
    integration: &str,
    landing: Landing,
) -> FenceResult {
    let clock = Arc::new(ManualClock::new(T0));
    let core = terminal_core(&clock);
    let queue = Arc::new(MemoryManualQueue::new());
    let body = serde_json::json!({
        "notificationId": "PCS-FENCE-1",
        "equipment_number": "MWCU6059784",
        "preferred_window": {"start": "2027-06-01T08:00:00Z", "end": "2027-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233"
    })
    .to_string();

    // The record a worker left 23 h minus 30 s ago (its lease long expired).
    let created = T0 - (23 * HOUR_MS - 30_000);
    let n = parse_notification(&body, created, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let land = Arc::new(Notify::new());
    let consumer = gate(
        store.clone(),
        integration,
        Arc::new(PausedClaims {
            inner: CoreTerminal::new(core.clone()),
            land: land.clone(),
        }),
        queue.clone(),
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

    let consumer_done = Arc::new(Notify::new());
    let hook = Arc::new(Hook {
        land,
        consumer_done: consumer_done.clone(),
        fired: false.into(),
    });
    let reconciler = gate(
        store.clone(),
        integration,
        Arc::new(HookedLookup {
            inner: CoreTerminal::new(core.clone()),
            hook: (landing == Landing::AfterLookup).then(|| hook.clone()),
        }),
        Arc::new(HookedManual {
            inner: queue.clone(),
            hook: (landing == Landing::BeforeManualSend).then(|| hook.clone()),
        }),
        Arc::new(OffsetClock {
            base: clock.clone(),
            offset_ms: 45_000,
        }),
    );

    // The redelivery: its invocation ends in 30 s, so its lease ends then too.
    let consumer_task = {
        let body = body.clone();
        let done = consumer_done.clone();
        tokio::spawn(async move {
            let invocation = Invocation {
                request_id: "inv-1".into(),
                deadline_ms: T0 + 30_000,
            };
            let report = consumer
                .handle_batch(sqs_event(&[("m-redelivered", &body)]), &invocation)
                .await;
            done.notify_one();
            report
        })
    };
    // Give the consumer time to take the lease over and start its claim.
    while store
        .get(&stranded.pk)
        .await
        .expect("get")
        .and_then(|r| r.lease_owner)
        .as_deref()
        != Some("inv-1#0")
    {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let config = ReconcilerConfig::default();
    let run = reconciler
        .reconcile(
            store.as_ref(),
            &config,
            &Invocation {
                request_id: "rec-1".into(),
                deadline_ms: T0 + 45_000 + 120_000,
            },
        )
        .await;
    assert_eq!(run.examined, 1, "{run:?}");
    let report = consumer_task.await.expect("consumer task");
    let record = store.get(&stranded.pk).await.expect("get").expect("record");
    FenceResult {
        consumer: report.records[0].outcome.clone(),
        booking: store
            .business_row(&record.event_key)
            .await
            .expect("booking")
            .map(|b| b.effect_id),
        record,
        slots: core.slots().into_iter().map(|s| s.effect_id).collect(),
        manual: queue
            .items()
            .into_iter()
            .map(|i| (i.reason, i.event_key))
            .collect(),
    }
}

/// Input 2 with the right values asserted for both landings.
pub async fn a_holder_that_lost_its_lease_never_commits<F, Fut>(make_store: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = (Arc<dyn Store>, String)>,
{
    // The claim lands before the reconciler marks the record: its slot is recorded, the
    // reconciler's routing is refused by the no-slot guard and it commits that slot.
    let (store, integration) = make_store("fence-a").await;
    let r =
        lease_lost_while_the_claim_was_in_transit(store, &integration, Landing::AfterLookup).await;
    assert_eq!(r.slots.len(), 1, "{r:?}");
    assert_eq!(
        r.consumer,
        RecordOutcome::LeaseLost {
            effect_id: Some(r.slots[0].clone())
        }
    );
    assert_eq!(r.record.status, RecordStatus::Committed, "{r:?}");
    assert_eq!(r.record.effect_id.as_deref(), Some(r.slots[0].as_str()));
    assert_eq!(r.booking.as_deref(), Some(r.slots[0].as_str()));
    assert!(
        r.manual.is_empty(),
        "a committed event in the manual queue: {r:?}"
    );

    // The claim lands after the reconciler marked the record (its routing fenced first): the
    // consumer's commit is refused, and its slot goes to a person once, as an unbooked slot to
    // book or cancel, next to the past-retention item. Not committed, no booking.
    let (store, integration) = make_store("fence-b").await;
    let r =
        lease_lost_while_the_claim_was_in_transit(store, &integration, Landing::BeforeManualSend)
            .await;
    assert_eq!(r.slots.len(), 1, "{r:?}");
    assert_eq!(
        r.consumer,
        RecordOutcome::Manual(ManualReason::UnrecordedEffect)
    );
    assert_eq!(r.record.status, RecordStatus::Manual, "{r:?}");
    assert!(r.record.effect_ids.contains(&r.slots[0]));
    assert_eq!(r.booking, None);
    let mut reasons: Vec<ManualReason> = r.manual.iter().map(|(reason, _)| *reason).collect();
    reasons.sort_by_key(|r| r.code());
    assert_eq!(
        reasons,
        [
            ManualReason::PastKeyRetention,
            ManualReason::UnrecordedEffect
        ]
    );
    assert!(r
        .manual
        .iter()
        .all(|(_, key)| key.as_deref() == Some(r.record.event_key.as_str())));
}

/// Input 3: a notification whose window is 26 days ahead; its worker dies after the claim and
/// the message is lost; no reconciler runs; the same notification is re-fired on day 22 (key TTL
/// 21 days, terminal key retention 24 h). Right: the record is still there (it lives 21 days past
/// the window's end), the re-fire resumes it with its history (creation time), never claims
/// again (past the claim horizon; the terminal forgot the key), and a person gets it once: one
/// slot, no booking, one manual item.
pub async fn a_record_outlives_its_event(store: Arc<dyn Store>, integration: &str) {
    let clock = Arc::new(ManualClock::new(T0));
    let core = terminal_core(&clock);
    let queue = Arc::new(MemoryManualQueue::new());
    let terminal = CoreTerminal::new(core.clone());
    let g = gate(
        store.clone(),
        integration,
        Arc::new(terminal.clone()),
        queue.clone(),
        clock.clone(),
    );
    let start = chrono::DateTime::from_timestamp_millis(T0 + 26 * DAY_MS).expect("time");
    let end = start + chrono::Duration::hours(2);
    let body = serde_json::json!({
        "notificationId": "PCS-LATE-22",
        "equipment_number": "MWCU6059784",
        "preferred_window": {"start": start.to_rfc3339(), "end": end.to_rfc3339()},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233"
    })
    .to_string();

    // The worker reserves and claims, then dies: no commit, no release, the message is lost.
    let n = parse_notification(&body, T0, &["ECT-DELTA".to_string()]).expect("body");
    let keys = derive_keys(&n).expect("keys");
    let record = g.config.new_record(
        &truck_slot::event(&n).expect("event"),
        &keys,
        &Invocation {
            request_id: "inv-crashed".into(),
            deadline_ms: T0 + 60_000,
        },
        T0,
    );
    assert!(
        record.expires_at_s >= end.timestamp() + g.config.key_ttl_s,
        "the record must outlive the window by the key TTL"
    );
    assert_eq!(
        store.reserve(&record, T0).await.expect("reserve"),
        Reservation::Reserved
    );
    assert!(matches!(
        terminal.claim(&record.op_key, &record.request).await,
        CallOutcome::Done(_)
    ));

    // Day 22: past the 21-day TTL counted from the reservation, inside the window's lifetime.
    clock.advance_ms(22 * DAY_MS);
    let report = g
        .handle_batch(
            sqs_event(&[("m-refired", &body)]),
            &Invocation {
                request_id: "inv-day-22".into(),
                deadline_ms: clock.now_ms() + 60_000,
            },
        )
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::PastKeyRetention)
    );
    assert!(report.records[0].took_over, "resumed, not started afresh");
    assert_eq!(core.slots_issued(), 1, "no second slot");
    let now = store.get(&record.pk).await.expect("get").expect("record");
    assert_eq!(now.created_at_ms, T0, "history kept");
    assert_eq!(now.status, RecordStatus::Manual);
    assert_eq!(
        store
            .business_row(&record.event_key)
            .await
            .expect("booking"),
        None
    );
    let items = queue.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::PastKeyRetention);
}
