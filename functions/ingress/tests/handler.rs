//! The ingress's answers, request by request, on a clock that stands still and a queue in
//! memory: a valid webhook queued byte for byte with its `webhook-id`, every way to fail with its
//! status and problem and nothing queued, a queue that fails answering `503`, a rotation with two
//! active secrets, and a secret added at the source picked up after a failed verification. (The
//! same against SQS and Secrets Manager on moto: `tests/tests/ingress.rs`.)
//!
//! (Over 600 lines: every answer of the ingress, hostile events included (`mod hostile`), on the
//! same fixtures: one concern.)

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

/// Hostile events (issue 23, items 6 and 9): every one answered with a problem, never a panic
/// (a `500` the sender retries for ever), and never queued unless the body is the sender's and
/// within the limit.
mod hostile {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use ingress::read::MAX_HEADER_FIELDS;

    fn fixture() -> (Ingress, Arc<MemoryQueue>, WebhookSecret) {
        let s = secret(1);
        let (ingress, queue, _) = ingress(Secrets::fixed(SecretSet::new(vec![s.clone()]).unwrap()));
        (ingress, queue, s)
    }

    /// `BODY` padded with spaces to `len` bytes (still the same JSON).
    fn padded(len: usize) -> String {
        format!("{}{}", BODY, " ".repeat(len - BODY.len()))
    }

    /// A body of exactly the limit is queued; one byte more is `413`.
    #[tokio::test]
    async fn a_body_of_exactly_the_limit_is_queued_and_one_more_byte_is_413() {
        let (ingress, queue, s) = fixture();
        let ok = padded(MAX_BODY_BYTES);
        let r = ingress
            .respond_event(signed(std::slice::from_ref(&s), "msg_at", NOW_S, &ok))
            .await;
        assert_eq!(r.status_code, 202, "{r:?}");
        let over = padded(MAX_BODY_BYTES + 1);
        let r = ingress
            .respond_event(signed(std::slice::from_ref(&s), "msg_over", NOW_S, &over))
            .await;
        assert_eq!(r.status_code, 413);
        assert_eq!(problem(&r)["reason"], "body_too_large");
        assert_eq!(queue.sent.lock().unwrap().len(), 1);
    }

    /// The limit is on the decoded body: a base64 body of the limit's size decoded is queued,
    /// one that decodes to one byte more is `413` (its base64 text is larger in both cases).
    #[tokio::test]
    async fn a_base64_body_is_measured_after_decoding() {
        let (ingress, queue, s) = fixture();
        for (len, status) in [(MAX_BODY_BYTES, 202), (MAX_BODY_BYTES + 1, 413)] {
            let body = padded(len);
            let mut e = signed(std::slice::from_ref(&s), "msg_b64", NOW_S, &body);
            e["body"] = json!(STANDARD.encode(body.as_bytes()));
            e["isBase64Encoded"] = json!(true);
            let r = ingress.respond_event(e).await;
            assert_eq!(r.status_code, status, "{len}: {r:?}");
        }
        assert_eq!(queue.sent.lock().unwrap().len(), 1);
        assert_eq!(queue.sent.lock().unwrap()[0].0.len(), MAX_BODY_BYTES);
    }

    /// A base64 body that is not UTF-8: signed over its bytes, `400` `invalid_body` (SQS
    /// carries text only); unsigned, `401`. Never queued, never a `500`.
    #[tokio::test]
    async fn a_base64_body_that_is_not_utf8_is_400_invalid_body() {
        let (ingress, queue, s) = fixture();
        let bytes: Vec<u8> = b"{\"a\":\"\xff\xfe\"}".to_vec();
        let secrets = [s];
        let mut e = signed(&secrets, "msg_bin", NOW_S, "{}");
        e["body"] = json!(STANDARD.encode(&bytes));
        e["isBase64Encoded"] = json!(true);
        let r = ingress.respond_event(e.clone()).await;
        assert_eq!(r.status_code, 401, "{r:?}");
        assert_eq!(problem(&r)["reason"], "invalid_signature");
        e["headers"]["webhook-signature"] = json!(ingress::signature::signature_header(
            &secrets, "msg_bin", NOW_S, &bytes
        ));
        let r = ingress.respond_event(e).await;
        assert_eq!(r.status_code, 400, "{r:?}");
        assert_eq!(problem(&r)["reason"], "invalid_body");
        assert!(queue.sent.lock().unwrap().is_empty());
    }

    /// DEL and a control character as the first or the last byte of any header's value, and in
    /// `multiValueHeaders`: `400` `invalid_header`, the value never quoted.
    #[tokio::test]
    async fn a_control_character_at_either_end_of_a_value_is_400() {
        let (ingress, queue, s) = fixture();
        for bad in [
            "\u{7f}SECRET",
            "SECRET\u{7f}",
            "\u{0}SECRET",
            "SECRET\r",
            "\nSECRET",
        ] {
            for header in ["webhook-id", "webhook-timestamp", "content-type", "x-other"] {
                let mut e = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
                e["headers"][header] = json!(bad);
                let r = ingress.respond_event(e).await;
                assert_eq!(r.status_code, 400, "{header} {bad:?}");
                let p = problem(&r);
                assert_eq!(p["reason"], "invalid_header");
                assert!(!p.to_string().contains("SECRET"), "{p}");
            }
            let mut e = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
            e["multiValueHeaders"] = json!({"x-other": ["fine", bad]});
            let r = ingress.respond_event(e).await;
            assert_eq!(r.status_code, 400, "multi {bad:?}");
            assert!(!problem(&r).to_string().contains("SECRET"));
        }
        assert!(queue.sent.lock().unwrap().is_empty());
    }

    /// Non-ASCII text (bytes >= 0x80 in UTF-8) is a valid field value: the signature header
    /// holding it is not a signature (`401`), another header holding it does not matter (`202`).
    #[tokio::test]
    async fn non_ascii_header_values_are_read_not_refused() {
        let (ingress, queue, s) = fixture();
        let mut e = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
        e["headers"]["webhook-signature"] = json!("v1,ü");
        assert_eq!(ingress.respond_event(e).await.status_code, 401);
        let mut e = signed(std::slice::from_ref(&s), "msg_2", NOW_S, BODY);
        e["headers"]["x-other"] = json!("grüße");
        assert_eq!(ingress.respond_event(e).await.status_code, 202);
        assert_eq!(queue.sent.lock().unwrap().len(), 1);
    }

    /// A header name that is not an HTTP token, and a value of another type than text:
    /// `400` `invalid_header`.
    #[tokio::test]
    async fn bad_header_names_and_value_types_are_400() {
        let (ingress, _, s) = fixture();
        for (name, value) in [
            ("bad name", json!("x")),
            ("bad\u{1}name", json!("x")),
            ("", json!("x")),
            ("x-n", json!(5)),
            ("x-n", json!(null)),
            ("x-n", json!({"a": "b"})),
        ] {
            let mut e = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
            e["headers"][name] = value;
            let r = ingress.respond_event(e).await;
            assert_eq!(r.status_code, 400, "{name:?}");
            assert_eq!(problem(&r)["reason"], "invalid_header");
        }
    }

    /// Header fields up to `MAX_HEADER_FIELDS` are read; one more, or a great many (past what
    /// `http::HeaderMap` holds, where the typed deserialiser panics), is `400` `invalid_header`,
    /// never a panic.
    #[tokio::test]
    async fn a_huge_header_count_is_400_not_a_panic() {
        let (ingress, queue, s) = fixture();
        for (total, status) in [
            (MAX_HEADER_FIELDS, 202),
            (MAX_HEADER_FIELDS + 1, 400),
            (40_000, 400),
        ] {
            let mut e = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
            let present = e["headers"].as_object().unwrap().len();
            for i in present..total {
                e["headers"][format!("x-h{i}")] = json!("v");
            }
            let r = ingress.respond_event(e).await;
            assert_eq!(r.status_code, status, "{total}: {r:?}");
            if status == 400 {
                assert_eq!(problem(&r)["reason"], "invalid_header");
            }
        }
        assert_eq!(queue.sent.lock().unwrap().len(), 1);
    }

    /// Events of another shape: an API Gateway REST API (payload 1.0) event, an event whose
    /// `body` is not a string, whose `requestContext.http.method` is not a method, and one that
    /// is not an object: each a `4xx` problem, never a panic, nothing queued.
    #[tokio::test]
    async fn events_of_the_wrong_shape_are_4xx() {
        let (ingress, queue, s) = fixture();
        let v2 = signed(std::slice::from_ref(&s), "msg_1", NOW_S, BODY);
        let v1 = json!({
            "resource": "/webhooks", "path": "/webhooks", "httpMethod": "POST",
            "headers": v2["headers"].clone(),
            "multiValueHeaders": {"webhook-id": ["msg_1", "msg_2"]},
            "requestContext": {"requestId": "r-1", "httpMethod": "POST", "stage": "prod"},
            "body": 7, "isBase64Encoded": false
        });
        let mut body_not_string = v2.clone();
        body_not_string["body"] = json!({"a": 1});
        let mut bad_method = v2.clone();
        bad_method["requestContext"]["http"]["method"] = json!("PO ST");
        for e in [v1, body_not_string, bad_method, json!([1, 2]), json!(null)] {
            let r = ingress.respond_event(e.clone()).await;
            assert_eq!(r.status_code, 400, "{e}: {r:?}");
            assert_eq!(problem(&r)["reason"], "invalid_request", "{e}");
        }
        assert!(queue.sent.lock().unwrap().is_empty());
    }
}
