//! Two executions of the reconciler with one Lambda request id. Lambda retries an asynchronous invocation (the scheduled reconciler) with the same request id, and its event
//! queue may deliver one event twice. Each execution draws its own nonce
//! ([`Invocation::new`]), so their lease tokens differ: neither takes the other's lease for its
//! own, one effect per operation key, one commit. Written once over any store, run on the memory
//! store and on DynamoDB (moto) by `tests/tests/same_request_id.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::Clock;
use gate::consumer::{Gate, Invocation};
use gate::record::RecordStatus;
use gate::store::{InFlightPage, StoreError};
use gate_testkit::{AfterRead, DelayedStore, Pause, RacedIndex};
use tokio::sync::{Barrier, Notify};

use crate::reconciler_cases::World;

/// The request id both executions carry.
const REQUEST_ID: &str = "5f0d3a52-request-id";

/// On the store's read side ([`RacedIndex`]), each run waits for the other once it has read a
/// page with entries: both runs then hold the same stale entry (the same old lease owner) before
/// either takes the record over, the race a twice-delivered event makes.
struct BothReadFirst(Barrier);

#[async_trait]
impl AfterRead for BothReadFirst {
    async fn after_read(&self, _page: &InFlightPage) -> Result<(), StoreError> {
        self.0.wait().await;
        Ok(())
    }
}

/// A run's store until its `n`-th write-path request, which never returns (the execution is
/// killed there): the request is not sent, and `reached` is notified.
struct KilledAt {
    n: usize,
    seen: AtomicUsize,
    reached: Arc<Notify>,
}

#[async_trait]
impl Pause for KilledAt {
    async fn pause(&self) {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.n {
            self.reached.notify_one();
            std::future::pending::<()>().await;
        }
    }
}

/// One after the other: the first execution takes the stranded record over, calls the terminal
/// (a slot is made) and is killed before its commit. The second execution with the same request
/// id finds the first one's lease live and leaves it alone; once it has expired, a third
/// execution (the same request id again) takes the record over under its own token and commits
/// the terminal's replay of the first slot. One slot, one booking, nothing for a person.
pub async fn killed_after_its_call_then_run_again(w: &World) {
    let body = World::body("R-SAME-1", "CSQU3054383");
    let record = w.strand(&body, "inv-dead", w.clock.now_ms() + 30_000).await;
    w.clock.advance_ms(180_000);
    let config = World::reconciler_config();

    // The first execution: its third write-path request (take-over, the natural key's guard,
    // then commit) never returns.
    let reached = Arc::new(Notify::new());
    let killed = Gate {
        store: Arc::new(DelayedStore {
            inner: w.store.clone(),
            pause: KilledAt {
                n: 3,
                seen: AtomicUsize::new(0),
                reached: reached.clone(),
            },
        }),
        ..w.gate.clone()
    };
    let first = Invocation::new(REQUEST_ID, w.clock.now_ms() + 60_000);
    tokio::select! {
        report = killed.reconcile(w.store.as_ref(), &config, &first) => {
            panic!("the first execution was to be killed at its commit: {report:?}")
        }
        () = reached.notified() => {}
    }
    assert_eq!(
        w.core.slots_issued(),
        1,
        "the first execution's call made the slot"
    );
    let held = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(held.status, RecordStatus::InFlight);
    let first_token = held.lease_owner.clone().expect("a lease");
    assert_eq!(first_token, first.for_record(0).request_id);

    // The same request id at once (its lease is live): left alone, nothing written.
    let second = Invocation::new(REQUEST_ID, w.clock.now_ms() + 60_000);
    let report = w.gate.reconcile(w.store.as_ref(), &config, &second).await;
    assert_eq!(report.live_lease, 1, "{report:?}");
    assert_eq!(report.reconciled, 0, "{report:?}");
    let after = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(after.status, RecordStatus::InFlight);
    assert_eq!(after.lease_owner.as_deref(), Some(first_token.as_str()));
    assert_eq!(w.core.slots_issued(), 1);

    // The same request id once the first lease has expired: taken over under its own token.
    w.clock.advance_ms(61_000);
    let third = Invocation::new(REQUEST_ID, w.clock.now_ms() + 60_000);
    let report = w.gate.reconcile(w.store.as_ref(), &config, &third).await;
    assert_eq!(report.reconciled, 1, "{report:?}");
    assert_eq!(report.live_lease + report.manual + report.transient, 0);
    let done = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(done.status, RecordStatus::Committed);
    let third_token = third.for_record(0).request_id;
    assert_eq!(done.lease_owner.as_deref(), Some(third_token.as_str()));
    assert_ne!(third_token, first_token);
    assert_eq!(
        w.core.slots_issued(),
        1,
        "the re-send was answered by the replay"
    );
    assert_eq!(done.effect_ids.len(), 1);
    let booking = w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(booking.effect_id), done.effect_id);
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
}

/// At once: two executions with one request id and one deadline read the same stale entry, then
/// both try to take the record over. One takes it; the other's take-over meets a lease that is
/// not its own and is refused (counted as a live lease), so it neither calls nor commits. One
/// slot, one commit, one booking.
pub async fn at_once_neither_takes_the_others_lease(w: &World) {
    let body = World::body("R-SAME-2", "MWCU6059784");
    let record = w.strand(&body, "inv-dead", w.clock.now_ms() + 30_000).await;
    w.clock.advance_ms(180_000);
    let config = World::reconciler_config();
    let deadline = w.clock.now_ms() + 60_000;
    let a = Invocation::new(REQUEST_ID, deadline);
    let b = Invocation::new(REQUEST_ID, deadline);
    let index = RacedIndex {
        inner: w.store.clone(),
        after: BothReadFirst(Barrier::new(2)),
    };
    let (ra, rb) = tokio::join!(
        w.gate.reconcile(&index, &config, &a),
        w.gate.reconcile(&index, &config, &b)
    );
    assert_eq!((ra.examined, rb.examined), (1, 1), "{ra:?} / {rb:?}");
    assert_eq!(
        ra.reconciled + rb.reconciled,
        1,
        "one commit: {ra:?} / {rb:?}"
    );
    assert_eq!(
        ra.live_lease + rb.live_lease,
        1,
        "one refused: {ra:?} / {rb:?}"
    );
    assert_eq!(ra.already_committed + rb.already_committed, 0);
    assert_eq!(ra.transient + rb.transient + ra.manual + rb.manual, 0);
    assert_eq!(w.core.slots_issued(), 1);
    let done = w.store.get(&record.pk).await.unwrap().unwrap();
    assert_eq!(done.status, RecordStatus::Committed);
    assert_eq!(done.effect_ids.len(), 1);
    let winner = if ra.reconciled == 1 { &a } else { &b };
    assert_eq!(
        done.lease_owner.as_deref(),
        Some(winner.for_record(0).request_id.as_str()),
        "committed under the winner's own token"
    );
    let booking = w
        .store
        .business_row(&record.event_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(booking.effect_id), done.effect_id);
    assert!(w.manual.items().is_empty(), "{:?}", w.manual.items());
}
