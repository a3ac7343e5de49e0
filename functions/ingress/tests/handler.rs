//! The ingress's answers, request by request, on a clock that stands still and a queue in
//! memory: a valid webhook queued byte for byte with its `webhook-id`, every way to fail with its
//! status and problem and nothing queued, a queue that fails answering `503`, a rotation with two
//! active secrets, and a secret added at the source picked up after a failed verification; hostile
//! events in module `hostile`. (The same against SQS and Secrets Manager on moto:
//! `tests/tests/ingress.rs`.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::encodings::Body;
use aws_lambda_events::event::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use gate::clock::{Clock, ManualClock};
use ingress::event::SignedWebhook;
use ingress::handler::MAX_BODY_BYTES;
use ingress::handler::{
    Ingress, NotificationQueue, QueueError, SecretSource, SecretSourceError, Secrets,
    SECRETS_REFRESH_INTERVAL_MS,
};
use ingress::problem::Reason;
use ingress::signature::{SecretSet, WebhookSecret};
use serde_json::{json, Value};

/// 2027-01-15T08:00:00Z.
const NOW_S: i64 = 1_800_000_000;

const BODY: &str = r#"{"notificationId":"PCS-CIS-20270114-000042","equipment_number":"CSQU3054383","preferred_window":{"start":"2027-01-16T08:00:00Z","end":"2027-01-16T10:00:00Z"},"terminal":"ECT-DELTA","pin":"RLS-104233"}"#;

#[derive(Default)]
struct MemoryQueue {
    sent: Mutex<Vec<(String, String)>>,
    down: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl NotificationQueue for MemoryQueue {
    async fn send(&self, body: &str, webhook_id: &str) -> Result<String, QueueError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(QueueError("service error ServiceUnavailable".into()));
        }
        let mut sent = self.sent.lock().unwrap();
        sent.push((body.to_string(), webhook_id.to_string()));
        Ok(format!("m-{}", sent.len()))
    }
}

fn secret(byte: u8) -> WebhookSecret {
    WebhookSecret::from_bytes(vec![byte; 32]).unwrap()
}

fn ingress(secrets: Secrets) -> (Ingress, Arc<MemoryQueue>, Arc<ManualClock>) {
    let queue = Arc::new(MemoryQueue::default());
    let clock = Arc::new(ManualClock::new(NOW_S * 1000 + 500));
    (
        Ingress {
            secrets,
            queue: queue.clone(),
            clock: clock.clone(),
        },
        queue,
        clock,
    )
}

fn event(value: Value) -> ApiGatewayV2httpRequest {
    serde_json::from_value(value).unwrap()
}

/// A delivery of `body` as `id`, signed with `secrets` at `ts`.
fn signed(secrets: &[WebhookSecret], id: &str, ts: i64, body: &str) -> Value {
    SignedWebhook::sign(secrets, id, ts, body).http_api_event(NOW_S * 1000, "req-1")
}

fn problem(response: &ApiGatewayV2httpResponse) -> Value {
    assert_eq!(
        response.headers["content-type"], "application/problem+json",
        "{response:?}"
    );
    match &response.body {
        Some(Body::Text(text)) => serde_json::from_str(text).unwrap(),
        other => panic!("no body: {other:?}"),
    }
}

#[tokio::test]
async fn a_valid_webhook_is_queued_byte_for_byte_with_its_id() {
    let s = secret(1);
    let (ingress, queue, _) = ingress(Secrets::fixed(SecretSet::new(vec![s.clone()]).unwrap()));
    let handled = ingress
        .handle(&event(signed(
            std::slice::from_ref(&s),
            "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
            NOW_S,
            BODY,
        )))
        .await;
    assert_eq!(handled.status(), 202);
    assert_eq!(handled.outcome(), "accepted");
    assert_eq!(handled.secret_index, Some(0));
    assert_eq!(
        *queue.sent.lock().unwrap(),
        vec![(
            BODY.to_string(),
            "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W".to_string()
        )]
    );
    let Some(Body::Text(text)) = &handled.response.body else {
        panic!("no body")
    };
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json!({"queued": true, "message_id": "m-1"})
    );
    assert_eq!(handled.response.headers["content-type"], "application/json");

    // Whitespace, key order and escapes are the sender's: nothing is re-serialised. And a body
    // API Gateway passed base64-encoded is queued as the bytes the sender signed.
    let odd = "{ \"b\" : 1,\n\"a\":\"\\u00e9\u{e9}\" }";
    let mut value = signed(std::slice::from_ref(&s), "msg_2", NOW_S, odd);
    assert_eq!(ingress.handle(&event(value.clone())).await.status(), 202);
    value["body"] = json!(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        odd.as_bytes()
    ));
    value["isBase64Encoded"] = json!(true);
    assert_eq!(ingress.handle(&event(value)).await.status(), 202);
    let sent = queue.sent.lock().unwrap();
    assert_eq!(sent[1].0, odd);
    assert_eq!(sent[2].0, odd);
}

/// Each way to fail: its status, its reason in the problem document, and nothing queued.
#[tokio::test]
async fn every_way_to_fail_is_answered_with_its_status_and_nothing_is_queued() {
    let (s, wrong) = (secret(1), secret(2));
    let (ingress, queue, _) = ingress(Secrets::fixed(SecretSet::new(vec![s.clone()]).unwrap()));
    let good = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
    let without = |header: &str| {
        let mut v = good.clone();
        v["headers"].as_object_mut().unwrap().remove(header);
        v
    };
    let with = |pointer: &str, value: Value| {
        let mut v = good.clone();
        *v.pointer_mut(pointer).unwrap() = value;
        v
    };
    let oversized = {
        let pad = MAX_BODY_BYTES + 1 - BODY.len();
        let body = format!("{}{}", BODY, " ".repeat(pad));
        assert_eq!(body.len(), MAX_BODY_BYTES + 1);
        signed(std::slice::from_ref(&s), "msg_1", NOW_S, &body)
    };
    let at_limit = {
        let body = format!("{}{}", BODY, " ".repeat(MAX_BODY_BYTES - BODY.len()));
        signed(std::slice::from_ref(&s), "msg_limit", NOW_S, &body)
    };
    let signature_of_other_id = {
        // A genuine signature, replayed under another webhook-id.
        let mut v = signed(std::slice::from_ref(&s), "msg_other", NOW_S, BODY);
        v["headers"]["webhook-id"] = json!("msg_1");
        v
    };
    let tampered = {
        let mut v = good.clone();
        v["body"] = json!(BODY.replace("RLS-104233", "RLS-104234"));
        v
    };
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "wrong secret",
            signed(std::slice::from_ref(&wrong), "msg_1", NOW_S, BODY),
            401,
            "invalid_signature",
        ),
        ("tampered body", tampered, 401, "invalid_signature"),
        (
            "signature for another webhook-id",
            signature_of_other_id,
            401,
            "invalid_signature",
        ),
        (
            "no webhook-signature",
            without("webhook-signature"),
            401,
            "missing_signature_headers",
        ),
        (
            "no webhook-id",
            without("webhook-id"),
            401,
            "missing_signature_headers",
        ),
        (
            "no webhook-timestamp",
            without("webhook-timestamp"),
            401,
            "missing_signature_headers",
        ),
        (
            "no signature headers",
            {
                let mut v = good.clone();
                for h in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
                    v["headers"].as_object_mut().unwrap().remove(h);
                }
                v
            },
            401,
            "missing_signature_headers",
        ),
        (
            "6 minutes old",
            signed(std::slice::from_ref(&s), "msg_1", NOW_S - 360, BODY),
            400,
            "stale_timestamp",
        ),
        (
            "6 minutes ahead",
            signed(std::slice::from_ref(&s), "msg_1", NOW_S + 360, BODY),
            400,
            "stale_timestamp",
        ),
        (
            "timestamp in ms",
            with(
                "/headers/webhook-timestamp",
                json!((NOW_S * 1000).to_string()),
            ),
            400,
            "invalid_timestamp",
        ),
        (
            "timestamp not a number",
            with("/headers/webhook-timestamp", json!("yesterday")),
            400,
            "invalid_timestamp",
        ),
        (
            "webhook-id with a space",
            with("/headers/webhook-id", json!("msg 1")),
            400,
            "invalid_webhook_id",
        ),
        ("oversized body", oversized, 413, "body_too_large"),
        (
            "empty body",
            signed(std::slice::from_ref(&s), "msg_1", NOW_S, ""),
            400,
            "empty_body",
        ),
        (
            "no body at all",
            {
                let mut v = good.clone();
                v.as_object_mut().unwrap().remove("body");
                v
            },
            400,
            "empty_body",
        ),
        (
            "text/plain",
            with("/headers/content-type", json!("text/plain")),
            415,
            "unsupported_media_type",
        ),
        (
            "form",
            with(
                "/headers/content-type",
                json!("application/x-www-form-urlencoded"),
            ),
            415,
            "unsupported_media_type",
        ),
        (
            "no content type",
            without("content-type"),
            415,
            "unsupported_media_type",
        ),
        (
            "latin-1 JSON",
            with(
                "/headers/content-type",
                json!("application/json; charset=iso-8859-1"),
            ),
            415,
            "unsupported_media_type",
        ),
        (
            "base64 that does not decode",
            {
                let mut v = good.clone();
                v["isBase64Encoded"] = json!(true);
                v["body"] = json!("not base64!");
                v
            },
            400,
            "invalid_body",
        ),
        (
            "signed control character",
            signed(
                std::slice::from_ref(&s),
                "msg_1",
                NOW_S,
                "{\"a\":\"\u{1}\"}",
            ),
            400,
            "invalid_body",
        ),
    ];
    for (name, value, status, reason) in cases {
        let handled = ingress.handle(&event(value)).await;
        assert_eq!(handled.status(), status, "{name}");
        assert_eq!(handled.outcome(), reason, "{name}");
        let p = problem(&handled.response);
        assert_eq!(p["status"], status, "{name}");
        assert_eq!(p["reason"], reason, "{name}");
        assert_eq!(
            p["type"],
            format!(
                "tag:exactly-once-gate,2026:webhooks/{}",
                reason.replace('_', "-")
            ),
            "{name}"
        );
        assert!(!p["detail"].as_str().unwrap().is_empty(), "{name}");
        assert!(
            !p.to_string().contains("RLS-10423"),
            "{name}: the problem echoes the body: {p}"
        );
        assert!(
            queue.sent.lock().unwrap().is_empty(),
            "{name}: something was queued"
        );
    }
    // The limit itself is allowed.
    assert_eq!(ingress.handle(&event(at_limit)).await.status(), 202);
}

#[tokio::test]
async fn a_queue_that_fails_is_a_503_the_sender_retries() {
    let s = secret(1);
    let (ingress, queue, _) = ingress(Secrets::fixed(SecretSet::new(vec![s.clone()]).unwrap()));
    queue.down.store(true, Ordering::SeqCst);
    let request = event(signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY));
    let handled = ingress.handle(&request).await;
    assert_eq!(handled.status(), 503);
    assert_eq!(handled.rejected, Some(Reason::QueueUnavailable));
    assert_eq!(problem(&handled.response)["reason"], "queue_unavailable");
    // The retry, once the queue is back, is queued.
    queue.down.store(false, Ordering::SeqCst);
    assert_eq!(ingress.handle(&request).await.status(), 202);
    assert_eq!(queue.sent.lock().unwrap().len(), 1);
}

/// A rotation without downtime: the receiver lists the old and the new secret; the sender signs
/// with the old, then with both, then with the new only; every delivery is accepted, and the
/// secret that matched shows how far the sender has moved. Once the old secret is removed, a
/// delivery signed with it alone is refused.
#[tokio::test]
async fn a_rotation_with_two_active_secrets() {
    let (old, new) = (secret(1), secret(2));
    let (ingress, queue, _) = ingress(Secrets::fixed(
        SecretSet::new(vec![old.clone(), new.clone()]).unwrap(),
    ));
    for (signers, id, index) in [
        (vec![old.clone()], "msg_a", 0),
        (vec![old.clone(), new.clone()], "msg_b", 0),
        (vec![new.clone(), old.clone()], "msg_c", 0),
        (vec![new.clone()], "msg_d", 1),
    ] {
        let handled = ingress
            .handle(&event(signed(&signers, id, NOW_S, BODY)))
            .await;
        assert_eq!(handled.status(), 202, "{id}");
        assert_eq!(handled.secret_index, Some(index), "{id}");
    }
    assert_eq!(queue.sent.lock().unwrap().len(), 4);
    let (after, _, _) = self::ingress(Secrets::fixed(SecretSet::new(vec![new.clone()]).unwrap()));
    assert_eq!(
        after
            .handle(&event(signed(&[old], "msg_e", NOW_S, BODY)))
            .await
            .status(),
        401
    );
}

/// A source whose secrets can be changed, counting its reads.
struct ChangingSource {
    set: Mutex<SecretSet>,
    reads: AtomicUsize,
}

#[async_trait]
impl SecretSource for ChangingSource {
    async fn fetch(&self) -> Result<SecretSet, SecretSourceError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(self.set.lock().unwrap().clone())
    }
}

/// A secret added at the source (Secrets Manager) is used without a new environment: after a
/// signature no known secret matches, the secrets are read again, at most once a minute.
#[tokio::test]
async fn a_secret_added_at_the_source_is_picked_up_within_a_minute() {
    let (old, new) = (secret(1), secret(2));
    let source = Arc::new(ChangingSource {
        set: Mutex::new(SecretSet::new(vec![old.clone()]).unwrap()),
        reads: AtomicUsize::new(0),
    });
    let (ingress, queue, clock) = ingress(Secrets::refreshable(
        SecretSet::new(vec![old.clone()]).unwrap(),
        NOW_S * 1000,
        source.clone(),
    ));
    *source.set.lock().unwrap() = SecretSet::new(vec![old.clone(), new.clone()]).unwrap();
    // Within the minute: not read again, refused.
    let first = ingress
        .handle(&event(signed(
            std::slice::from_ref(&new),
            "msg_a",
            NOW_S,
            BODY,
        )))
        .await;
    assert_eq!(first.status(), 401);
    assert_eq!(source.reads.load(Ordering::SeqCst), 0);
    // A minute later: read again once, accepted with the new secret (index 1).
    clock.set_ms(NOW_S * 1000 + SECRETS_REFRESH_INTERVAL_MS);
    let now_s = clock.now_ms() / 1000;
    let later = ingress
        .handle(&event(signed(
            std::slice::from_ref(&new),
            "msg_a",
            now_s,
            BODY,
        )))
        .await;
    assert_eq!(later.status(), 202);
    assert_eq!(later.secret_index, Some(1));
    assert_eq!(source.reads.load(Ordering::SeqCst), 1);
    // A valid request never reads; a burst of bad ones reads at most once a minute.
    for _ in 0..20 {
        ingress
            .handle(&event(signed(&[secret(9)], "msg_x", now_s, BODY)))
            .await;
    }
    assert_eq!(source.reads.load(Ordering::SeqCst), 1);
    assert_eq!(queue.sent.lock().unwrap().len(), 1);
}

/// A signed webhook of 300 KB (SQS would carry it, the consumer would reject it for its size):
/// `413` with its problem, through the event path the function runs (`respond_event`, the event
/// as JSON), never a `500`; nothing queued. The limit is the consumer's, so the ingress queues
/// exactly what the consumer accepts.
#[tokio::test]
async fn a_300_kb_body_is_413_with_a_problem_and_nothing_is_queued() {
    let s = secret(1);
    let (ingress, queue, _) = ingress(Secrets::fixed(SecretSet::new(vec![s.clone()]).unwrap()));
    let body = format!("{}{}", BODY, " ".repeat(300_000 - BODY.len()));
    assert_eq!(body.len(), 300_000);
    let response = ingress
        .respond_event(signed(std::slice::from_ref(&s), "msg_300k", NOW_S, &body))
        .await;
    assert_eq!(response.status_code, 413);
    let p = problem(&response);
    assert_eq!(p["reason"], "body_too_large");
    assert_eq!(p["status"], 413);
    assert_eq!(
        p["detail"],
        format!("the body has 300000 bytes; the limit is {MAX_BODY_BYTES}")
    );
    assert!(queue.sent.lock().unwrap().is_empty());
}

/// A header the typed deserialiser refuses (a control character) is a `400` `invalid_header`
/// through the same path, naming the header and quoting nothing; nothing queued.
#[tokio::test]
async fn a_control_character_in_a_header_is_400_invalid_header() {
    let s = secret(1);
    let (ingress, queue, _) = ingress(Secrets::fixed(SecretSet::new(vec![s.clone()]).unwrap()));
    let mut e = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
    e["headers"]["webhook-signature"] = json!("v1,SECRET\u{1}");
    let response = ingress.respond_event(e).await;
    assert_eq!(response.status_code, 400);
    let p = problem(&response);
    assert_eq!(p["reason"], Reason::InvalidHeader.code());
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail
            .starts_with("the value of header `webhook-signature` is not a valid HTTP field value"),
        "{detail}"
    );
    assert!(!detail.contains("SECRET"));
    assert!(queue.sent.lock().unwrap().is_empty());
}

#[path = "handler/hostile.rs"]
mod hostile;
