//! The store conformance suite: one set of cases that every [`IdempotencyStore`] implementation
//! must pass, so the memory, DynamoDB and PostgreSQL stores cannot drift.
//!
//! Each case is a `pub async fn(store, prefix)`: `prefix` makes every key unique to the run (it
//! becomes the integration part of `pk` and is hashed into the event keys), so cases can share
//! tables. [`stale_in_flight_paginates`] additionally expects its shard (`"07"`) of the `InFlight`
//! index to hold no other records created before [`NOW_MS`], i.e. fresh tables. Cases panic on
//! failure (they are test code). All times are simulated around [`NOW_MS`] (epoch ms);
//! `expires_at_s` is epoch seconds.
//!
//! The cases live by concern: `reserve`, `lease`, `guard` (the natural key, signal 4),
//! `reserve_guard`, `commit`, `commit_conditions`, `concurrency` (writes that race), `finish`
//! (routing to a person, data minimisation), `identity` (what the reserve fixed is kept),
//! `index` (the `InFlight` pages) and `limits`; every case is re-exported here, where the one
//! case list below names it. The operator's port ([`OperatorStore`]: the scans and the audit
//! history gatectl uses) has its own cases (`operator`) and list, run by
//! [`operator_store_conformance_tests!`](crate::operator_store_conformance_tests) on the
//! adapters that provide it.

use std::collections::BTreeSet;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use gate::clock::ms_to_s;
use gate::record::{
    natural_key_expires_at_s, BusinessRow, IdempotencyRecord, Labels, NaturalKey, RecordStatus,
};
use gate::store::{
    CommitOutcome, FinishGuard, FinishOutcome, IdempotencyStore, InFlightEntry, OperatorStore,
    Reservation, Store, StoreError, TakeOver,
};

/// The suite's "now": 2025-06-09T04:00:00Z in epoch **milliseconds**.
pub const NOW_MS: i64 = 1_749_441_600_000;

/// The lease length the cases use, **milliseconds**.
pub const LEASE_MS: i64 = 30_000;

/// The TTL the cases use, **seconds**: the gate's default key TTL, 21 days
/// ([`gate::record::DEFAULT_KEY_TTL_S`]).
pub const TTL_S: i64 = gate::record::DEFAULT_KEY_TTL_S;

/// The event key for case `name` in run `prefix`: lowercase hex SHA-256, like a real one.
pub fn event_key(prefix: &str, name: &str) -> String {
    hex::encode(Sha256::digest(format!("{prefix}/{name}").as_bytes()))
}

/// The labels of the sample records: the truck-slot integration's four (`truck_slot::LABELS`, the
/// window's two in RFC 3339), with the window given.
pub fn sample_labels(window_start: &str, window_end: &str) -> Labels {
    Labels::from([
        ("container".to_string(), "CSQU3054383".to_string()),
        ("terminal".to_string(), "ECT-DELTA".to_string()),
        ("window_start".to_string(), window_start.to_string()),
        ("window_end".to_string(), window_end.to_string()),
    ])
}

/// The natural key of a sample record at `now_ms` (epoch ms), as the truck-slot path builds it:
/// `"{subject}#{window start}"`, labelled with both, expiring [`natural_key_expires_at_s`]
/// after the window's end.
pub fn sample_natural_key(record: &IdempotencyRecord, now_ms: i64) -> NaturalKey {
    let end_ms = chrono::DateTime::parse_from_rfc3339(record.label("window_end"))
        .ok()
        .map(|t| t.timestamp_millis());
    NaturalKey {
        key: format!(
            "{}#{}",
            record.label("container"),
            record.label("window_start")
        ),
        labels: Labels::from([
            (
                "container".to_string(),
                record.label("container").to_string(),
            ),
            (
                "window_start".to_string(),
                record.label("window_start").to_string(),
            ),
        ]),
        expires_at_s: natural_key_expires_at_s(end_ms, now_ms),
    }
}

/// A fresh `in_flight` record for case `name`: `pk = "{prefix}#{event_key}"`, leased by `owner`
/// until `now_ms + LEASE_MS`, created at `now_ms`, expiring `TTL_S` seconds later.
pub fn sample_record(prefix: &str, name: &str, owner: &str, now_ms: i64) -> IdempotencyRecord {
    let event_key = event_key(prefix, name);
    IdempotencyRecord {
        pk: format!("{prefix}#{event_key}"),
        op_key: format!("{event_key}:slot-claim"),
        inflight_shard: Some(gate::record::inflight_shard(&event_key)),
        event_key,
        status: RecordStatus::InFlight,
        fingerprint: hex::encode(Sha256::digest(name.as_bytes())),
        request: format!("{{\"equipment_number\":\"CSQU3054383\",\"pin\":\"4711-{name}\"}}")
            .into_bytes(),
        lease_owner: Some(owner.to_string()),
        lease_until_ms: Some(now_ms + LEASE_MS),
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        expires_at_s: ms_to_s(now_ms) + TTL_S,
        effect_id: None,
        effect_ids: BTreeSet::new(),
        error: None,
        route_pending: false,
        labels: sample_labels("2025-06-09T08:00:00Z", "2025-06-09T10:00:00Z"),
    }
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

async fn must_reserve(store: &dyn IdempotencyStore, record: &IdempotencyRecord, now_ms: i64) {
    assert_eq!(
        store.reserve(record, now_ms).await.expect("reserve"),
        Reservation::Reserved,
        "reserve of a new key {}",
        record.pk
    );
}

async fn must_get(store: &dyn IdempotencyStore, pk: &str) -> IdempotencyRecord {
    store
        .get(pk)
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("record {pk} missing"))
}

mod commit;
mod commit_conditions;
mod concurrency;
mod finish;
mod guard;
mod identity;
mod index;
mod lease;
mod limits;
mod operator;
mod reserve;
mod reserve_guard;

pub use commit::*;
pub use commit_conditions::commit_conditions_alone_and_together;
pub use concurrency::{
    concurrent_guard_one_holder, concurrent_record_effect_id_loses_none,
    concurrent_reserve_over_expired_one_winner, concurrent_take_over_and_commit_one_wins,
};
pub use finish::*;
pub use guard::*;
pub use identity::the_reserved_identity_survives_every_write;
pub use index::*;
pub use lease::*;
pub use limits::*;
pub use operator::*;
pub use reserve::*;
pub use reserve_guard::*;

/// Calls `$crate::$callback!(ARGS; case, case, ...)` with every case of the suite: the one list
/// that [`run_all`] and [`store_conformance_tests!`](crate::store_conformance_tests) expand, so a
/// new case cannot be left out of one of them.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conformance_cases {
    ($callback:ident!($($args:tt)*)) => {
        $crate::$callback! {
            $($args)*;
            reserve_new_key_then_conflict,
            reserve_retry_meets_own_write,
            reserve_overwrites_expired,
            concurrent_reserve_one_winner,
            take_over_rules,
            commit_writes_record_and_booking,
            commit_not_in_flight,
            concurrent_commit_one_winner,
            release_lease_then_take_over,
            extend_lease_is_fenced_by_the_owner,
            finish_rules,
            record_effect_id_accumulates,
            finished_records_hold_no_request,
            the_reserved_identity_survives_every_write,
            commit_over_another_recorded_effect_is_counted,
            guard_holds_the_natural_key_for_its_event_key,
            guard_outlives_a_failed_or_manual_holder,
            finish_without_effect_releases_the_natural_key,
            commit_conditions_alone_and_together,
            concurrent_take_over_and_commit_one_wins,
            concurrent_record_effect_id_loses_none,
            concurrent_reserve_over_expired_one_winner,
            concurrent_guard_one_holder,
            reserved_label_names_are_refused,
            items_over_the_size_limit_are_refused,
            record_effect_id_keeps_at_most_max_effect_ids,
            commit_and_guard_refuse_reserved_labels,
            commit_refuses_a_label_named_like_a_row_column,
            stale_in_flight_paginates,
            stale_in_flight_cursor_outlives_its_record,
            reserve_with_guard_reserves_and_guards,
            reserve_with_guard_writes_no_guard_on_a_conflict,
            reserve_with_guard_replaces_expired_and_fences_its_lease,
            concurrent_reserve_with_guard_one_holder
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __run_conformance_cases {
    ($store:ident, $prefix:ident; $($name:ident),*) => {
        $(
            $crate::conformance::$name(
                ::std::sync::Arc::clone(&$store),
                &format!("{}-{}", $prefix, stringify!($name)),
            )
            .await;
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test_fns {
    ($case:ident => $store:expr; $($name:ident),*) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let $case: &str = stringify!($name);
                let store: ::std::sync::Arc<dyn $crate::__gate::store::Store> = $store;
                $crate::conformance::$name(store, $case).await;
            }
        )*
    };
}

/// Runs every case in turn on one store (one table pair), each under its own prefix
/// (`"{prefix}-{case}"`): the cases must not disturb each other's keys.
pub async fn run_all(store: Arc<dyn Store>, prefix: &str) {
    crate::__with_conformance_cases!(__run_conformance_cases!(store, prefix));
}

/// One `#[tokio::test]` per conformance case, plus `run_all_on_one_store`: the whole suite for a
/// store implementation in one line. `$case` names a `&str` (the case's name) the store expression
/// may use, e.g. for a fresh table per case:
///
/// ```ignore
/// gate_testkit::store_conformance_tests!(case => Arc::new(fresh_store(case).await));
/// ```
///
/// The expression is evaluated once per test (inside an async test function) and must give an
/// `Arc<dyn Store>` (the write path and the index of one store).
#[macro_export]
macro_rules! store_conformance_tests {
    ($case:ident => $store:expr) => {
        $crate::__with_conformance_cases!(__conformance_test_fns!($case => $store));

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn run_all_on_one_store() {
            let $case: &str = "run_all";
            let store: ::std::sync::Arc<dyn $crate::__gate::store::Store> = $store;
            $crate::conformance::run_all(store, "all").await;
        }
    };
}

/// Calls `$crate::$callback!(ARGS; case, ...)` with every case of the operator's port
/// ([`OperatorStore`]), as [`__with_conformance_cases!`](crate::__with_conformance_cases) does
/// for the store.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_operator_conformance_cases {
    ($callback:ident!($($args:tt)*)) => {
        $crate::$callback! {
            $($args)*;
            scan_records_finds_every_record_and_filters_on_a_label,
            multi_effect_pks_lists_the_records_with_two_effect_ids,
            audit_history_appends_in_order_within_its_bounds,
            a_new_reservation_starts_an_empty_history
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __operator_conformance_test_fns {
    ($case:ident => $store:expr; $($name:ident),*) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let $case: &str = stringify!($name);
                let store: ::std::sync::Arc<dyn $crate::__gate::store::OperatorStore> = $store;
                $crate::conformance::$name(store, $case).await;
            }
        )*
    };
}

/// Runs every case of the operator's port in turn on one store, each under its own prefix.
pub async fn run_all_operator(store: Arc<dyn OperatorStore>, prefix: &str) {
    crate::__with_operator_conformance_cases!(__run_conformance_cases!(store, prefix));
}

/// One `#[tokio::test]` per case of the operator's port ([`OperatorStore`]: the scans and the
/// audit history), plus `run_all_operator_cases_on_one_store`; used beside
/// [`store_conformance_tests!`](crate::store_conformance_tests) by every adapter that gatectl
/// operates:
///
/// ```ignore
/// gate_testkit::operator_store_conformance_tests!(case => Arc::new(fresh_store(case).await));
/// ```
#[macro_export]
macro_rules! operator_store_conformance_tests {
    ($case:ident => $store:expr) => {
        $crate::__with_operator_conformance_cases!(__operator_conformance_test_fns!($case => $store));

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn run_all_operator_cases_on_one_store() {
            let $case: &str = "run_all_operator";
            let store: ::std::sync::Arc<dyn $crate::__gate::store::OperatorStore> = $store;
            $crate::conformance::run_all_operator(store, "all-operator").await;
        }
    };
}
