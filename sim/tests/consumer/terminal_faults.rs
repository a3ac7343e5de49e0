//! The terminal failing the gate: a `503`, a lost response, and a slot that arrives after
//! another holder finished the record.

use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::{Clock, ManualClock};
use gate::consumer::RecordOutcome;
use gate::manual::ManualReason;
use gate::record::RecordStatus;
use gate::store::memory::MemoryStore;
use gate::store::{BusinessRows, IdempotencyStore};
use truck_slot::terminal::{CallOutcome, LookupOutcome, SlotTerminal};

use super::world::{body, event, failures, invocation, pk, world};

#[tokio::test]
async fn a_503_is_a_batch_item_failure_and_the_redelivery_sends_the_same_key_and_bytes() {
    let w = world().await;
    w.core.fail_next_posts(1);
    let b = body("N-1", "CSQU3054383");
    let first = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(failures(&first), vec!["m1".to_string()]);
    assert!(matches!(first.records[0].outcome, RecordOutcome::Retry(_)));
    let record = w
        .store
        .get(&pk("N-1", "CSQU3054383"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RecordStatus::InFlight);
    assert!(!record.lease_is_live(w.clock.now_ms()), "lease released");
    assert_eq!(w.core.slots_issued(), 0);
    // SQS redelivers after the visibility timeout.
    w.clock.advance_ms(180_000);
    let second = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert!(failures(&second).is_empty());
    assert!(matches!(
        second.records[0].outcome,
        RecordOutcome::Committed { .. }
    ));
    let claims = w.recording.claims.lock().unwrap().clone();
    assert_eq!(claims.len(), 2);
    assert_eq!(claims[0].0, claims[1].0, "same Idempotency-Key");
    assert_eq!(claims[0].1, claims[1].1, "byte-identical body");
    assert_eq!(w.core.slots_issued(), 1);
    assert_eq!(w.store.business_rows().len(), 1);
}

#[tokio::test]
async fn a_lost_response_is_retried_and_commits_the_slot_made_the_first_time() {
    let w = world().await;
    w.core.lose_next_responses(1);
    let b = body("N-1", "CSQU3054383");
    let first = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(failures(&first), vec!["m1".to_string()]);
    assert_eq!(w.core.slots_issued(), 1, "the slot was made");
    w.clock.advance_ms(180_000);
    let second = w
        .gate
        .handle_batch(event(&[("m1", &b)]), &invocation(&w, "inv-2"))
        .await;
    let slot = w.core.slots()[0].effect_id.clone();
    assert_eq!(
        second.records[0].outcome,
        RecordOutcome::Committed { effect_id: slot }
    );
    assert_eq!(w.core.slots_issued(), 1);
}

/// A terminal whose claim takes so long that the lease expires, another holder takes the record
/// over and finishes it as `manual` (as the reconciler does past the key's retention), and then
/// answers with a slot.
struct FinishedMeanwhile {
    store: Arc<MemoryStore>,
    clock: Arc<ManualClock>,
    pk: String,
    owner: String,
}

#[async_trait]
impl SlotTerminal for FinishedMeanwhile {
    async fn claim(&self, _op_key: &str, _request: &[u8]) -> CallOutcome {
        self.clock.advance_ms(10 * 60_000);
        let now = self.clock.now_ms();
        let taken = self
            .store
            .take_over(&self.pk, &self.owner, "rec-1", now + 60_000, now)
            .await
            .unwrap();
        assert!(matches!(taken, gate::store::TakeOver::Taken(_)));
        let finished = self
            .store
            .finish(
                &self.pk,
                "rec-1",
                RecordStatus::Manual,
                "past the terminal's key retention",
                b"{}",
                gate::store::FinishGuard::LeaseAndNoEffect,
                now,
            )
            .await
            .unwrap();
        assert_eq!(finished, gate::store::FinishOutcome::Finished);
        assert!(self.store.routed(&self.pk, "rec-1", now).await.unwrap());
        CallOutcome::Done(truck_slot::terminal::Effect {
            effect_id: "ECT-LATE-0001".into(),
            subject: Some("CSQU3054383".into()),
        })
    }
    async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
        LookupOutcome::NotFound
    }
}

/// A slot that arrives for a record another holder already finished as `manual` is not
/// acknowledged silently: nothing would book it. Its id is kept in `effect_ids`, no TMS booking is
/// written, and a person gets it once (reason `unbooked_slot`), also when the message comes back.
#[tokio::test]
async fn a_slot_for_a_record_finished_meanwhile_goes_to_a_person_once() {
    let mut w = world().await;
    let pk = pk("PCS-LATE", "CSQU3054383");
    w.gate.integration = Arc::new(truck_slot::TruckSlot::new(
        Arc::new(FinishedMeanwhile {
            store: w.store.clone(),
            clock: w.clock.clone(),
            pk: pk.clone(),
            // The lease token of the batch's first record.
            owner: "inv-1#0".into(),
        }),
        vec!["ECT-DELTA".to_string()],
    ));
    let b = body("PCS-LATE", "CSQU3054383");
    let report = w
        .gate
        .handle_batch(event(&[("m-1", &b)]), &invocation(&w, "inv-1"))
        .await;
    assert_eq!(
        report.records[0].outcome,
        RecordOutcome::Manual(ManualReason::UnrecordedEffect)
    );
    assert!(failures(&report).is_empty());
    let record = w.store.get(&pk).await.unwrap().unwrap();
    assert_eq!(record.status, RecordStatus::Manual);
    assert!(record.effect_ids.contains("ECT-LATE-0001"));
    assert_eq!(w.store.business_row(&record.event_key).await.unwrap(), None);
    let items = w.manual.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].reason, ManualReason::UnrecordedEffect);
    assert!(
        items[0].detail.contains("ECT-LATE-0001"),
        "{}",
        items[0].detail
    );
    assert_eq!(
        items[0].event_key.as_deref(),
        Some(record.event_key.as_str())
    );

    // The message comes back: a duplicate of the finished record, no second item.
    let again = w
        .gate
        .handle_batch(event(&[("m-1", &b)]), &invocation(&w, "inv-2"))
        .await;
    assert_eq!(
        again.records[0].outcome,
        RecordOutcome::Duplicate(RecordStatus::Manual)
    );
    assert_eq!(w.manual.items().len(), 1);
}
