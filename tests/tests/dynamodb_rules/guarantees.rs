//! Item 2: what the test backend proves. The probe (`integration_tests::probe`) records which of
//! DynamoDB's guarantees the backend shows; a test that leans on one the backend lacks prints
//! "not proven on this backend" with where the guarantee is covered instead, and returns without
//! claiming it.

use gate::record::BusinessRow;
use gate::store::{CommitOutcome, IdempotencyStore, InFlightIndex, Reservation};
use gate_testkit::conformance::{sample_record, NOW_MS};
use integration_tests::fault_proxy::{client_via, store_via_with, Fault, FaultProxy};
use integration_tests::probe::{self, Guarantee};
use integration_tests::token_double::TokenHash;
use integration_tests::{moto_endpoint, unique};

/// Where the token guarantees are covered when the backend lacks them.
const TOKENS_COVERED_BY: &str = "the token double (dynamodb_rules: tokens::*, \
     guarantees::*_on_the_token_double) and the simulation (sim check: \
     commit_answer_lost_retried, commit_answer_lost_rebuilt_retry_within_10_min, \
     commit_answer_lost_rebuilt_retry_after_10_min)";

/// moto as the tests run it: its findings printed; the one guarantee `scripts/with-moto.sh`
/// arranges (DynamoDB requests served one at a time, `scripts/moto-serial.py`) is honoured.
#[tokio::test]
async fn moto_is_probed_before_the_tests_that_lean_on_it() {
    let moto = probe::moto().await;
    println!("{}", moto.report());
    assert!(
        moto.honours(Guarantee::ConditionalWritesSerialised),
        "run the tests through scripts/with-moto.sh (moto-serial.py)"
    );
}

/// The fault proxy's token double shows both token guarantees moto lacks, and passes the others
/// through from moto.
#[tokio::test]
async fn the_token_double_honours_the_token_rules() {
    let (_proxy, endpoint) = FaultProxy::with_tokens(&moto_endpoint(), TokenHash::Parameters).await;
    let double = probe::probe("moto + token double", &client_via(&endpoint, 4).await).await;
    println!("{}", double.report());
    assert!(double.honours(Guarantee::SameTokenReplay));
    assert!(double.honours(Guarantee::TokenMismatch));
    assert!(double.honours(Guarantee::ConditionalWritesSerialised));
}

/// A commit whose answer is lost (a 500 after it ran) is retried by the SDK with the same bytes
/// and token: on a backend with token replay the retry is answered 200 as the first request,
/// not cancelled on the record's condition.
async fn lost_commit_answer_is_replayed(proxy: &FaultProxy, endpoint: &str) {
    let store = store_via_with(endpoint, "replay", 4).await;
    let prefix = unique("replay");
    let r = sample_record(&prefix, "replay", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let row = BusinessRow::for_record(&r, "SLOT-1", NOW_MS + 10);
    proxy.inject("TransactWriteItems", 1, Fault::LoseAnswer);
    let out = store
        .commit(&r.pk, "owner-a", "SLOT-1", &row, NOW_MS + 10)
        .await
        .expect("commit");
    assert_eq!(out, CommitOutcome::Committed);
    assert_eq!(
        proxy.answers("TransactWriteItems"),
        [Err("InternalServerError".to_string()), Ok(200)]
    );
}

#[tokio::test]
async fn a_lost_commit_answer_is_replayed_on_moto() {
    if !probe::moto()
        .await
        .proves(Guarantee::SameTokenReplay, TOKENS_COVERED_BY)
    {
        return;
    }
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    lost_commit_answer_is_replayed(&proxy, &endpoint).await;
}

#[tokio::test]
async fn a_lost_commit_answer_is_replayed_on_the_token_double() {
    let (proxy, endpoint) = FaultProxy::with_tokens(&moto_endpoint(), TokenHash::Parameters).await;
    lost_commit_answer_is_replayed(&proxy, &endpoint).await;
}

/// A commit built again under its token (a later `updated_at`) is refused as a token mismatch
/// on a backend that enforces tokens, and still answers committed (the mismatch is settled by
/// a consistent read).
async fn rebuilt_commit_meets_a_token_mismatch(proxy: &FaultProxy, endpoint: &str) {
    let store = store_via_with(endpoint, "mismatch", 1).await;
    let prefix = unique("mismatch");
    let r = sample_record(&prefix, "mismatch", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    for now_ms in [NOW_MS + 10, NOW_MS + 20] {
        let row = BusinessRow::for_record(&r, "SLOT-1", now_ms);
        let out = store
            .commit(&r.pk, "owner-a", "SLOT-1", &row, now_ms)
            .await
            .expect("commit");
        assert_eq!(out, CommitOutcome::Committed);
    }
    assert_eq!(
        proxy.answers("TransactWriteItems"),
        [
            Ok(200),
            Err("IdempotentParameterMismatchException".to_string())
        ]
    );
}

#[tokio::test]
async fn a_rebuilt_commit_meets_a_token_mismatch_on_moto() {
    if !probe::moto()
        .await
        .proves(Guarantee::TokenMismatch, TOKENS_COVERED_BY)
    {
        return;
    }
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    rebuilt_commit_meets_a_token_mismatch(&proxy, &endpoint).await;
}

#[tokio::test]
async fn a_rebuilt_commit_meets_a_token_mismatch_on_the_token_double() {
    let (proxy, endpoint) = FaultProxy::with_tokens(&moto_endpoint(), TokenHash::Parameters).await;
    rebuilt_commit_meets_a_token_mismatch(&proxy, &endpoint).await;
}

/// The reconciler's and the metrics function's reads of the `InFlight` GSI never ask for a
/// consistent read (DynamoDB refuses one on a GSI: the index is eventually consistent, and every
/// take-over is conditional for that reason). The request bodies show it on any backend; on a
/// backend that refuses the flag, the query succeeding proves it there too.
#[tokio::test]
async fn the_index_never_asks_the_gsi_for_a_consistent_read() {
    let (proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = store_via_with(&endpoint, "gsi", 4).await;
    let r = sample_record(&unique("gsi"), "gsi", "owner-a", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let shard = r.inflight_shard.clone().expect("shard");
    let page = store
        .stale_in_flight(&shard, NOW_MS + 1, None, 10)
        .await
        .expect("the index answers");
    assert_eq!(page.entries.len(), 1);
    store.multi_effect_keys().await.expect("multi_effect_keys");
    let queries: Vec<serde_json::Value> = proxy
        .exchanges()
        .into_iter()
        .filter(|x| x.operation == "Query")
        .map(|x| serde_json::from_slice(&x.request).expect("a JSON request"))
        .collect();
    assert_eq!(queries.len(), 2, "one query per index");
    for q in &queries {
        assert!(q.get("IndexName").is_some(), "{q}");
        assert_ne!(
            q.get("ConsistentRead"),
            Some(&serde_json::Value::Bool(true)),
            "{q}"
        );
    }
    probe::moto().await.proves(
        Guarantee::GsiConsistentReadRefused,
        "the request bodies checked here (no ConsistentRead on a GSI query)",
    );
}
