//! The terminal simulator over real HTTP: `spawn()` + reqwest.

use std::sync::Arc;
use std::time::Duration;

use gate::clock::ManualClock;
use serde_json::Value;
use sim::terminal::{spawn, TerminalConfig, TerminalCore};

const T0_MS: i64 = 1_760_000_000_000;
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

struct Sim {
    core: Arc<TerminalCore>,
    clock: Arc<ManualClock>,
    base: String,
    client: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

async fn start(config: TerminalConfig) -> Sim {
    let clock = Arc::new(ManualClock::new(T0_MS));
    let core = TerminalCore::new(config, clock.clone());
    let (addr, server) = spawn(core.clone()).await.expect("spawn");
    Sim {
        core,
        clock,
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        server,
    }
}

fn body(equipment: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "equipment_number": equipment,
        "window_start": "2025-10-20T08:00:00Z",
        "window_end": "2025-10-20T09:00:00Z",
        "pin": "4711",
    }))
    .expect("body")
}

async fn answer(resp: reqwest::Response) -> Answer {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| v.to_str().expect("ascii").to_string())
        .unwrap_or_default();
    let body = resp.bytes().await.expect("body").to_vec();
    Answer {
        status,
        content_type,
        body,
    }
}

impl Sim {
    async fn post(&self, key: Option<&str>, body: Vec<u8>) -> Answer {
        let mut req = self
            .client
            .post(format!("{}/slots", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        answer(req.send().await.expect("send")).await
    }

    async fn get(&self, path_and_query: &str, key_header: Option<&str>) -> Answer {
        let mut req = self.client.get(format!("{}{path_and_query}", self.base));
        if let Some(k) = key_header {
            req = req.header("Idempotency-Key", k);
        }
        answer(req.send().await.expect("send")).await
    }
}

fn assert_problem(a: &Answer, status: u16, problem_type: &str) {
    assert_eq!(
        a.status,
        status,
        "body: {}",
        String::from_utf8_lossy(&a.body)
    );
    assert_eq!(a.content_type, "application/problem+json");
    let v = a.json();
    assert_eq!(v["type"], problem_type);
    assert_eq!(v["status"], status);
    assert!(v["title"].is_string());
    assert!(v["detail"].is_string());
}

#[tokio::test]
async fn replays_a_201_byte_for_byte() {
    let sim = start(TerminalConfig::default()).await;
    let first = sim.post(Some("\"k-1\""), body("MSCU1234565")).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.content_type, "application/json");
    let v = first.json();
    assert_eq!(v["slot_id"], "ECTD-000001");
    assert_eq!(v["equipment_number"], "MSCU1234565");
    assert_eq!(v["window_start"], "2025-10-20T08:00:00Z");
    assert_eq!(v["window_end"], "2025-10-20T09:00:00Z");
    assert_eq!(v["terminal"], "ECT-DELTA");

    sim.clock.advance_ms(60_000);
    let retry = sim.post(Some("\"k-1\""), body("MSCU1234565")).await;
    assert_eq!(retry, first, "raw bytes, status and content type identical");
    assert_eq!(sim.core.slots_issued(), 1);
    let slots = sim.core.slots();
    assert_eq!(slots[0].effect_id, "ECTD-000001");
    assert_eq!(slots[0].idempotency_key.as_deref(), Some("k-1"));
    assert_eq!(slots[0].issued_at_ms, T0_MS);

    // A different key is a different booking.
    let other = sim.post(Some("\"k-2\""), body("MSCU1234565")).await;
    assert_eq!(other.status, 201);
    assert_eq!(other.json()["slot_id"], "ECTD-000002");
    assert_eq!(sim.core.slots_issued(), 2);
}

#[tokio::test]
async fn replays_a_stored_400_identically() {
    let sim = start(TerminalConfig::default()).await;
    let bad = br#"{"equipment_number": "MSCU1234565", "pin": "1"}"#.to_vec();
    let first = sim.post(Some("\"bad\""), bad.clone()).await;
    assert_problem(&first, 400, "invalid_request");
    let retry = sim.post(Some("\"bad\""), bad).await;
    assert_eq!(retry, first);
    assert_eq!(sim.core.slots_issued(), 0);

    // Not JSON at all, and an empty pin: 400 too.
    let not_json = sim.post(Some("\"nj\""), b"{not json".to_vec()).await;
    assert_problem(&not_json, 400, "invalid_request");
    let mut empty_pin: Value = serde_json::from_slice(&body("MSCU1234565")).expect("json");
    empty_pin["pin"] = Value::from("");
    let empty_pin = sim
        .post(
            Some("\"ep\""),
            serde_json::to_vec(&empty_pin).expect("json"),
        )
        .await;
    assert_problem(&empty_pin, 400, "invalid_request");
    // The stored 400 is not a claim: lookup says 404.
    let lookup = sim.get("/slots?idempotency_key=bad", None).await;
    assert_problem(&lookup, 404, "not_found");
    assert_eq!(sim.core.slots_issued(), 0);
}

#[tokio::test]
async fn same_key_other_body_is_409_mismatch() {
    let sim = start(TerminalConfig::default()).await;
    let first = sim.post(Some("\"k\""), body("MSCU1234565")).await;
    assert_eq!(first.status, 201);
    let other = sim.post(Some("\"k\""), body("TGHU7654321")).await;
    assert_problem(&other, 409, "idempotency_mismatch");
    assert_eq!(other.json()["type"], "idempotency_mismatch");
    assert_eq!(sim.core.slots_issued(), 1);
    // The original is still replayed.
    assert_eq!(sim.post(Some("\"k\""), body("MSCU1234565")).await, first);
}

#[tokio::test]
async fn concurrent_retry_waits_and_gets_the_same_response() {
    let sim = start(TerminalConfig {
        latency_ms: 300,
        ..TerminalConfig::default()
    })
    .await;
    let first = sim.post(Some("\"c\""), body("MSCU1234565"));
    let second = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        sim.post(Some("\"c\""), body("MSCU1234565")).await
    };
    let (a, b) = tokio::join!(first, second);
    assert_eq!(a.status, 201);
    assert_eq!(a, b);
    assert_eq!(sim.core.slots_issued(), 1);
}

#[tokio::test]
async fn in_flight_other_body_is_mismatch_and_long_wait_is_in_flight() {
    let sim = start(TerminalConfig {
        latency_ms: 600,
        in_flight_wait_ms: 100,
        ..TerminalConfig::default()
    })
    .await;
    let first = sim.post(Some("\"f\""), body("MSCU1234565"));
    let others = async {
        // The first request holds the key before the others arrive, however loaded the machine.
        while sim.core.most_requests_at_once() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mismatch = sim.post(Some("\"f\""), body("TGHU7654321")).await;
        let same = sim.post(Some("\"f\""), body("MSCU1234565")).await;
        (mismatch, same)
    };
    let (a, (mismatch, same)) = tokio::join!(first, others);
    assert_eq!(a.status, 201);
    assert_problem(&mismatch, 409, "idempotency_mismatch");
    assert_problem(&same, 409, "idempotency_key_in_flight");
    assert_eq!(sim.core.slots_issued(), 1);
    // After completion the retry gets the stored 201.
    assert_eq!(sim.post(Some("\"f\""), body("MSCU1234565")).await, a);
}

#[tokio::test]
async fn keys_are_forgotten_after_24_hours() {
    let sim = start(TerminalConfig::default()).await;
    let first = sim.post(Some("\"old\""), body("MSCU1234565")).await;
    assert_eq!(first.json()["slot_id"], "ECTD-000001");

    sim.clock.advance_ms(DAY_MS - 1);
    assert_eq!(sim.post(Some("\"old\""), body("MSCU1234565")).await, first);
    assert_eq!(
        sim.get("/slots?idempotency_key=old", None).await.status,
        200
    );
    assert_eq!(sim.core.slots_issued(), 1);

    sim.clock.set_ms(T0_MS + DAY_MS + 1);
    assert_problem(
        &sim.get("/slots?idempotency_key=old", None).await,
        404,
        "not_found",
    );
    let again = sim.post(Some("\"old\""), body("MSCU1234565")).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.json()["slot_id"], "ECTD-000002");
    assert_eq!(sim.core.slots_issued(), 2);
    // Newly stored: replayed again from now on.
    assert_eq!(sim.post(Some("\"old\""), body("MSCU1234565")).await, again);
    assert_eq!(sim.core.slots_issued(), 2);
}

#[tokio::test]
async fn get_ignores_the_idempotency_key_header() {
    let sim = start(TerminalConfig::default()).await;
    let empty = sim.get("/slots", Some("\"g\"")).await;
    assert_eq!(empty.status, 200);
    assert_eq!(empty.json(), serde_json::json!({"slots": []}));

    // The key used on GET was not taken: a POST with it is a first request.
    let post = sim.post(Some("\"g\""), body("MSCU1234565")).await;
    assert_eq!(post.status, 201);
    let listing = sim.get("/slots", Some("\"g\"")).await;
    assert_eq!(listing.status, 200);
    let v = listing.json();
    let slots = v["slots"].as_array().expect("array");
    assert_eq!(slots.len(), 1);
    assert_eq!(slots[0]["slot_id"], "ECTD-000001");
    assert_eq!(slots[0]["equipment_number"], "MSCU1234565");
    assert_eq!(slots[0]["idempotency_key"], "g");
    // GET twice with the same header is not a "mismatch" either.
    assert_eq!(sim.get("/slots", Some("\"g\"")).await, listing);

    let health = sim.get("/health", Some("\"g\"")).await;
    assert_eq!(health.status, 200);
}

#[tokio::test]
async fn lookup_by_key_is_200_or_404() {
    let sim = start(TerminalConfig::default()).await;
    let post = sim.post(Some("\"look up\""), body("MSCU1234565")).await;
    assert_eq!(post.status, 201);

    let found = sim.get("/slots?idempotency_key=look%20up", None).await;
    assert_eq!(found.status, 200);
    assert_eq!(found.content_type, "application/json");
    let slot_from_post = post.json();
    assert_eq!(found.json(), serde_json::json!({ "slot": slot_from_post }));
    // Byte-wise, too: the lookup embeds exactly the 201 body.
    let mut expected = b"{\"slot\":".to_vec();
    expected.extend_from_slice(&post.body);
    expected.push(b'}');
    assert_eq!(found.body, expected);

    let missing = sim.get("/slots?idempotency_key=nope", None).await;
    assert_problem(&missing, 404, "not_found");
}

#[tokio::test]
async fn without_key_support_every_retry_makes_a_new_slot() {
    let sim = start(TerminalConfig {
        supports_idempotency_key: false,
        ..TerminalConfig::default()
    })
    .await;
    let a = sim.post(Some("\"k\""), body("MSCU1234565")).await;
    let b = sim.post(Some("\"k\""), body("MSCU1234565")).await;
    let c = sim.post(Some("\"k\""), body("TGHU7654321")).await;
    assert_eq!(a.json()["slot_id"], "ECTD-000001");
    assert_eq!(b.json()["slot_id"], "ECTD-000002");
    assert_eq!(c.json()["slot_id"], "ECTD-000003");
    assert_eq!(sim.core.slots_issued(), 3);
    assert!(sim.core.slots().iter().all(|s| s.idempotency_key.is_none()));
    assert_problem(
        &sim.get("/slots?idempotency_key=k", None).await,
        404,
        "not_found",
    );
}

#[tokio::test]
async fn post_without_key_runs_every_time() {
    let sim = start(TerminalConfig::default()).await;
    let a = sim.post(None, body("MSCU1234565")).await;
    let b = sim.post(None, body("MSCU1234565")).await;
    assert_eq!(a.json()["slot_id"], "ECTD-000001");
    assert_eq!(b.json()["slot_id"], "ECTD-000002");
    assert_eq!(sim.core.slots_issued(), 2);
}

#[tokio::test]
async fn forced_503_is_not_stored() {
    let sim = start(TerminalConfig::default()).await;
    sim.core.fail_next_posts(2);
    let a = sim.post(Some("\"u\""), body("MSCU1234565")).await;
    assert_problem(&a, 503, "service_unavailable");
    let b = sim.post(Some("\"u\""), body("MSCU1234565")).await;
    assert_problem(&b, 503, "service_unavailable");
    assert_eq!(sim.core.slots_issued(), 0);
    assert_problem(
        &sim.get("/slots?idempotency_key=u", None).await,
        404,
        "not_found",
    );

    let c = sim.post(Some("\"u\""), body("MSCU1234565")).await;
    assert_eq!(c.status, 201);
    assert_eq!(c.json()["slot_id"], "ECTD-000001");
    assert_eq!(sim.post(Some("\"u\""), body("MSCU1234565")).await, c);
    assert_eq!(sim.core.slots_issued(), 1);
}

#[tokio::test]
async fn error_rate_one_always_fails_and_stores_nothing() {
    let sim = start(TerminalConfig {
        error_rate: 1.0,
        ..TerminalConfig::default()
    })
    .await;
    for _ in 0..3 {
        let a = sim.post(Some("\"e\""), body("MSCU1234565")).await;
        assert_problem(&a, 503, "service_unavailable");
    }
    assert_eq!(sim.core.slots_issued(), 0);
}

#[tokio::test]
async fn lost_response_then_retry_gets_the_stored_201() {
    let sim = start(TerminalConfig::default()).await;
    sim.core.lose_next_responses(1);
    let lost = sim.post(Some("\"l\""), body("MSCU1234565")).await;
    assert_problem(&lost, 504, "upstream_response_lost");
    assert_eq!(sim.core.slots_issued(), 1, "the slot was made");

    let found = sim.get("/slots?idempotency_key=l", None).await;
    assert_eq!(found.status, 200);
    assert_eq!(found.json()["slot"]["slot_id"], "ECTD-000001");

    let retry = sim.post(Some("\"l\""), body("MSCU1234565")).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.json()["slot_id"], "ECTD-000001");
    assert_eq!(retry.json(), found.json()["slot"]);
    assert_eq!(sim.core.slots_issued(), 1);
}

#[tokio::test]
async fn quoted_and_unquoted_keys_are_the_same_key() {
    let sim = start(TerminalConfig::default()).await;
    let quoted = sim.post(Some("\"same\""), body("MSCU1234565")).await;
    let unquoted = sim.post(Some("same"), body("MSCU1234565")).await;
    assert_eq!(quoted.status, 201);
    assert_eq!(quoted, unquoted);
    assert_eq!(sim.core.slots_issued(), 1);
    let mismatch = sim.post(Some("same"), body("TGHU7654321")).await;
    assert_problem(&mismatch, 409, "idempotency_mismatch");
    let lookup_quoted = sim.get("/slots?idempotency_key=%22same%22", None).await;
    assert_eq!(lookup_quoted.status, 200);
}

#[tokio::test]
async fn unknown_paths_and_methods_are_problems() {
    let sim = start(TerminalConfig::default()).await;
    assert_problem(&sim.get("/nope", None).await, 404, "not_found");
    let del = answer(
        sim.client
            .delete(format!("{}/slots", sim.base))
            .header("Idempotency-Key", "\"d\"")
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_problem(&del, 405, "method_not_allowed");
    // DELETE did not take the key.
    assert_eq!(
        sim.post(Some("\"d\""), body("MSCU1234565")).await.status,
        201
    );
}

/// `terminal-sim` on a port that is taken says which port and why, and exits with an error
/// (not a `Debug` dump of the OS error).
#[test]
fn a_busy_port_is_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().unwrap().port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_terminal-sim"))
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("terminal-sim runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("waits").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("terminal-sim kept running on a port that is taken");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "terminal-sim: cannot listen on 127.0.0.1:{port}: Address already in use"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("Os {"), "{stderr}");
    assert!(out.stdout.is_empty());
    drop(taken);
}
