//! One test per row of the tables in `classify.rs`, with the values the draft
//! (`draft-ietf-httpapi-idempotency-key-header-07`) and the server simulator give, written here.

use super::*;
use crate::idempotency_key::answer_digest;

const JOB: JsonIdAt = JsonIdAt {
    server: "job server",
    effect_at: "/id",
    found_at: "/job/id",
    declined: &[],
};

/// The simulator's problem documents (`sim/src/server.rs`), byte for byte in shape.
const MISMATCH: &[u8] = br#"{"type":"idempotency_mismatch","title":"Conflict","status":409,"detail":"this Idempotency-Key was already used with a different request"}"#;
const IN_FLIGHT: &[u8] = br#"{"type":"idempotency_key_in_flight","title":"Conflict","status":409,"detail":"a request with this Idempotency-Key is still being processed; retry later"}"#;
const UNAVAILABLE: &[u8] = br#"{"type":"service_unavailable","title":"Service Unavailable","status":503,"detail":"the server failed before processing the request; it was not recorded"}"#;
const LOST: &[u8] = br#"{"type":"upstream_response_lost","title":"Gateway Timeout","status":504,"detail":"upstream response lost"}"#;
const INVALID: &[u8] = br#"{"type":"invalid_request","title":"Bad Request","status":400,"detail":"pin must not be empty"}"#;

fn call(status: u16, body: &[u8]) -> CallOutcome {
    classify_call(&Answer::new(status, body), &JOB)
}

fn class(status: u16, body: &[u8]) -> CallClass {
    call_rule(status, problem_type(body).as_deref()).class
}

fn effect(id: &str) -> Effect {
    Effect {
        effect_id: id.into(),
        subject: None,
    }
}

#[test]
fn row_2xx_with_a_usable_id_is_the_effect() {
    for status in [200, 201, 203] {
        assert_eq!(
            call(status, br#"{"id":"J-1"}"#),
            CallOutcome::Done(effect("J-1"))
        );
    }
}

#[test]
fn row_2xx_without_a_usable_id_is_transient() {
    for (body, defect) in [
        (&b"<html>made</html>"[..], "is not JSON"),
        (br#"{"status":"made"}"#, "has no id"),
        (br#"{"id":null}"#, "has no id"),
        (br#"{"id":42}"#, "has an id that is not a string"),
        (br#"{"id":"  "}"#, "has an empty id"),
    ] {
        let CallOutcome::Transient(why) = call(201, body) else {
            panic!("{body:?} must be transient");
        };
        assert!(why.summary().contains(defect), "{why}");
        assert!(why.summary().contains("the effect may exist"), "{why}");
    }
    // 204 No Content: no id to read.
    assert!(matches!(call(204, b""), CallOutcome::Transient(_)));
}

/// A `2xx` whose id the gate refuses to keep: outside the declared format (the strict
/// default here), over the core's bounds, not printable ASCII. The effect exists and the server
/// replays the same id: refused at once, the id named only by its keyed digest.
#[test]
fn row_2xx_with_a_refused_id_is_refused() {
    let long = "J".repeat(MAX_EFFECT_ID_CHARS + 1);
    for (id, why) in [
        (
            "SLOT-UmxzLTczMjAzOQ==",
            "is outside the format the server declares",
        ),
        (
            "RLS&minus;732039",
            "is outside the format the server declares",
        ),
        (
            "SLOT-&#82&#76&#83",
            "is outside the format the server declares",
        ),
        ("S 1", "is outside the format the server declares"),
        (&"J".repeat(65), "is outside the format the server declares"),
        (long.as_str(), "is longer than the gate keeps"),
        (
            "J-1\n{\"level\":\"ERROR\"}",
            "holds a byte outside printable ASCII",
        ),
        ("ＲＬＳ-7", "holds a byte outside printable ASCII"),
    ] {
        let body = serde_json::json!({ "id": id }).to_string();
        let CallOutcome::EffectRefused(detail) = call(201, body.as_bytes()) else {
            panic!("{id:?} must be refused");
        };
        assert_eq!(
            detail.summary(),
            format!(
                "job server answered 201 (no content type, {} bytes, keyed SHA-256 {}), and its \
                 effect id {why} (keyed SHA-256 of the id {}): the effect exists under the key, \
                 but the gate never keeps that id",
                body.len(),
                answer_digest(body.as_bytes()),
                answer_digest(id.as_bytes())
            )
        );
        let found = serde_json::json!({ "job": { "id": id } }).to_string();
        let LookupOutcome::EffectRefused(detail) =
            classify_lookup(&Answer::new(200, found.as_bytes()), &JOB)
        else {
            panic!("{id:?} must be refused on a lookup");
        };
        assert!(detail
            .summary()
            .starts_with("lookup: job server answered 200 "));
        assert!(detail.summary().contains(why), "{detail}");
    }
}

/// The second line: an id in the format that quotes a secret, as the integration says, is
/// refused alike; a declared format replaces the default.
#[test]
fn an_integration_declares_its_format_and_its_secrets() {
    struct Declared(IdFormat);
    impl AnswerReader for Declared {
        fn effect(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
            JOB.effect(answer)
        }
        fn id_format(&self) -> &IdFormat {
            &self.0
        }
        fn id_quotes_secret(&self, id: &str) -> bool {
            id.contains("7731")
        }
    }
    let reader = Declared(IdFormat::new("J-[0-9]+", 10).expect("a format"));
    let answer = |id: &str| serde_json::json!({ "id": id }).to_string();
    assert_eq!(
        classify_call(&Answer::new(201, answer("J-12").as_bytes()), &reader),
        CallOutcome::Done(effect("J-12"))
    );
    for (id, why) in [
        ("J-7731", "quotes a secret of the request"),
        ("K-12", "is outside the format the server declares"),
        ("J-123456789", "is outside the format the server declares"),
    ] {
        let CallOutcome::EffectRefused(d) =
            classify_call(&Answer::new(201, answer(id).as_bytes()), &reader)
        else {
            panic!("{id} must be refused");
        };
        assert!(d.summary().contains(why), "{d}");
        assert!(!d.summary().contains(id), "{d}");
    }
}

/// 202: the server took the request under the key and replays the same 202 to every retry: an id
/// in it is the accepted effect, not a reason to retry until the retention ends.
#[test]
fn row_202_is_read_as_any_2xx() {
    assert_eq!(class(202, b""), CallClass::Effect);
    assert_eq!(
        call(202, br#"{"id":"J-7"}"#),
        CallOutcome::Done(effect("J-7"))
    );
    assert!(matches!(call(202, b"{}"), CallOutcome::Transient(_)));
    // An integration that wants only finished effects refuses it in its reader: transient.
    struct DoneOnly;
    impl AnswerReader for DoneOnly {
        fn effect(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
            if answer.status == 202 {
                return Err("was accepted, not done");
            }
            JOB.effect(answer)
        }
    }
    let CallOutcome::Transient(why) =
        classify_call(&Answer::new(202, br#"{"id":"J-7"}"#), &DoneOnly)
    else {
        panic!("refused 202");
    };
    assert!(why.summary().contains("was accepted, not done"), "{why}");
}

#[test]
fn row_1xx_and_statuses_outside_http_are_transient() {
    for status in [0, 99, 100, 101, 103, 199, 600, 999, u16::MAX] {
        assert_eq!(class(status, b""), CallClass::Transient, "{status}");
    }
}

/// 3xx: never followed, never permanent (a 303 may answer a completed request).
#[test]
fn row_3xx_is_transient() {
    for status in [300, 301, 302, 303, 304, 307, 308, 399] {
        let CallOutcome::Transient(why) = call(status, b"") else {
            panic!("{status} must be transient");
        };
        assert!(
            why.summary()
                .starts_with(&format!("job server answered {status} ")),
            "{why}"
        );
        assert!(why.summary().contains("redirect"), "{why}");
    }
}

#[test]
fn row_401_and_407_are_transient() {
    for status in [401, 407] {
        let CallOutcome::Transient(why) = call(status, b"") else {
            panic!("{status} must be transient");
        };
        assert!(why.summary().contains("credentials were refused"), "{why}");
    }
}

#[test]
fn row_408_421_423_425_429_are_transient() {
    for status in [408, 421, 423, 425, 429] {
        assert!(
            matches!(call(status, b""), CallOutcome::Transient(_)),
            "{status}"
        );
    }
}

#[test]
fn row_409_mismatch_by_problem_type() {
    let CallOutcome::KeyMismatch(why) = call(409, MISMATCH) else {
        panic!("the simulator's 409 idempotency_mismatch is a mismatch");
    };
    assert!(why.summary().contains("another request"), "{why}");
    for kind in [
        "idempotency_mismatch",
        "https://errors.example/problems/idempotency_mismatch",
        "https://errors.example/idempotency_mismatch?lang=en",
        "https://errors.example/p#x/idempotency_mismatch",
        "tag:example.com,2026:problems/idempotency_mismatch",
    ] {
        let body = serde_json::json!({ "type": kind }).to_string();
        let expected = if kind.contains('#') {
            // The fragment is removed first: the last segment is `p`.
            CallClass::KeyInFlight
        } else {
            CallClass::KeyMismatch
        };
        assert_eq!(class(409, body.as_bytes()), expected, "{kind}");
    }
}

/// 409 without the mismatch type is the draft's "still being processed": `contains` or
/// `ends_with` would take these for a mismatch; the last segment compared exactly does not.
#[test]
fn row_409_otherwise_is_in_flight() {
    assert_eq!(call(409, IN_FLIGHT), CallOutcome::KeyInFlight);
    assert_eq!(call(409, b""), CallOutcome::KeyInFlight);
    assert_eq!(call(409, b"not json"), CallOutcome::KeyInFlight);
    for kind in [
        "not_idempotency_mismatch",
        "https://x.example/idempotency_mismatch/help",
        "https://x.example/idempotency_mismatch_v2",
        "IDEMPOTENCY_MISMATCH",
        "about:blank",
    ] {
        let body = serde_json::json!({ "type": kind }).to_string();
        assert_eq!(
            call(409, body.as_bytes()),
            CallOutcome::KeyInFlight,
            "{kind}"
        );
    }
    // A `type` that is not a string is no problem type.
    assert_eq!(
        call(409, br#"{"type":["idempotency_mismatch"]}"#),
        CallOutcome::KeyInFlight
    );
}

#[test]
fn row_422_is_a_mismatch_per_the_draft() {
    for body in [&b""[..], br#"{"type":"https://developer.example.com/idempotency/docs","title":"Idempotency-Key is already used"}"#] {
        assert!(matches!(call(422, body), CallOutcome::KeyMismatch(_)));
    }
}

#[test]
fn row_other_4xx_is_permanent() {
    for status in [
        400, 402, 403, 404, 405, 406, 410, 411, 412, 413, 414, 415, 416, 417, 418, 420, 424, 426,
        428, 430, 431, 451, 499,
    ] {
        let CallOutcome::Permanent { status: s, detail } = call(status, INVALID) else {
            panic!("{status} must be permanent");
        };
        assert_eq!(s, status);
        assert!(detail.summary().contains("refused the request"), "{detail}");
    }
}

/// A reader may name a refusal of its server's business (a declined card): that permanent status
/// alone becomes `Declined` with the same detail; a status of another class stays what it is.
#[test]
fn row_a_declined_status_is_declined() {
    const PAY: JsonIdAt = JsonIdAt::new("payments API", "/id").declining(&[402, 409, 503]);
    let CallOutcome::Declined { status, detail } = classify_call(&Answer::new(402, INVALID), &PAY)
    else {
        panic!("402 must be declined");
    };
    assert_eq!(status, 402);
    assert!(
        detail.summary().starts_with("payments API answered 402"),
        "{detail}"
    );
    assert!(matches!(
        classify_call(&Answer::new(400, INVALID), &PAY),
        CallOutcome::Permanent { status: 400, .. }
    ));
    assert_eq!(
        classify_call(&Answer::new(409, IN_FLIGHT), &PAY),
        CallOutcome::KeyInFlight
    );
    assert!(matches!(
        classify_call(&Answer::new(503, UNAVAILABLE), &PAY),
        CallOutcome::Transient(_)
    ));
}

#[test]
fn row_5xx_is_transient() {
    for (status, body) in [
        (500, &b""[..]),
        (501, b""),
        (502, b""),
        (503, UNAVAILABLE),
        (504, LOST),
        (599, b""),
    ] {
        assert!(
            matches!(call(status, body), CallOutcome::Transient(_)),
            "{status}"
        );
    }
}

#[test]
fn row_no_answer_is_transient() {
    for (failure, words) in [
        (RequestFailure::Timeout, "timeout"),
        (RequestFailure::Connect, "connect error"),
        (
            RequestFailure::Body { status: 201 },
            "answer 201 unreadable",
        ),
        (RequestFailure::Other, "request error"),
    ] {
        assert_eq!(failure_rule(failure).class, CallClass::Transient);
        let CallOutcome::Transient(why) = classify_call_failure(failure, &JOB) else {
            panic!("{failure:?}");
        };
        assert!(
            why.summary().starts_with("call to job server failed: "),
            "{why}"
        );
        assert!(why.summary().contains(words), "{why}");
        let LookupOutcome::Transient(why) = classify_lookup_failure(failure, &JOB) else {
            panic!("{failure:?}");
        };
        assert!(why.summary().contains(words), "{why}");
    }
}

/// Every status is in a row; the classes of the statuses by class of status, once more as a
/// census: 200 effect rows, 3 mismatch-capable, etc.
#[test]
fn every_status_has_a_row() {
    let mut permanent = 0;
    for status in 0..=u16::MAX {
        let rule = call_rule(status, None);
        assert!(!rule.why.is_empty());
        match rule.class {
            CallClass::Effect => assert!((200..=299).contains(&status)),
            CallClass::Permanent => {
                assert!((400..=499).contains(&status));
                permanent += 1;
            }
            CallClass::KeyMismatch => assert_eq!(status, 422),
            CallClass::KeyInFlight => assert_eq!(status, 409),
            CallClass::Transient => {}
        }
        assert!(!lookup_rule(status).why.is_empty());
    }
    // 100 4xx statuses less 401, 407, 408, 409, 421, 422, 423, 425, 429.
    assert_eq!(permanent, 91);
}

#[test]
fn lookup_row_200_with_a_usable_id_is_found() {
    let answer = Answer::new(200, br#"{"job":{"id":"J-1"}}"#);
    assert_eq!(
        classify_lookup(&answer, &JOB),
        LookupOutcome::Found(effect("J-1"))
    );
    let LookupOutcome::Transient(why) =
        classify_lookup(&Answer::new(200, br#"{"id":"J-1"}"#), &JOB)
    else {
        panic!("the id is not where a lookup has it");
    };
    assert!(why.summary().contains("has no id"), "{why}");
}

#[test]
fn lookup_row_404_is_not_found() {
    let body = br#"{"type":"not_found","title":"Not Found","status":404,"detail":"no effect is stored under this idempotency key"}"#;
    assert_eq!(
        classify_lookup(&Answer::new(404, body), &JOB),
        LookupOutcome::NotFound
    );
}

#[test]
fn lookup_rows_else_are_transient() {
    for status in [
        0, 100, 201, 202, 204, 301, 302, 400, 401, 403, 409, 410, 422, 429, 500, 503, 504, 600,
    ] {
        assert_eq!(
            lookup_rule(status).class,
            LookupClass::Transient,
            "{status}"
        );
        let answer = Answer::new(status, br#"{"job":{"id":"J-1"}}"#);
        assert!(
            matches!(classify_lookup(&answer, &JOB), LookupOutcome::Transient(_)),
            "{status}"
        );
    }
}

/// The core's path quotes nothing the server wrote: summaries name status, content type, length
/// and the keyed digest, whatever the reader.
#[test]
fn the_core_never_quotes_the_server() {
    let body =
        br#"{"type":"idempotency_mismatch","title":"hello from the server","detail":"PIN 7731"}"#;
    let answer = Answer::new(409, body).with_content_type(Some("application/problem+json"));
    let CallOutcome::KeyMismatch(why) = classify_call(&answer, &JOB) else {
        panic!("mismatch");
    };
    assert_eq!(
        why.summary(),
        format!(
            "job server answered 409 (application/problem+json, {} bytes, keyed SHA-256 {}): the \
             key was used with another request (409 idempotency_mismatch)",
            body.len(),
            answer_digest(body)
        )
    );
    for status in [200, 302, 400, 401, 422, 500] {
        for outcome in [
            format!("{:?}", call(status, body)),
            format!("{:?}", classify_lookup(&Answer::new(status, body), &JOB)),
        ] {
            assert!(
                !outcome.contains("hello") && !outcome.contains("7731"),
                "{outcome}"
            );
        }
    }
}

#[test]
fn effect_ids_must_be_short_printable_ascii() {
    assert_eq!(effect_id_defect("ECTD-20250609-0800-0042"), None);
    assert_eq!(effect_id_defect(&"S".repeat(MAX_EFFECT_ID_CHARS)), None);
    assert_eq!(effect_id_defect("a b"), None);
    assert_eq!(effect_id_defect(""), Some(IdDefect::Empty));
    assert_eq!(effect_id_defect("   "), Some(IdDefect::Empty));
    assert_eq!(
        effect_id_defect(&"S".repeat(MAX_EFFECT_ID_CHARS + 1)),
        Some(IdDefect::TooLong)
    );
    for bad in ["S-1\n", "S-\u{1b}[31m", "S-\u{e9}", "S\t1"] {
        assert_eq!(
            effect_id_defect(bad),
            Some(IdDefect::NotPrintable),
            "{bad:?}"
        );
    }
}

/// `Retry-After` on a `429` or a `503`, in either form, is the transient outcome's delay; on
/// another status, or unreadable, it is none.
#[test]
fn retry_after_on_429_and_503_is_the_delay() {
    use crate::effect::RetryAfter;
    let delay = |status: u16, value: &str| {
        let answer = Answer::new(status, b"").with_retry_after(Some(value));
        match classify_call(&answer, &JOB) {
            CallOutcome::Transient(why) => why.retry_after(),
            other => panic!("{status}: {other:?}"),
        }
    };
    assert_eq!(delay(429, "30"), Some(RetryAfter::Seconds(30)));
    assert_eq!(delay(503, "30"), Some(RetryAfter::Seconds(30)));
    let date = Some(RetryAfter::At(784_111_777_000));
    assert_eq!(delay(429, "Sun, 06 Nov 1994 08:49:37 GMT"), date);
    assert_eq!(delay(503, "Sunday, 06-Nov-94 08:49:37 GMT"), date);
    assert_eq!(delay(503, "Sun Nov  6 08:49:37 1994"), date);
    for garbage in ["", "later", "-1", "30s", "Sun, 06 Nov 1994"] {
        assert_eq!(delay(429, garbage), None, "{garbage:?}");
    }
    assert_eq!(delay(500, "30"), None);
    assert_eq!(delay(408, "30"), None);
    let without = Answer::new(429, b"");
    let CallOutcome::Transient(why) = classify_call(&without, &JOB) else {
        panic!("a 429 is transient");
    };
    assert_eq!(why.retry_after(), None);
}
