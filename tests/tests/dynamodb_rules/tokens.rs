//! Item 1: transaction tokens as DynamoDB applies them. The commit lands and its answer is lost;
//! the same holder commits again with the items built again: with the same timestamps but its
//! maps in another order, with a later `updated_at` within 10 minutes, and again after 11. Right:
//! committed every time, one slot, one business row (the first), the record committed by the
//! holder with its slot, no second effect id; and through the gate, no duplicate counted and no
//! manual item.

use std::sync::Arc;

use gate::record::{BusinessRow, RecordStatus};
use gate::signals::Counts;
use gate::store::BusinessRows;
use gate::store::{CommitOutcome, IdempotencyStore, Reservation};
use gate_testkit::conformance::{sample_record, NOW_MS};
use integration_tests::fault_proxy::{store_via_with, Fault, FaultProxy};
use integration_tests::token_double::TokenHash;
use integration_tests::{moto_endpoint, unique};

use crate::World;

const MINUTE_MS: i64 = 60_000;

const MISMATCH: &str = "IdempotentParameterMismatchException";

async fn rebuilt_commit_within_and_after_the_token_window(mode: TokenHash) {
    let (proxy, endpoint) = FaultProxy::with_tokens(&moto_endpoint(), mode).await;
    let tokens = proxy.tokens().expect("the token double");
    // One attempt per request: the lost answer reaches the store's own code.
    let store = store_via_with(&endpoint, "tokens", 1).await;
    let prefix = unique("tokens");
    let r = sample_record(&prefix, "rebuilt", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let first = BusinessRow::for_record(&r, "SLOT-1", NOW_MS + 10);
    let commit = |now_ms: i64| {
        let row = BusinessRow::for_record(&r, "SLOT-1", now_ms);
        let store = &store;
        let pk = r.pk.clone();
        async move {
            store
                .commit(&pk, "owner-a", "SLOT-1", &row, now_ms)
                .await
                .expect("commit")
        }
    };

    // The commit lands; its answer is lost (a 500 after the transaction ran).
    proxy.inject("TransactWriteItems", 1, Fault::LoseAnswer);
    assert_eq!(commit(NOW_MS + 10).await, CommitOutcome::Committed);
    // Built again with the same values, its maps in another order.
    proxy.inject("TransactWriteItems", 1, Fault::ReorderMaps);
    assert_eq!(commit(NOW_MS + 10).await, CommitOutcome::Committed);
    // Built again 5 minutes later (a later `updated_at` and `booked_at`).
    tokens.advance(5 * MINUTE_MS);
    assert_eq!(
        commit(NOW_MS + 5 * MINUTE_MS).await,
        CommitOutcome::Committed
    );
    // And 11 minutes after the first: the token is new, the transaction runs again.
    tokens.advance(6 * MINUTE_MS);
    assert_eq!(
        commit(NOW_MS + 11 * MINUTE_MS).await,
        CommitOutcome::Committed
    );

    let same_values = match mode {
        // The same parameters: answered as the first request was.
        TokenHash::Parameters => Ok(200),
        // Other bytes are other parameters to this double: settled by a read.
        TokenHash::Bytes => Err(MISMATCH.to_string()),
    };
    assert_eq!(
        proxy.answers("TransactWriteItems"),
        [
            Err("InternalServerError".to_string()),
            same_values,
            Err(MISMATCH.to_string()),
            Err("TransactionCanceledException".to_string()),
        ],
        "{mode:?}"
    );
    let record = store.get(&r.pk).await.expect("get").expect("record");
    assert_eq!(record.status, RecordStatus::Committed);
    assert!(record.is_committed_by("owner-a", "SLOT-1"));
    assert_eq!(record.effect_ids, ["SLOT-1".to_string()].into());
    assert_eq!(
        store.business_row(&r.event_key).await.expect("booking"),
        Some(first),
        "one business row, the first"
    );
}

#[tokio::test]
async fn rebuilt_commit_is_committed_when_the_token_compares_parameters() {
    rebuilt_commit_within_and_after_the_token_window(TokenHash::Parameters).await;
}

#[tokio::test]
async fn rebuilt_commit_is_committed_when_the_token_compares_bytes() {
    rebuilt_commit_within_and_after_the_token_window(TokenHash::Bytes).await;
}

/// Through the gate: the consumer's commit lands and its answer is lost. With one attempt per
/// request the store settles it by a consistent read; with the functions' four attempts the
/// SDK's retry (same bytes, same token) is answered by the token as the first request. Right
/// either way: committed in the same invocation, one slot, one booking, no manual item, no
/// duplicate counted, no batch item failure.
async fn lost_commit_answer_through_the_gate(attempts: u32) {
    let (proxy, endpoint) = FaultProxy::with_tokens(&moto_endpoint(), TokenHash::Parameters).await;
    let store = Arc::new(store_via_with(&endpoint, "tokens-gate", attempts).await);
    let world = World::new(store.clone(), &unique("tokens-gate"));
    proxy.inject("TransactWriteItems", 1, Fault::LoseAnswer);
    let report = world.deliver("m-lost-commit", "inv-lost-commit").await;
    let slot = world.core.slots().first().map(|s| s.effect_id.clone());
    assert_eq!(world.core.slots_issued(), 1);
    assert_eq!(
        report.records[0].outcome,
        gate::consumer::RecordOutcome::Committed {
            effect_id: slot.clone().expect("a slot"),
        }
    );
    assert!(report.response.batch_item_failures.is_empty());
    let counts = Counts::of_batch(&report);
    assert_eq!((counts.duplicates, counts.committed), (0, 1), "{counts:?}");
    assert!(world.manual.items().is_empty());
    let event_key = report.records[0].event_key.clone().expect("event key");
    assert_eq!(
        store
            .business_row(&event_key)
            .await
            .expect("booking")
            .map(|b| b.effect_id),
        slot
    );
    let expected = if attempts == 1 {
        vec![Err("InternalServerError".to_string())]
    } else {
        vec![Err("InternalServerError".to_string()), Ok(200)]
    };
    assert_eq!(proxy.answers("TransactWriteItems"), expected);
    let replays = proxy.tokens().map_or(0, |t| t.replays());
    assert_eq!(replays, usize::from(attempts > 1));
}

#[tokio::test]
async fn lost_commit_answer_settled_by_a_read_through_the_gate() {
    lost_commit_answer_through_the_gate(1).await;
}

#[tokio::test]
async fn lost_commit_answer_replayed_by_its_token_through_the_gate() {
    lost_commit_answer_through_the_gate(4).await;
}

/// The commit over another recorded slot id (a holder that lost its lease recorded one): its
/// second transaction lands and its answer is lost. Settled by the read as committed, and the key
/// is still marked for the distinct-slot signal.
#[tokio::test]
async fn a_lost_answer_of_the_commit_over_another_slot_still_marks_the_key() {
    use gate::store::InFlightIndex;
    let (proxy, endpoint) = FaultProxy::with_tokens(&moto_endpoint(), TokenHash::Parameters).await;
    let store = store_via_with(&endpoint, "tokens-two-slots", 1).await;
    let r = sample_record(&unique("tokens-two-slots"), "two", "owner-b", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    store
        .record_effect_id(&r.pk, "SLOT-LOST-LEASE", NOW_MS + 1)
        .await
        .expect("record_effect_id");
    let before = store.multi_effect_keys().await.expect("multi_effect_keys");
    // The first transaction is cancelled by the slot condition (the rule that reorders its maps
    // changes nothing but lets the next rule fall on the second); the second lands, its answer
    // lost.
    proxy.inject("TransactWriteItems", 1, Fault::ReorderMaps);
    proxy.inject("TransactWriteItems", 1, Fault::LoseAnswer);
    let row = BusinessRow::for_record(&r, "SLOT-NEW", NOW_MS + 2);
    let out = store
        .commit(&r.pk, "owner-b", "SLOT-NEW", &row, NOW_MS + 2)
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    assert_eq!(
        proxy.answers("TransactWriteItems"),
        [
            Err("TransactionCanceledException".to_string()),
            Err("InternalServerError".to_string())
        ]
    );
    let record = store.get(&r.pk).await.expect("get").expect("record");
    assert!(record.is_committed_by("owner-b", "SLOT-NEW"));
    assert_eq!(
        store.multi_effect_keys().await.expect("multi_effect_keys"),
        before + 1
    );
}
