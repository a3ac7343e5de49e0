//! The store conformance suite on `MemoryStore`: `cargo test -p gate --features testkit`.
#![cfg(feature = "testkit")]

use std::sync::Arc;

use gate::conformance;
use gate::store::memory::MemoryStore;
use gate::store::Store;

fn store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                conformance::$name(store(), "mem").await;
            }
        )*
    };
}

cases!(
    reserve_new_key_then_conflict,
    reserve_overwrites_expired,
    concurrent_reserve_one_winner,
    take_over_rules,
    commit_writes_record_and_booking,
    commit_not_in_flight,
    concurrent_commit_one_winner,
    release_lease_then_take_over,
    finish_rules,
    record_slot_id_accumulates,
    stale_in_flight_paginates,
    finished_records_hold_no_request,
    reserve_retry_meets_own_write,
    commit_over_another_recorded_slot_is_counted,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_on_one_store() {
    conformance::run_all(store(), "mem-all").await;
}
