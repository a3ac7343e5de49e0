//! `gatectl` through each runbook case, on DynamoDB and SQS (moto): the cases every
//! integration's gatectl passes (`kit`: a stranded record finished from the server, a cancel, a
//! multi-effect key shown with its ids, a write refused because the lease is live, `reconcile
//! KEY`), instantiated for truck-slot (with the terminal simulator over HTTP), job-client and
//! payments (with the test kit's Idempotency-Key server; payments' has no lookup by key) by
//! `runbooks!`; and truck-slot's own: a redrive that refuses an old message, the binary's exit
//! codes and the stack's outputs (module `binary`), `finish`'s slot-id checks (module
//! `finish_checks`). Run with `scripts/with-moto.sh cargo test -p gatectl --test runbooks` (the
//! same cases on PostgreSQL: `runbooks_postgres.rs`, under `scripts/with-postgres.sh` as well).
//!
//! Time is a `ManualClock` (2026-06-01T06:00Z), except where SQS's own `SentTimestamp` or the
//! binary's system clock is compared: there the test places the clock relative to the real send
//! times, never at a date.

use std::process::Command;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, Invocation};
use gate::operator::AuditLog;
use gate::record::{IdempotencyRecord, RecordStatus};
use gate::store::BusinessRows;
use gate::store::{IdempotencyStore, Reservation};
use gate_dynamo::sqs::SqsManualQueue;
use gate_dynamo::DynamoStore;
use gatectl::ctl::{Action, Confirm, Ctl, Yes};
use gatectl::error::{exit, CtlError};
use gatectl::targets::Targets;
use gatectl::truck::TruckSlotStack;
use gatectl::Stack;
use integration_tests::{fresh_queue, fresh_store, moto_endpoint, sqs_client, unique};
use serde_json::{json, Value};
use sim::terminal::{self, TerminalConfig, TerminalCore};
use truck_slot::derive_keys;
use truck_slot::notification::parse_notification;
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig};

#[path = "runbooks/job_client_kit.rs"]
mod job_client_kit;
#[path = "runbooks/kit.rs"]
mod kit;
#[path = "runbooks/payments_kit.rs"]
mod payments_kit;
#[path = "runbooks/truck_slot_kit.rs"]
mod truck_slot_kit;

// The runbook cases of `kit`, for each integration's gatectl (one line per integration).
crate::runbooks!(truck_slot_runbooks, crate::truck_slot_kit::TruckSlotFixture);
crate::runbooks!(job_client_runbooks, crate::job_client_kit::JobClientFixture);
crate::runbooks!(payments_runbooks, crate::payments_kit::PaymentsFixture);

/// 2026-06-01T06:00:00Z.
const T0: i64 = 1_780_293_600_000;
const PIN: &str = "RLS-104233";

/// The operator's answer "no".
struct No;

impl Confirm for No {
    fn confirm(&mut self, _plan: &str) -> bool {
        false
    }
}

struct World {
    ctl: Ctl,
    store: Arc<DynamoStore>,
    clock: Arc<ManualClock>,
}

impl World {
    async fn new(name: &str) -> Self {
        Self::with(name, None, None, 3_600).await
    }

    async fn with(
        name: &str,
        notification_url: Option<String>,
        dlq_url: Option<String>,
        key_ttl_s: i64,
    ) -> Self {
        let store = Arc::new(fresh_store(name).await);
        let sqs = sqs_client().await;
        let manual_url = fresh_queue(&sqs, &format!("{name}-manual")).await;
        let clock = Arc::new(ManualClock::new(T0));
        let core = TerminalCore::new(TerminalConfig::default(), clock.clone() as Arc<dyn Clock>);
        let (addr, _server) = terminal::spawn(core.clone()).await.expect("terminal");
        let integration = unique("gatectl");
        let vars = [
            ("IDEMPOTENCY_TABLE", store.idempotency_table().to_string()),
            ("BOOKINGS_TABLE", store.business_table().to_string()),
            ("MANUAL_QUEUE_URL", manual_url.clone()),
            ("TERMINAL_BASE_URL", format!("http://{addr}")),
            ("INTEGRATION_NAME", integration.clone()),
            ("KEY_TTL_SECONDS", key_ttl_s.to_string()),
            (
                "NOTIFICATION_QUEUE_URL",
                notification_url.unwrap_or_default(),
            ),
            ("DEAD_LETTER_QUEUE_URL", dlq_url.unwrap_or_default()),
        ];
        let (targets, _) = Targets::from_lookup(
            &TruckSlotStack,
            |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()),
            "test",
        )
        .expect("targets");
        let http = HttpTerminal::new(HttpTerminalConfig::new(format!("http://{addr}"))).unwrap();
        let gate = Gate {
            config: targets.gate.clone(),
            store: store.clone(),
            integration: Arc::new(truck_slot::TruckSlot::new(
                Arc::new(http),
                vec!["ECT-DELTA".to_string()],
            )),
            manual: Arc::new(SqsManualQueue::new(sqs.clone(), manual_url.clone())),
            clock: clock.clone(),
        };
        let ctl = Ctl {
            gate,
            store: store.clone(),
            sqs,
            targets,
            who: "gatectl:alice".into(),
            view: TruckSlotStack.view(),
            server_ready: true,
            progress: false,
        };
        Self { ctl, store, clock }
    }

    fn body(id: &str, container: &str) -> String {
        json!({
            "notificationId": id,
            "equipment_number": container,
            "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
            "terminal": "ECT-DELTA",
            "pin": PIN
        })
        .to_string()
    }

    /// A body whose two-hour window ends at `end_ms` (epoch ms), for tests on the real clock.
    fn body_ending(id: &str, container: &str, end_ms: i64) -> String {
        let at = gate::operator::rfc3339_ms;
        json!({
            "notificationId": id,
            "equipment_number": container,
            "preferred_window": {"start": at(end_ms - 7_200_000), "end": at(end_ms)},
            "terminal": "ECT-DELTA",
            "pin": PIN
        })
        .to_string()
    }

    /// Reserves `body` as the consumer invocation `owner` whose deadline is `deadline_ms`.
    async fn strand(&self, body: &str, owner: &str, deadline_ms: i64) -> IdempotencyRecord {
        let now = self.clock.now_ms();
        let n = parse_notification(body, now, &["ECT-DELTA".to_string()]).unwrap();
        let keys = derive_keys(&n).unwrap();
        let inv = Invocation {
            request_id: owner.into(),
            deadline_ms,
        };
        let record = self.ctl.gate.config.new_record(
            &truck_slot::event(&n).expect("event"),
            &keys,
            &inv,
            now,
        );
        assert_eq!(
            self.store.reserve(&record, now).await.unwrap(),
            Reservation::Reserved
        );
        record
    }

    async fn run(&self, action: Action) -> Result<gatectl::ctl::Output, CtlError> {
        self.ctl.run(&action, false, &mut Yes).await
    }

    async fn get(&self, pk: &str) -> IdempotencyRecord {
        self.store.get(pk).await.unwrap().expect("record")
    }
}

fn finish(key: &str, effect_id: Option<&str>) -> Action {
    Action::Finish {
        key: key.into(),
        effect_id: effect_id.map(str::to_string),
    }
}

/// `show` reads a person's text in truck-slot's words: an equipment number finds the
/// container's records (a scan filtered on the `container` label), in any case.
#[tokio::test]
async fn show_finds_a_containers_records() {
    let w = World::new("gc-container").await;
    let record = w
        .strand(&World::body("N-1", "CSQU3054383"), "inv-dead#0", T0 + 1_000)
        .await;
    w.clock.advance_ms(15 * 60_000);
    let shown = w.run(Action::Show("csqu 305438 3".into())).await.unwrap();
    assert_eq!(shown.json.as_array().unwrap().len(), 1, "{}", shown.json);
    assert_eq!(shown.json[0]["event_key"], record.event_key);
    assert_eq!(shown.json[0]["container"], "CSQU3054383");
    assert!(!shown.text.contains(PIN) && !shown.json.to_string().contains(PIN));
    assert!(
        shown
            .text
            .contains("container     CSQU3054383 at ECT-DELTA\n"),
        "{}",
        shown.text
    );
    assert!(
        shown.text.contains("claim request [redacted: "),
        "{}",
        shown.text
    );
    let none = w.run(Action::Show("MSKU1234565".into())).await.unwrap_err();
    assert_eq!(none.exit_code(), exit::NOT_FOUND);
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// DeadLetters: a message older than the records' lifetime minus the notification queue's
/// retention is refused and listed (it stays in the dead-letter queue); a younger one is sent
/// back to the notification queue and its record gets an audit line.
#[tokio::test]
async fn a_redrive_refuses_an_old_message() {
    let sqs = sqs_client().await;
    let name = unique("gc-notify");
    let notification_url = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod,
            "60",
        )
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    let dlq = fresh_queue(&sqs, "gc-dlq").await;
    // Records live 3600 s, the notification queue keeps messages 60 s: redrive up to 3540 s.
    let w = World::with(
        "gc-redrive",
        Some(notification_url.clone()),
        Some(dlq.clone()),
        3_600,
    )
    .await;
    let old_body = World::body("N-OLD", "CSQU3054383");
    // SentTimestamp is the real clock's: the young record is made on it too, and lives until its
    // window's end plus 3600 s, beyond a redriven copy's 60 s.
    w.clock.set_ms(now_ms());
    let young_body = World::body_ending("N-YOUNG", "MSKU1234565", now_ms() + 3_600_000);
    let young = w
        .strand(&young_body, "inv-dead#0", w.clock.now_ms() + 1_000)
        .await;
    let send = |body: String| {
        let sqs = sqs.clone();
        let dlq = dlq.clone();
        async move {
            sqs.send_message()
                .queue_url(&dlq)
                .message_body(body)
                .send()
                .await
                .unwrap()
                .message_id()
                .unwrap()
                .to_string()
        }
    };
    let old_id = send(old_body).await;
    let old_sent_by = now_ms();
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let young_id = send(young_body.clone()).await;
    // The old message is at least 3540 s old at this clock, the young one at most 3539 s.
    w.clock.set_ms(old_sent_by + 3_540_000);

    let dry = w.ctl.run(&Action::Redrive, true, &mut No).await.unwrap();
    assert_eq!(dry.code, exit::REFUSED);
    assert_eq!(dry.json["would_redrive"], json!([young_id]));
    assert_eq!(dry.json["refused"][0]["message_id"], old_id);
    let listed = w.run(Action::ListDeadLetters).await.unwrap();
    let mut redrivable: Vec<(String, bool)> = listed
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["message_id"].as_str().unwrap().to_string(),
                m["redrivable"].as_bool().unwrap(),
            )
        })
        .collect();
    redrivable.sort_by_key(|(_, r)| *r);
    assert_eq!(
        redrivable,
        vec![(old_id.clone(), false), (young_id.clone(), true)]
    );

    let out = w.run(Action::Redrive).await.unwrap();
    assert_eq!(out.code, exit::REFUSED, "old messages were refused");
    assert_eq!(out.json["redriven"], json!([young_id]));
    assert_eq!(out.json["refused"][0]["message_id"], old_id);
    assert_eq!(out.json["limit_s"], 3_540);
    assert!(
        out.text.contains("refused: 1 message(s) older than 59 min"),
        "{}",
        out.text
    );
    let moved = sqs
        .receive_message()
        .queue_url(&notification_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let bodies: Vec<&str> = moved.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, vec![young_body.as_str()]);
    let left = w.run(Action::ListDeadLetters).await.unwrap();
    assert_eq!(left.json.as_array().unwrap().len(), 1);
    assert_eq!(left.json[0]["message_id"], old_id);
    let history = w.store.history(&young.pk).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].action, "redrive");
    assert!(history[0].detail.contains(&young_id));
}

/// FINDING (break-16-17): the redrive judged a dead letter's age by its `SentTimestamp` only.
/// A message sent long after its record was made (a dead letter redriven once already, which
/// came back as a new message; a webhook the sender retried hours later) is young by that
/// measure while its record expires before the redriven copy's retention ends: after that the
/// copy finds no record and the event is reserved and claimed again. The record itself must
/// outlive a redriven copy (now plus the notification queue's retention).
#[tokio::test]
async fn a_redrive_refuses_a_young_message_whose_record_expires_first() {
    let sqs = sqs_client().await;
    let notification_url = sqs
        .create_queue()
        .queue_name(unique("gc-notify2"))
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod,
            "60",
        )
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    let dlq = fresh_queue(&sqs, "gc-dlq2").await;
    let w = World::with(
        "gc-redrive2",
        Some(notification_url.clone()),
        Some(dlq.clone()),
        3_600,
    )
    .await;
    // The record was made before its window, which ended 3570 s ago: it expires in 30 s (window
    // end plus 3600 s), but a redriven copy lives 60 s.
    let real_now = now_ms();
    let end_ms = real_now - 3_570_000;
    w.clock.set_ms(end_ms - 600_000);
    let body = World::body_ending("N-AGAIN", "CSQU3054383", end_ms);
    let record = w
        .strand(&body, "inv-dead#0", w.clock.now_ms() + 1_000)
        .await;
    let id = sqs
        .send_message()
        .queue_url(&dlq)
        .message_body(body)
        .send()
        .await
        .unwrap()
        .message_id()
        .unwrap()
        .to_string();
    w.clock.set_ms(real_now);
    assert_eq!(
        record.expires_at_s * 1000,
        real_now + 30_000 - real_now % 1000
    );

    let out = w.run(Action::Redrive).await.unwrap();
    assert_eq!(out.code, exit::REFUSED, "{}", out.text);
    assert_eq!(out.json["redriven"], json!([]));
    assert_eq!(out.json["refused"][0]["message_id"], id);
    let moved = sqs
        .receive_message()
        .queue_url(&notification_url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(moved.messages().is_empty(), "nothing sent back");
    let left = w.run(Action::ListDeadLetters).await.unwrap();
    assert_eq!(left.json[0]["message_id"], id);
    assert_eq!(left.json[0]["redrivable"], false);
}

#[path = "runbooks/finish_checks.rs"]
mod finish_checks;

#[path = "runbooks/binary.rs"]
mod binary;
