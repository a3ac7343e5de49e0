//! A server's `Retry-After` honoured by the consumer, on the memory adapters: a transient answer
//! with a delay is never sent again sooner, by a redelivery or by the reconciler. Up to 12 hours
//! the message is hidden for the delay (the visibility port) and retried; past that, or without
//! the port, or when it fails, the message is acknowledged and the record left to the
//! reconciler, its lease held to the delay's end (docs/OPERATING.md, "Retry-After").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsMessage;
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation, RecordOutcome};
use gate::effect::{AnswerDetail, CallOutcome, Effect, LookupOutcome, RetryAfter};
use gate::integration::{Event, Held, Integration, Lookup, Parsed};
use gate::keys;
use gate::manual::MemoryManualQueue;
use gate::reconciler::ReconcilerConfig;
use gate::record::{record_pk, IdempotencyRecord, Labels, RecordStatus};
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use gate::visibility::{MemoryVisibility, MessageVisibility};

/// 2026-06-01T06:00:00Z, epoch ms.
const T0: i64 = 1_780_293_600_000;
const QUEUE_ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:events";
const BODY: &str = "order-1";

/// A server that answers each call with the next scripted outcome (then effects), counting calls.
struct Scripted {
    answers: Mutex<VecDeque<CallOutcome>>,
    calls: Mutex<usize>,
}

#[async_trait]
impl Integration for Scripted {
    fn operation(&self) -> &str {
        "charge"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        Parsed::Event(Event {
            key_material: body.to_string(),
            business_fields: serde_json::json!({ "order": body }),
            request: body.as_bytes().to_vec(),
            labels: Labels::new(),
            ends_at_ms: None,
            subject: String::new(),
        })
    }

    async fn call(&self, _held: &Held<'_>) -> CallOutcome {
        *self.calls.lock().unwrap() += 1;
        self.answers.lock().unwrap().pop_front().unwrap_or_else(|| {
            CallOutcome::Done(Effect {
                effect_id: "E-1".into(),
                subject: None,
            })
        })
    }

    fn lookup_by_key(&self) -> Option<&dyn Lookup> {
        Some(self)
    }
}

#[async_trait]
impl Lookup for Scripted {
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

fn throttled(retry_after: RetryAfter) -> CallOutcome {
    let why = AnswerDetail::new("server answered 429: too many requests");
    CallOutcome::Transient(why.with_retry_after(Some(retry_after)))
}

struct World {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    server: Arc<Scripted>,
    gate: Gate,
}

impl World {
    /// A gate whose server answers `first`, then an effect; `visibility` the port, if any.
    fn new(first: CallOutcome, visibility: Option<Arc<dyn MessageVisibility>>) -> Self {
        let store = Arc::new(MemoryStore::new());
        let clock = Arc::new(ManualClock::new(T0));
        let server = Arc::new(Scripted {
            answers: Mutex::new(VecDeque::from([first])),
            calls: Mutex::new(0),
        });
        let mut config = GateConfig::new("orders");
        config.visibility = visibility;
        let gate = Gate {
            config,
            store: store.clone(),
            integration: server.clone(),
            manual: Arc::new(MemoryManualQueue::new()),
            clock: clock.clone(),
        };
        Self {
            store,
            clock,
            server,
            gate,
        }
    }

    async fn deliver(&self, receive: usize) -> RecordOutcome {
        let mut message = SqsMessage::default();
        message.message_id = Some("m-1".into());
        message.receipt_handle = Some(format!("rh-{receive}"));
        message.event_source_arn = Some(QUEUE_ARN.into());
        message.body = Some(BODY.into());
        let invocation = Invocation::new(&format!("req-{receive}"), self.clock.now_ms() + 60_000);
        self.gate
            .handle_record(message, &invocation.for_record(0))
            .await
            .outcome
    }

    async fn record(&self) -> IdempotencyRecord {
        let pk = record_pk("orders", &keys::event_key_of_material(BODY));
        self.store.get(&pk).await.unwrap().unwrap()
    }

    fn calls(&self) -> usize {
        *self.server.calls.lock().unwrap()
    }

    async fn reconcile(&self) -> gate::reconciler::ReconcileReport {
        let invocation = Invocation::new("reconciler", self.clock.now_ms() + 60_000);
        let config = ReconcilerConfig::default();
        self.gate
            .reconcile(self.store.as_ref(), &config, &invocation)
            .await
    }
}

/// Within SQS's 12 hours: the lease is held to the delay's end, the message hidden for the delay
/// (in whole seconds, rounded up) and retried; until the delay has passed neither a redelivery
/// nor the reconciler calls again; then the redelivery commits.
#[tokio::test]
async fn a_delay_hides_the_message_and_holds_the_lease_to_its_end() {
    let visibility = MemoryVisibility::default();
    let w = World::new(
        throttled(RetryAfter::At(T0 + 5_500)),
        Some(Arc::new(visibility.clone())),
    );
    let outcome = w.deliver(1).await;
    assert!(matches!(outcome, RecordOutcome::Retry(_)), "{outcome:?}");
    assert!(!outcome.acknowledged());
    assert_eq!(
        visibility.changes(),
        vec![(QUEUE_ARN.to_string(), "rh-1".to_string(), 6)]
    );
    let record = w.record().await;
    assert_eq!(record.status, RecordStatus::InFlight);
    assert_eq!(record.lease_until_ms, Some(T0 + 5_499));

    w.clock.set_ms(T0 + 5_499);
    assert_eq!(w.deliver(2).await, RecordOutcome::DuplicateInFlight);
    let report = w.reconcile().await;
    assert_eq!((report.live_lease, report.reconciled), (1, 0));
    assert_eq!(w.calls(), 1, "nothing sent before the delay's end");

    w.clock.set_ms(T0 + 5_500);
    let outcome = w.deliver(3).await;
    assert_eq!(
        outcome,
        RecordOutcome::Committed {
            effect_id: "E-1".into()
        }
    );
    assert_eq!(w.calls(), 2);
}

/// Past SQS's 12 hours the message is acknowledged (`Deferred`) and never hidden; the reconciler
/// leaves the record until the delay has passed, then commits it.
#[tokio::test]
async fn a_delay_past_twelve_hours_is_left_to_the_reconciler() {
    let visibility = MemoryVisibility::default();
    let delay_s = 43_201;
    let w = World::new(
        throttled(RetryAfter::Seconds(delay_s)),
        Some(Arc::new(visibility.clone())),
    );
    let until = T0 + 43_201_000 - 1;
    assert_eq!(
        w.deliver(1).await,
        RecordOutcome::Deferred { until_ms: until }
    );
    assert!(visibility.changes().is_empty());
    assert_eq!(w.record().await.lease_until_ms, Some(until));

    w.clock.set_ms(until);
    assert_eq!(w.reconcile().await.live_lease, 1);
    assert_eq!(w.calls(), 1);
    w.clock.set_ms(until + 1);
    let report = w.reconcile().await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(w.calls(), 2);
    assert_eq!(w.record().await.status, RecordStatus::Committed);
}

/// Without the port, or with one that fails, the record is left to the reconciler the same way.
#[tokio::test]
async fn without_a_working_port_the_record_is_left_to_the_reconciler() {
    let failing: Arc<dyn MessageVisibility> = Arc::new(MemoryVisibility::failing());
    for port in [None, Some(failing)] {
        let w = World::new(throttled(RetryAfter::Seconds(30)), port);
        let until = T0 + 30_000 - 1;
        let outcome = w.deliver(1).await;
        assert_eq!(outcome, RecordOutcome::Deferred { until_ms: until });
        assert!(outcome.acknowledged());
        assert_eq!(w.record().await.lease_until_ms, Some(until));
        w.clock.set_ms(until);
        assert_eq!(w.reconcile().await.live_lease, 1);
        w.clock.set_ms(until + 1);
        assert_eq!(w.reconcile().await.reconciled, 1);
        assert_eq!(w.calls(), 2);
    }
}

/// A delay already past (a date before now) or zero is no delay: the lease is released and the
/// message retried at once, as any transient answer, and nothing is hidden.
#[tokio::test]
async fn a_delay_already_past_is_no_delay() {
    for retry_after in [RetryAfter::At(T0 - 1_000), RetryAfter::Seconds(0)] {
        let visibility = MemoryVisibility::default();
        let w = World::new(throttled(retry_after), Some(Arc::new(visibility.clone())));
        assert!(matches!(w.deliver(1).await, RecordOutcome::Retry(_)));
        assert!(visibility.changes().is_empty());
        let record = w.record().await;
        assert!(!record.lease_is_live(T0), "{:?}", record.lease_until_ms);
        assert_eq!(
            w.deliver(2).await,
            RecordOutcome::Committed {
                effect_id: "E-1".into()
            }
        );
    }
}

/// A server's `Retry-After` past the record's last retry (the claim horizon, the event's end,
/// an hour before the record's expiry) holds the lease only to it: never past the record's TTL,
/// after which DynamoDB may delete the `in_flight` record whose message was acknowledged.
#[tokio::test]
async fn a_delay_never_holds_the_lease_past_the_records_ttl() {
    let thirty_days_s = 30 * 24 * 3_600;
    let w = World::new(
        throttled(RetryAfter::Seconds(thirty_days_s)),
        Some(Arc::new(MemoryVisibility::default())),
    );
    let outcome = w.deliver(1).await;
    assert!(outcome.acknowledged(), "{outcome:?}");
    let record = w.record().await;
    let lease = record.lease_until_ms.unwrap();
    // One second after the TTL: the reconciler still calls the lease live and skips the record.
    w.clock.set_ms((record.expires_at_s + 1) * 1_000);
    let report = w.reconcile().await;
    assert!(
        lease <= record.expires_at_s * 1_000,
        "lease until {lease} ms outlives the record's TTL ({} s): at the TTL the reconciler \
         reports {report:?} (skipped as a live lease while expired), and DynamoDB's TTL deletes \
         the in_flight record whose message was acknowledged",
        record.expires_at_s
    );
}

/// A hostile `Retry-After: 18446744073709551615` (delta-seconds saturated to `u64::MAX`, a
/// delay of `i64::MAX` ms) neither overflows the arithmetic nor holds the lease forever.
#[tokio::test]
async fn a_huge_delta_seconds_neither_panics_nor_holds_the_lease_forever() {
    let w = World::new(
        throttled(RetryAfter::Seconds(u64::MAX)),
        Some(Arc::new(MemoryVisibility::default())),
    );
    let outcome = w.deliver(1).await;
    assert!(
        matches!(outcome, RecordOutcome::Deferred { .. }),
        "{outcome:?}"
    );
    let record = w.record().await;
    assert!(
        record.lease_until_ms.unwrap() <= record.expires_at_s * 1_000,
        "lease {:?}",
        record.lease_until_ms
    );
}

/// A lookup answered `429` or `503` with `Retry-After` keeps the delay, so the reconciler does
/// not ask a throttling server again sooner than it asked.
#[test]
fn a_throttled_lookup_keeps_its_retry_after() {
    use gate::effect::LookupOutcome;
    use gate::idempotency_key::{classify_lookup, Answer, JsonIdAt};
    const READER: JsonIdAt = JsonIdAt::new("server", "/id");
    for status in [429, 503] {
        let answer = Answer::new(status, b"").with_retry_after(Some("600"));
        match classify_lookup(&answer, &READER) {
            LookupOutcome::Transient(why) => assert_eq!(
                why.retry_after(),
                Some(RetryAfter::Seconds(600)),
                "{status}: the lookup's Retry-After is lost"
            ),
            other => panic!("{status}: {other:?}"),
        }
    }
}
