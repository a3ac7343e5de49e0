//! The exactly-once scenario of the payments integration (feature `testkit`), for its test
//! (`tests/exactly_once.rs`, 1,000 seeds in `make test`) and its benchmark (`cargo run --release
//! -p sim -- check --integration payments --seeds N`, with the kit's `Totals`): one run of the test kit's harness
//! (`gate_testkit::Harness`) against the test kit's Idempotency-Key server shaped like the
//! payments API (`POST /v1/charges`, `201 {"id": "ch-000001"}`, a declined card `402`, a reused
//! key with another body `409 idempotency_mismatch`, no lookup by key, keys kept 24 hours), with
//! a third of the answers lost after the charge was made and one `POST` in ten failing first.
//!
//! The bodies: [`INVOICES`] invoices, those in [`DECLINED`] paid with a card the API declines,
//! those in [`MISMATCHED`] also delivered with another amount (the same invoice id: a mismatch),
//! and three bodies the parse rejects (not JSON, over 8 KiB, a lower-case currency). The harness
//! delivers each 1 to 3 times, strands the first three invoices with a worker that died after its
//! reserve, crashes, echoes and stalls store writes, and runs the reconciler; then
//! [`expectation_violations`] adds this scenario's own checks to the kit's safety and liveness
//! invariants.

use std::sync::Arc;

use gate::clock::ManualClock;
use gate::manual::ManualReason;
use gate_lambda::SecretString;
use gate_testkit::{figure_misses, run_parallel, unexpected_manual_items, ServerConfig, Target};
use gate_testkit::{Answer, Faults, Harness, IdempotencyServer, MismatchAnswer, RunReport};
use serde_json::json;

use crate::{Payments, KEY_RETENTION_MS};

/// 2030-01-07T08:00:00Z in epoch ms: a fixed, simulated start.
pub const T0: i64 = 1_893_916_800_000;
/// Invoices in each run.
pub const INVOICES: usize = 10;
/// Invoices paid with a card the API declines (`402`).
pub const DECLINED: [usize; 2] = [4, 7];
/// Invoices also delivered with another amount (a mismatch).
pub const MISMATCHED: [usize; 2] = [2, 8];
/// The token of a card the API declines.
pub const DECLINED_CARD: &str = "pm_card_chargeDeclined";
/// Bodies the parse rejects in each run.
pub const REJECTED: usize = 3;

/// Invoice `n`'s event; `changed`: with another amount.
pub fn invoice(n: usize, changed: bool) -> String {
    let card = if DECLINED.contains(&n) {
        DECLINED_CARD.to_string()
    } else {
        format!("pm_card_{n:04}")
    };
    json!({
        "invoice_id": format!("INV-2030-{n:05}"),
        "customer": format!("cus_{n:04}"),
        "amount_minor": 12_500 + n as u64 + if changed { 100 } else { 0 },
        "currency": "EUR",
        "payment_method": card,
    })
    .to_string()
}

/// Every body of a run, in order: the invoices, the mismatched copies, the rejected bodies.
pub fn bodies() -> Vec<String> {
    let oversized = format!(
        r#"{{"invoice_id":"INV-X","pad":"{}"}}"#,
        "x".repeat(9 * 1024)
    );
    let lower = invoice(0, false).replace("\"EUR\"", "\"eur\"");
    (0..INVOICES)
        .map(|n| invoice(n, false))
        .chain(MISMATCHED.iter().map(|&n| invoice(n, true)))
        .chain(["{not json".to_string(), oversized, lower])
        .collect()
}

/// The payments API as the test kit's server (module docs); faults seeded with `seed`.
pub fn payments_api(seed: u64) -> ServerConfig {
    ServerConfig::new("/v1/charges", "id")
        .id_prefix("ch")
        .mismatch(MismatchAnswer::Conflict)
        .without_lookup()
        .retention_ms(KEY_RETENTION_MS)
        .answer(|request, id| {
            let declined = String::from_utf8_lossy(request).contains(DECLINED_CARD);
            match declined {
                true => Answer {
                    status: 402,
                    body: json!({"type": "card_declined", "title": "Your card was declined."}),
                },
                false => Answer {
                    status: 201,
                    body: json!({"id": id, "object": "charge"}),
                },
            }
        })
        .faults(Faults {
            lose_answer_rate: 0.33,
            unavailable_rate: 0.1,
            latency_ms: 0,
            seed,
        })
}

/// The HTTP client of the runs: as [`crate::lambda::build`] builds it.
///
/// # Panics
/// If the HTTP client cannot be built.
pub fn http() -> reqwest::Client {
    gate_http::builder("payments-scenario")
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
}

/// The harness for the scenario's bodies, starting at [`T0`].
pub fn harness() -> Harness {
    let mut harness = Harness::new("invoice-charges", bodies());
    harness.config.start_ms = T0;
    harness
}

/// One run with `seed` on the HTTP client `http` (one for all runs: building one costs more
/// than a run): the kit's violations plus [`expectation_violations`].
pub async fn run(harness: &Harness, http: &reqwest::Client, seed: u64) -> RunReport {
    let setup = async |seed: u64, clock: Arc<ManualClock>| {
        let server = IdempotencyServer::start(payments_api(seed), clock)
            .await
            .expect("a loopback port for the test server");
        let client = Payments {
            url: server.url().to_string(),
            key: SecretString::new("sk_test_scenario"),
            http: http.clone(),
        };
        Target {
            integration: Arc::new(client),
            ledger: Arc::new(server),
        }
    };
    let mut report = harness.run(seed, &setup).await;
    let more = expectation_violations(&report);
    report.violations.extend(more);
    report
}

/// Runs every seed of `seeds`, `parallel` at a time ([`gate_testkit::run_parallel`]), and
/// returns the reports in seed order.
pub async fn run_seeds(seeds: std::ops::Range<u64>, parallel: usize) -> Vec<RunReport> {
    let (harness, http) = (harness(), http());
    run_parallel(seeds, parallel, |seed| run(&harness, &http, seed)).await
}

/// What this scenario must end with, beyond the kit's invariants; each miss in words: one
/// charge per invoice whose card is good, each committed with its row; no charge for a declined
/// card, which reached a person as `card_declined`; a person got each mismatch and each rejected
/// body, and nothing else; no manual item's detail names a card token.
pub fn expectation_violations(r: &RunReport) -> Vec<String> {
    let mut v = Vec::new();
    let charged = INVOICES - DECLINED.len();
    let charges: usize = r.effects.values().map(Vec::len).sum();
    let figures = [
        ("charges made", charges, charged),
        ("keys charged", r.effects.len(), charged),
        ("records committed", r.committed(), charged),
        ("business rows", r.rows.len(), charged),
        (
            "declined to a person",
            r.cases(ManualReason::Declined),
            DECLINED.len(),
        ),
        (
            "mismatches to a person",
            r.cases(ManualReason::Mismatch),
            MISMATCHED.len(),
        ),
        (
            "rejected to a person",
            r.cases(ManualReason::Rejected),
            REJECTED,
        ),
    ];
    v.extend(figure_misses(&figures));
    let expected = [
        ManualReason::Declined,
        ManualReason::Mismatch,
        ManualReason::Rejected,
    ];
    v.extend(unexpected_manual_items(r, &expected, |detail| {
        detail.contains("pm_card")
    }));
    v
}
