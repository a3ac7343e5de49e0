//! `gatectl` on a natural-key collision record (a second event key for one container and window
//! goes to a person, uncalled): `show` tells a person what happened and
//! names both event keys; `finish` and `cancel` refuse, saying why, and write nothing. On
//! DynamoDB and SQS (moto): `scripts/with-moto.sh cargo test -p gatectl --test collision`.
//!
//! Time is a `ManualClock` at 2026-06-01T06:00Z.

use std::sync::Arc;

use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, Invocation, RecordOutcome};
use gate::manual::ManualReason;
use gate::record::{record_pk, RecordStatus};
use gate::store::IdempotencyStore;
use gate_dynamo::sqs::SqsManualQueue;
use gate_testkit::sqs_event;
use gatectl::ctl::{Action, Ctl, Yes};
use gatectl::error::exit;
use gatectl::targets::Targets;
use gatectl::truck::TruckSlotStack;
use gatectl::Stack;
use integration_tests::{fresh_queue, fresh_store, sqs_client, unique};
use serde_json::json;
use sim::terminal::{self, TerminalConfig, TerminalCore};
use truck_slot::terminal::{HttpTerminal, HttpTerminalConfig};

/// 2026-06-01T06:00:00Z.
const T0: i64 = 1_780_293_600_000;

fn body(id: &str) -> String {
    json!({
        "notificationId": id,
        "equipment_number": "CSQU3054383",
        "preferred_window": {"start": "2026-06-01T08:00:00Z", "end": "2026-06-01T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "RLS-104233"
    })
    .to_string()
}

fn event_key(id: &str) -> String {
    truck_slot::keys::event_key_of(id, "CSQU3054383")
}

#[tokio::test]
async fn a_collision_record_is_shown_and_finish_and_cancel_refuse_it() {
    let name = "gc-collision";
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
        ("KEY_TTL_SECONDS", "3600".to_string()),
        ("NOTIFICATION_QUEUE_URL", String::new()),
        ("DEAD_LETTER_QUEUE_URL", String::new()),
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

    // The event, then a copy of it under a new notificationId: the copy collides.
    let inv = Invocation {
        request_id: "inv-1".into(),
        deadline_ms: T0 + 60_000,
    };
    let (a, b) = (body("N-COLL-1"), body("N-COLL-2"));
    let report = ctl.gate.handle_batch(sqs_event(&[("m1", &a)]), &inv).await;
    assert!(matches!(
        report.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    let report = ctl.gate.handle_batch(sqs_event(&[("m2", &b)]), &inv).await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::NaturalKeyCollision)
    );
    clock.advance_ms(15 * 60_000);
    let (ka, kb) = (event_key("N-COLL-1"), event_key("N-COLL-2"));
    let pk = record_pk(&integration, &kb);
    let before = store.get(&pk).await.unwrap().expect("record");
    assert_eq!(before.status, RecordStatus::Manual);

    let shown = ctl
        .run(&Action::Show(kb.clone()), false, &mut Yes)
        .await
        .unwrap();
    assert!(shown.text.contains("manual"), "{}", shown.text);
    assert!(
        shown.text.contains(&ka) && shown.text.contains(&kb),
        "show names both event keys: {}",
        shown.text
    );
    assert!(
        shown.text.contains("nothing: routed to a person"),
        "{}",
        shown.text
    );
    assert!(!shown.text.contains("RLS-104233"));

    let finish = Action::Finish {
        key: kb.clone(),
        effect_id: Some("SLOT-BY-HAND".into()),
    };
    let cancel = Action::Cancel {
        key: kb.clone(),
        reason: "a copy".into(),
    };
    for action in [finish, cancel] {
        let refused = ctl.run(&action, false, &mut Yes).await.unwrap_err();
        assert_eq!(refused.exit_code(), exit::REFUSED, "{refused}");
        let text = refused.to_string();
        assert!(
            text.contains("the record is manual, not in_flight") && text.contains(&ka),
            "{text}"
        );
    }
    let after = store.get(&pk).await.unwrap().expect("record");
    assert_eq!(after, before, "a refused command wrote");
    assert_eq!(core.slots_issued(), 1);
}
