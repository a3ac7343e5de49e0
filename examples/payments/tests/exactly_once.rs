//! The payments integration's exactly-once proof: 1,000 seeded runs of its scenario
//! (`payments::scenario`: the test kit's harness against the test kit's Idempotency-Key server
//! shaped like the payments API: 402 for a declined card, 409 on a mismatch, no lookup by key,
//! keys kept 24 hours) with 0 violations; more seeds: `sim check --integration payments --seeds N`.

use gate_testkit::RunReport;
use payments::scenario::{DECLINED, INVOICES, MISMATCHED, REJECTED};

/// Seeds `make test` runs (a debug build: well under a minute on 2 cores).
const SEEDS: u64 = 1_000;

/// Every seed: no violation of the kit's safety and liveness invariants nor of the scenario's
/// expectations (one charge per good card, committed; a declined card to a person as
/// `card_declined`; each mismatch and each rejected body to a person; nothing else).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invoice_is_charged_once_across_1000_seeds() {
    let reports = payments::scenario::run_seeds(0..SEEDS, 8).await;
    assert_eq!(reports.len() as u64, SEEDS);
    for r in &reports {
        assert!(
            r.violations.is_empty(),
            "seed {}: {:#?}",
            r.seed,
            r.violations
        );
    }
    let totals = gate_testkit::Totals::of(&reports);
    assert!(totals.failures.is_empty());
    // Every good card charged once a run, every declined card, mismatch and rejected body to a
    // person once a run (figures of the scenario's module docs).
    let good = (INVOICES - DECLINED.len()) * SEEDS as usize;
    assert_eq!(totals.effects, good);
    assert_eq!(totals.committed, good);
    let cases = DECLINED.len() + MISMATCHED.len() + REJECTED;
    assert_eq!(totals.to_a_person, cases * SEEDS as usize);
    // The faults happened (not runs that passed because nothing went wrong).
    let sum = |f: fn(&RunReport) -> usize| reports.iter().map(f).sum::<usize>();
    assert!(sum(|r| r.faults.crashes) > 0, "no worker crashed");
    assert!(sum(|r| r.faults.echoes) > 0, "no write was echoed");
    assert!(sum(|r| r.faults.stalls) > 0, "no worker stalled");
    assert!(totals.lost > 0, "no failed message was lost");
    assert!(totals.max_skew_ms > 0, "no clock was skewed");
    // The reconciler committed records (the stranded invoices only it can finish: the API has
    // no lookup, so it re-sent them under their key).
    assert!(reports.iter().all(|r| r.reconciled > 0));
    // Redeliveries and duplicates happened.
    assert!(reports
        .iter()
        .all(|r| r.deliveries > payments::scenario::bodies().len()));
}

/// The checker of the scenario is not vacuous: a run with a second charge, a declined card
/// routed under the generic reason, and a missing rejection is reported for each.
#[test]
fn the_scenario_checks_catch_what_they_claim() {
    use gate::manual::{ManualItem, ManualReason};
    use std::collections::BTreeMap;
    let mut effects = BTreeMap::new();
    effects.insert(
        "k".to_string(),
        vec!["ch-000001".to_string(), "ch-000002".to_string()],
    );
    let item = ManualItem {
        reason: ManualReason::ServerRejected,
        detail: "payments API answered 402".into(),
        original_body: payments::scenario::invoice(4, false),
        event_key: Some("e".into()),
        message_id: "m-1".into(),
        original_body_cut: None,
    };
    let report = RunReport {
        seed: 0,
        records: Vec::new(),
        rows: Vec::new(),
        manual: vec![item],
        effects,
        delivered: Default::default(),
        violations: Vec::new(),
        faults: Default::default(),
        deliveries: 0,
        lost: 0,
        max_skew_seen_ms: 0,
        reconciled: 0,
    };
    let v = payments::scenario::expectation_violations(&report);
    let text = v.join("\n");
    for want in [
        "charges made: 2, expected 8",
        "declined to a person: 0, expected 2",
        "rejected to a person: 0, expected 3",
        "unexpected manual item server_rejected",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
}
