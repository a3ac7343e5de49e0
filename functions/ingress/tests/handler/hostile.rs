//! Hostile events: every one answered with a problem, never a panic (a `500` the sender
//! retries for ever), and never queued unless the body is the sender's and within the limit.

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
