//! The test kit's Idempotency-Key server over HTTP, as an integration's client meets it:
//! `cargo test -p gate --features testkit --test testkit_server`.

use std::sync::Arc;

use gate::clock::ManualClock;
use gate_testkit::{Answer, IdempotencyServer, MismatchAnswer, ServerConfig};
use serde_json::{json, Value};

const T0: i64 = 1_893_916_800_000;

struct Got {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

async fn post(server: &IdempotencyServer, key: Option<&str>, body: &str) -> Got {
    let mut request = reqwest::Client::new()
        .post(format!("{}/charges", server.url()))
        .header("Content-Type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", format!("\"{key}\""));
    }
    got(request.send().await.expect("an answer")).await
}

async fn lookup(server: &IdempotencyServer, key: &str) -> Got {
    let request = reqwest::Client::new()
        .get(format!("{}/charges", server.url()))
        .query(&[("idempotency_key", key)]);
    got(request.send().await.expect("an answer")).await
}

async fn got(answer: reqwest::Response) -> Got {
    Got {
        status: answer.status().as_u16(),
        content_type: answer
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        body: answer.bytes().await.expect("a body").to_vec(),
    }
}

/// A payments-like server: `201 {"charge": {"id", "amount"}}`, `402` for an amount over 1000
/// (declined: no effect).
fn payments() -> ServerConfig {
    ServerConfig::new("/charges", "id")
        .id_prefix("ch")
        .answer(|body, id| {
            let amount = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|b| b["amount"].as_i64())
                .unwrap_or(0);
            if amount > 1000 {
                Answer {
                    status: 402,
                    body: json!({"type": "card_declined", "detail": "insufficient funds"}),
                }
            } else {
                Answer {
                    status: 201,
                    body: json!({"charge": {"id": id, "amount": amount}}),
                }
            }
        })
}

#[tokio::test]
async fn the_first_answer_is_replayed_byte_for_byte_errors_included() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = IdempotencyServer::start(payments(), clock).await.unwrap();
    let first = post(&server, Some("k1"), r#"{"amount":500}"#).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.content_type, "application/json");
    assert_eq!(
        first.json(),
        json!({"charge": {"id": "ch-000001", "amount": 500}})
    );
    let again = post(&server, Some("k1"), r#"{"amount":500}"#).await;
    assert_eq!(
        (again.status, again.body.clone()),
        (201, first.body.clone())
    );

    let declined = post(&server, Some("k2"), r#"{"amount":5000}"#).await;
    assert_eq!(declined.status, 402);
    let again = post(&server, Some("k2"), r#"{"amount":5000}"#).await;
    assert_eq!((again.status, again.body), (402, declined.body));

    // One effect, under k1; the declined charge made none.
    assert_eq!(server.effects_made(), 1);
    assert_eq!(server.effects()["k1"], vec!["ch-000001".to_string()]);
    assert!(!server.effects().contains_key("k2"));
    let c = server.counters();
    assert_eq!((c.posts, c.works, c.replays), (4, 2, 2));
}

#[tokio::test]
async fn another_body_under_a_key_is_a_mismatch_422_or_409() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = IdempotencyServer::start(payments(), clock.clone())
        .await
        .unwrap();
    assert_eq!(
        post(&server, Some("k"), r#"{"amount":1}"#).await.status,
        201
    );
    let other = post(&server, Some("k"), r#"{"amount":2}"#).await;
    assert_eq!(other.status, 422);
    assert_eq!(other.content_type, "application/problem+json");
    assert_eq!(other.json()["type"], "idempotency_mismatch");

    let conflict = payments().mismatch(MismatchAnswer::Conflict);
    let server = IdempotencyServer::start(conflict, clock).await.unwrap();
    assert_eq!(
        post(&server, Some("k"), r#"{"amount":1}"#).await.status,
        201
    );
    let other = post(&server, Some("k"), r#"{"amount":2}"#).await;
    assert_eq!(other.status, 409);
    assert_eq!(other.json()["type"], "idempotency_mismatch");
    assert_eq!(server.effects_made(), 1);
    assert_eq!(server.counters().mismatches, 1);
}

#[tokio::test]
async fn a_key_is_forgotten_after_the_retention_on_the_servers_clock() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = IdempotencyServer::start(payments().retention_ms(60_000), clock.clone())
        .await
        .unwrap();
    let first = post(&server, Some("k"), r#"{"amount":1}"#).await;
    clock.advance_ms(59_999);
    assert_eq!(lookup(&server, "k").await.body, first.body);
    assert_eq!(
        post(&server, Some("k"), r#"{"amount":1}"#).await.body,
        first.body
    );
    clock.advance_ms(1);
    // Aged 60 000 ms: forgotten. The lookup finds nothing and the same request works again.
    assert_eq!(lookup(&server, "k").await.status, 404);
    let second = post(&server, Some("k"), r#"{"amount":1}"#).await;
    assert_eq!(second.json()["charge"]["id"], "ch-000002");
    assert_eq!(
        server.effects()["k"],
        vec!["ch-000001".to_string(), "ch-000002".to_string()]
    );
}

#[tokio::test]
async fn lookup_by_key_answers_the_stored_success_or_is_switched_off() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = IdempotencyServer::start(payments(), clock.clone())
        .await
        .unwrap();
    let made = post(&server, Some("k"), r#"{"amount":7}"#).await;
    let found = lookup(&server, "k").await;
    assert_eq!((found.status, found.body), (200, made.body));
    assert_eq!(lookup(&server, "nope").await.status, 404);
    // A declined charge is stored (replayed) but holds no effect: nothing to find.
    post(&server, Some("d"), r#"{"amount":9999}"#).await;
    assert_eq!(lookup(&server, "d").await.status, 404);

    let stripe_like = IdempotencyServer::start(payments().without_lookup(), clock)
        .await
        .unwrap();
    post(&stripe_like, Some("k"), r#"{"amount":7}"#).await;
    let no = lookup(&stripe_like, "k").await;
    assert_eq!(no.status, 405);
    assert_eq!(no.json()["type"], "method_not_allowed");
}

#[tokio::test]
async fn faults_lose_the_answer_after_the_work_or_fail_before_it() {
    let clock = Arc::new(ManualClock::new(T0));
    let server = IdempotencyServer::start(payments(), clock).await.unwrap();
    server.lose_next_answers(1);
    let lost = post(&server, Some("k"), r#"{"amount":3}"#).await;
    assert_eq!(lost.status, 504);
    assert_eq!(lost.json()["type"], "upstream_response_lost");
    // The work was done: the retry under the key gets the stored answer, no second effect.
    let retry = post(&server, Some("k"), r#"{"amount":3}"#).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.json()["charge"]["id"], "ch-000001");
    assert_eq!(server.effects_made(), 1);

    server.fail_next_posts(1);
    let failed = post(&server, Some("k2"), r#"{"amount":3}"#).await;
    assert_eq!(failed.status, 503);
    // Not stored: the retry does the work.
    let retry = post(&server, Some("k2"), r#"{"amount":3}"#).await;
    assert_eq!(retry.status, 201);
    assert_eq!(server.effects_made(), 2);
    let c = server.counters();
    assert_eq!((c.lost, c.unavailable, c.works, c.replays), (1, 1, 2, 1));

    let missing = post(&server, None, r#"{"amount":3}"#).await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.json()["type"], "idempotency_key_missing");
}

#[tokio::test]
async fn ids_are_issued_in_the_format_the_integration_declares() {
    // A customs service's declaration numbers: two digits, `NL`, 14 capitals or digits.
    let format = gate::idempotency_key::IdFormat::new("[0-9]{2}NL[0-9A-Z]{14}", 18).unwrap();
    let config = ServerConfig::new("/charges", "mrn")
        .id_format(&format)
        .expect("a format the server can issue");
    let clock = Arc::new(ManualClock::new(T0));
    let server = IdempotencyServer::start(config, clock).await.unwrap();
    let mut ids = Vec::new();
    for key in ["k1", "k2", "k3"] {
        let got = post(&server, Some(key), r#"{"amount":5}"#).await;
        assert_eq!(got.status, 201);
        ids.push(got.json()["mrn"].as_str().unwrap().to_string());
    }
    assert_eq!(
        ids,
        [
            "00NL00000000000001",
            "00NL00000000000002",
            "00NL00000000000003"
        ]
    );
    for id in &ids {
        assert_eq!(format.defect(id), None, "{id} outside the declared format");
    }
    // A replay answers the same id; the effects are counted under their keys.
    let again = post(&server, Some("k2"), r#"{"amount":5}"#).await;
    assert_eq!(again.json()["mrn"], ids[1]);
    assert_eq!(server.effects()["k3"], vec![ids[2].clone()]);

    // A format too narrow for a server's ids is refused where the server is configured.
    let narrow = gate::idempotency_key::IdFormat::new("[0-9]{4}", 4).unwrap();
    assert!(ServerConfig::new("/charges", "id")
        .id_format(&narrow)
        .is_err());
}
