//! The test kit's harness on a small integration of its own (a client of the kit's server with a
//! 422 mismatch): clean across seeds, and not vacuous: a client that sends a new key on every call
//! instead of the record's operation key is caught.
//! `cargo test -p gate --features testkit --test testkit_harness`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use gate::effect::{AnswerDetail, CallOutcome, Effect, LookupOutcome};
use gate::integration::Held;
use gate::manual::ManualReason;
use gate::record::Labels;
use gate::{Event, Integration, Parsed, Rejection};
use gate_testkit::{Faults, Harness, IdempotencyServer, ServerConfig, Target};
use serde_json::Value;

/// Bodies `{"order": "...", "qty": n}`: the order is the key material, the body the request.
struct Orders {
    base: String,
    http: reqwest::Client,
    /// Sends `fresh-{n}` instead of the record's operation key (the bug the harness must catch).
    fresh_keys: Option<AtomicUsize>,
}

fn detail(status: u16) -> AnswerDetail {
    AnswerDetail::new(format!("order server answered {status}"))
}

#[async_trait]
impl Integration for Orders {
    fn operation(&self) -> &str {
        "place-order"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        let order = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| Some((v["order"].as_str()?.to_string(), v)));
        let Some((order, v)) = order else {
            return Parsed::Rejected(Rejection {
                code: "bad_order",
                detail: "not an order".into(),
                ended: false,
            });
        };
        Parsed::Event(Event {
            key_material: format!("order:{order}"),
            business_fields: v,
            request: body.as_bytes().to_vec(),
            labels: Labels::from([("order".to_string(), order.clone())]),
            ends_at_ms: None,
            subject: order,
        })
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let record = held.record();
        let key = match &self.fresh_keys {
            Some(n) => format!("fresh-{}", n.fetch_add(1, Ordering::SeqCst)),
            None => record.op_key.clone(),
        };
        let sent = self
            .http
            .post(format!("{}/orders", self.base))
            .header("Idempotency-Key", format!("\"{key}\""))
            .body(record.request.clone())
            .send()
            .await;
        let Ok(answer) = sent else {
            return CallOutcome::Transient(AnswerDetail::new("no answer"));
        };
        let status = answer.status().as_u16();
        let bytes = answer.bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match (status, body["id"].as_str(), body["type"].as_str()) {
            (201, Some(id), _) => CallOutcome::Done(Effect {
                effect_id: id.to_string(),
                subject: None,
            }),
            (422, _, _) => CallOutcome::KeyMismatch(detail(status)),
            (409, _, Some("idempotency_key_in_flight")) => CallOutcome::KeyInFlight,
            (500..=599, _, _) => CallOutcome::Transient(detail(status)),
            _ => CallOutcome::Permanent {
                status,
                detail: detail(status),
            },
        }
    }

    fn lookup_by_key(&self) -> Option<&dyn gate::Lookup> {
        Some(self)
    }
}

#[async_trait]
impl gate::Lookup for Orders {
    async fn lookup(&self, held: &Held<'_>) -> LookupOutcome {
        let record = held.record();
        let sent = self
            .http
            .get(format!("{}/orders", self.base))
            .query(&[("idempotency_key", record.op_key.as_str())])
            .send()
            .await;
        let Ok(answer) = sent else {
            return LookupOutcome::Transient(AnswerDetail::new("no answer"));
        };
        let status = answer.status().as_u16();
        let bytes = answer.bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match (status, body["id"].as_str()) {
            (200, Some(id)) => LookupOutcome::Found(Effect {
                effect_id: id.to_string(),
                subject: None,
            }),
            (404, _) => LookupOutcome::NotFound,
            _ => LookupOutcome::Transient(detail(status)),
        }
    }
}

fn bodies() -> Vec<String> {
    (0..12)
        .map(|n| format!(r#"{{"order":"O-{n}","qty":{n}}}"#))
        .chain([r#"{"order":"O-4","qty":400}"#.to_string(), "[]".to_string()])
        .collect()
}

async fn target(seed: u64, clock: Arc<gate::clock::ManualClock>, fresh: bool) -> Target {
    let faults = Faults {
        lose_answer_rate: 0.25,
        unavailable_rate: 0.1,
        latency_ms: 0,
        seed,
    };
    let config = ServerConfig::new("/orders", "id").faults(faults);
    let server = IdempotencyServer::start(config, clock).await.unwrap();
    let orders = Orders {
        base: server.url().to_string(),
        http: reqwest::Client::new(),
        fresh_keys: fresh.then(|| AtomicUsize::new(0)),
    };
    Target {
        integration: Arc::new(orders),
        ledger: Arc::new(server),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_the_contract_passes_every_seed() {
    let reports = Harness::new("orders", bodies())
        .check_seeds(0..20, async |seed, clock| target(seed, clock, false).await)
        .await;
    for r in &reports {
        assert_eq!(r.committed(), 12, "seed {}", r.seed);
        assert_eq!(r.cases(ManualReason::Mismatch), 1, "seed {}", r.seed);
        assert_eq!(r.cases(ManualReason::Rejected), 1, "seed {}", r.seed);
    }
}

/// Reproducible: the same seed gives the same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_replays_the_same_run() {
    let harness = Harness::new("orders", bodies());
    let setup = async |seed, clock| target(seed, clock, false).await;
    let a = harness.run(7, &setup).await;
    let b = harness.run(7, &setup).await;
    assert_eq!(a.records, b.records);
    assert_eq!(a.effects, b.effects);
    assert_eq!(a.manual, b.manual);
    assert_eq!((a.faults, a.deliveries), (b.faults, b.deliveries));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_a_new_key_per_call_is_caught() {
    let harness = Harness::new("orders", bodies());
    let mut caught = 0;
    for seed in 0..5 {
        let report = harness
            .run(seed, &async |seed, clock| target(seed, clock, true).await)
            .await;
        if report
            .violations
            .iter()
            .any(|v| v.contains("committed") && v.contains("the server made []"))
        {
            caught += 1;
        }
    }
    assert_eq!(caught, 5);
}
