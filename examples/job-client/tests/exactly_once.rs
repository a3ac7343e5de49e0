//! The job client on the gate's core, end to end against a job server on loopback that keeps the
//! Idempotency-Key contract (a replay on the same key and body, `409 idempotency_mismatch` on
//! another body) and loses answers on purpose: the store conformance suite, and seeded runs
//! (redeliveries, answers lost after the job was made, mismatched bodies, poison bodies, workers
//! that died after their reserve, then the reconciler) checked with the gate's safety invariants
//! (`gate::testkit::exactly_once_violations`) and liveness (every job made once, or with a person).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use gate::clock::{Clock, ManualClock};
use gate::consumer::{Gate, GateConfig, Invocation};
use gate::manual::{ManualReason, MemoryManualQueue};
use gate::reconciler::ReconcilerConfig;
use gate::record::RecordStatus;
use gate::store::memory::MemoryStore;
use gate::store::IdempotencyStore;
use gate::testkit::{exactly_once_violations, sqs_event};
use gate::{Integration, Parsed};
use job_client::JobClient;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

// The suite every store passes, on the store the example runs on.
gate::store_conformance_tests!(_case => Arc::new(MemoryStore::new()));

/// 2030-01-07T08:00:00Z in epoch ms: a fixed, simulated time.
const T0: i64 = 1_893_916_800_000;

/// The job server: jobs by key (body, id), each key's effects in order, answers to lose.
#[derive(Default)]
struct Server {
    jobs: Mutex<HashMap<String, (Vec<u8>, String)>>,
    effects: Mutex<BTreeMap<String, Vec<String>>>,
    /// Each POST draws from this: `true` makes the job (or replays it) and answers 503.
    lose: Mutex<Vec<bool>>,
}

async fn post_job(
    State(s): State<Arc<Server>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, Json<Value>) {
    let Some(key) = headers.get("idempotency-key").and_then(|k| k.to_str().ok()) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"title": "no key"})));
    };
    let key = key.trim_matches('"').to_string();
    let id = {
        let mut jobs = s.jobs.lock().unwrap();
        match jobs.get(&key) {
            Some((sent, _)) if sent[..] != body[..] => {
                let problem = json!({"type": "https://example.com/idempotency_mismatch"});
                return (StatusCode::CONFLICT, Json(problem));
            }
            Some((_, id)) => id.clone(),
            None => {
                let id = format!("JOB-{:04}", jobs.len() + 1);
                jobs.insert(key.clone(), (body.to_vec(), id.clone()));
                s.effects
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_default()
                    .push(id.clone());
                id
            }
        }
    };
    if s.lose.lock().unwrap().pop().unwrap_or(false) {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({})));
    }
    (StatusCode::CREATED, Json(json!({"id": id})))
}

async fn get_job(
    State(s): State<Arc<Server>>,
    Query(q): Query<HashMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    let key = q.get("idempotency_key").cloned().unwrap_or_default();
    match s.jobs.lock().unwrap().get(&key) {
        Some((_, id)) => (StatusCode::OK, Json(json!({"id": id}))),
        None => (StatusCode::NOT_FOUND, Json(json!({}))),
    }
}

async fn serve(server: Arc<Server>) -> String {
    let app = Router::new()
        .route("/jobs", post(post_job).get(get_job))
        .with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn job(n: usize, changed: bool) -> String {
    let payload = if changed {
        json!({"n": n, "priority": "high"})
    } else {
        json!({"n": n})
    };
    json!({"job_id": format!("J-{n}"), "payload": payload}).to_string()
}

/// One seeded run: 24 jobs, each body delivered 1 to 3 times in a shuffled order, 1 in 8 with a
/// mismatched copy, a poison body twice, a third of the first answers lost after the job was
/// made, 3 jobs stranded by a dead worker after its reserve; then the reconciler.
async fn run(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let server = Arc::new(Server::default());
    *server.lose.lock().unwrap() = (0..200).map(|_| rng.random_bool(0.33)).collect();
    let client = JobClient::new(serve(server.clone()).await).unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::new());
    let manual = Arc::new(MemoryManualQueue::new());
    let gate = Gate {
        config: GateConfig::new("jobs"),
        store: store.clone(),
        integration: Arc::new(client.clone()),
        manual: manual.clone(),
        clock: clock.clone(),
    };
    let mut queue: Vec<String> = Vec::new();
    let mut mismatched = 0;
    for n in 0..24 {
        if n < 3 {
            // A worker reserved it and died; the message never comes back.
            let Parsed::Event(event) = client.parse(&job(n, false), T0) else {
                panic!("job {n}")
            };
            let keys = gate::consumer::derive_keys(&event, client.operation()).unwrap();
            let dead = Invocation {
                request_id: format!("dead-{n}"),
                deadline_ms: T0 - 60_000,
            };
            let record = gate.new_record(&event, &keys, &dead, T0 - 120_000);
            store.reserve(&record, T0 - 120_000).await.unwrap();
            continue;
        }
        for _ in 0..rng.random_range(1..=3) {
            queue.push(job(n, false));
        }
        if rng.random_bool(0.125) {
            queue.push(job(n, true));
            mismatched += 1;
        }
    }
    queue.extend(["{not json".to_string(), "{not json".to_string()]);
    for i in (1..queue.len()).rev() {
        queue.swap(i, rng.random_range(0..=i));
    }
    let mut m = 0;
    while !queue.is_empty() && m < 1_000 {
        let take = rng.random_range(1..=5).min(queue.len());
        let batch: Vec<(String, String)> = queue
            .drain(..take)
            .map(|b| {
                m += 1;
                (format!("m-{m}"), b)
            })
            .collect();
        let pairs: Vec<(&str, &str)> = batch
            .iter()
            .map(|(i, b)| (i.as_str(), b.as_str()))
            .collect();
        clock.advance_ms(1_000);
        let invocation = Invocation {
            request_id: format!("inv-{m}"),
            deadline_ms: clock.now_ms() + 60_000,
        };
        let report = gate.handle_batch(sqs_event(&pairs), &invocation).await;
        // SQS redelivers each batch item failure later.
        for failure in &report.response.batch_item_failures {
            let (_, body) = batch
                .iter()
                .find(|(i, _)| *i == failure.item_identifier)
                .unwrap();
            queue.push(body.clone());
        }
    }
    assert!(queue.is_empty(), "seed {seed}: deliveries never settled");
    // The reconciler every minute (its calls lose answers too) until nothing is in flight.
    let mut reconciled = 0;
    for run in 0..10 {
        clock.advance_ms(if run == 0 { 10 * 60_000 } else { 60_000 });
        let invocation = Invocation {
            request_id: format!("rec-{run}"),
            deadline_ms: clock.now_ms() + 120_000,
        };
        let report = gate
            .reconcile(store.as_ref(), &ReconcilerConfig::default(), &invocation)
            .await;
        reconciled += report.reconciled;
        if report.examined == 0 {
            break;
        }
    }
    assert_eq!(reconciled, 3, "seed {seed}: the three stranded jobs");

    let records = store.records();
    let effects = server.effects.lock().unwrap().clone();
    let items = manual.items();
    let v = exactly_once_violations(&records, &store.bookings(), &items, &effects);
    assert!(v.is_empty(), "seed {seed}: {v:#?}");
    // Liveness: every job made exactly once and committed; a person got each mismatch and the
    // poison body once.
    assert_eq!(effects.len(), 24, "seed {seed}");
    let committed = records
        .iter()
        .filter(|r| r.status == RecordStatus::Committed);
    assert_eq!(committed.count(), 24, "seed {seed}");
    let count = |reason| items.iter().filter(|i| i.reason == reason).count();
    assert_eq!(count(ManualReason::Mismatch), mismatched, "seed {seed}");
    assert_eq!(count(ManualReason::Rejected), 1, "seed {seed}");
    assert_eq!(items.len(), mismatched + 1, "seed {seed}: {items:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_made_once_across_seeded_runs() {
    for seed in 0..25 {
        run(seed).await;
    }
}

/// The checker is not vacuous: a second effect under one key, a row without its record and a
/// committed event also sent to a person are each reported.
#[test]
fn the_invariants_catch_a_double_effect() {
    let effects = BTreeMap::from([("k".to_string(), vec!["JOB-1".into(), "JOB-2".into()])]);
    let row = gate::record::BusinessRow {
        source_event: "e".into(),
        effect_id: "JOB-1".into(),
        labels: Default::default(),
        booked_at_ms: T0,
    };
    let v = exactly_once_violations(&[], &[row], &[], &effects);
    assert_eq!(v.len(), 2, "{v:?}");
}
