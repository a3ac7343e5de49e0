//! The reqwest side of the core's `Idempotency-Key` contract (feature `http`) against a scripted
//! server on loopback that writes raw HTTP answers: the header as sent, no redirect followed, a
//! bounded answer, and each kind of failed request named by its kind.

use std::time::Duration;

use gate::effect::{CallOutcome, LookupOutcome};
use gate::idempotency_key::{JsonIdAt, RequestFailure};
use gate_http::MAX_ANSWER_BYTES;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const JOBS: JsonIdAt = JsonIdAt::new("job server", "/id");

/// A server that answers every connection with `answer` (raw bytes, then closes), and reports
/// the head of each request it read.
async fn scripted(answer: Vec<u8>) -> (String, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (seen, heads) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = seen.send(String::from_utf8_lossy(&head).into_owned());
                let _ = socket.write_all(&answer).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (base, heads)
}

fn http() -> reqwest::Client {
    gate_http::builder("gate-test/1")
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn raw(status_line: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status_line}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn a_call_sends_the_key_as_a_structured_field_string() {
    let (base, mut heads) = scripted(raw(
        "201 Created",
        "content-type: application/json\r\n",
        r#"{"id":"J-1"}"#,
    ))
    .await;
    let outcome = gate_http::call(http().post(format!("{base}/jobs")), "k-1", &JOBS).await;
    let CallOutcome::Done(effect) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(effect.effect_id, "J-1");
    let head = heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.contains("\r\nidempotency-key: \"k-1\"\r\n"), "{head}");
    assert!(head.contains("\r\nuser-agent: gate-test/1\r\n"), "{head}");
}

#[tokio::test]
async fn a_key_the_header_cannot_carry_is_never_sent() {
    let (base, mut heads) = scripted(raw("201 Created", "", r#"{"id":"J-1"}"#)).await;
    let outcome = gate_http::call(http().post(format!("{base}/jobs")), "k\n1", &JOBS).await;
    let CallOutcome::Permanent { status: 0, detail } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        detail.summary().starts_with("nothing sent to job server"),
        "{detail}"
    );
    assert!(heads.try_recv().is_err(), "nothing reached the server");
}

#[tokio::test]
async fn a_redirect_is_an_answer_never_followed() {
    let (elsewhere, mut elsewhere_heads) = scripted(raw("201 Created", "", r#"{"id":"X"}"#)).await;
    for status in [
        "301 Moved Permanently",
        "302 Found",
        "303 See Other",
        "307 Temporary Redirect",
        "308 Permanent Redirect",
    ] {
        let location = format!("location: {elsewhere}/jobs\r\n");
        let (base, _heads) = scripted(raw(status, &location, "")).await;
        let outcome = gate_http::call(http().post(format!("{base}/jobs")), "k-2", &JOBS).await;
        let CallOutcome::Transient(why) = outcome else {
            panic!("{status}: {outcome:?}");
        };
        assert!(why.summary().contains(&status[..3]), "{why}");
        let lookup = gate_http::lookup(http().get(format!("{base}/jobs")), &JOBS).await;
        assert!(matches!(lookup, LookupOutcome::Transient(_)), "{lookup:?}");
    }
    assert!(
        elsewhere_heads.try_recv().is_err(),
        "the redirect's target heard nothing"
    );
}

#[tokio::test]
async fn an_answer_is_read_up_to_the_bound() {
    let long = "x".repeat(MAX_ANSWER_BYTES * 2);
    let (base, _heads) = scripted(raw("500 Internal Server Error", "", &long)).await;
    let received = gate_http::exchange(http().post(format!("{base}/jobs")))
        .await
        .unwrap();
    assert_eq!(received.status, 500);
    assert_eq!(received.body.len(), MAX_ANSWER_BYTES);
}

#[tokio::test]
async fn failed_requests_are_named_by_their_kind() {
    // Nobody listens on a port just released: connect error.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let refused = gate_http::exchange(http().post(format!("http://127.0.0.1:{port}/jobs"))).await;
    assert_eq!(refused, Err(RequestFailure::Connect));
    // A server that reads the request and never answers: timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let quick = gate_http::builder("gate-test/1")
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let timed_out = gate_http::exchange(quick.post(format!("http://{addr}/jobs"))).await;
    assert_eq!(timed_out, Err(RequestFailure::Timeout));
    // An answer whose body stops before its announced length: the body is lost after the status.
    let (base, _heads) = scripted(
        b"HTTP/1.1 201 Created\r\ncontent-length: 100\r\nconnection: close\r\n\r\n{\"id\":"
            .to_vec(),
    )
    .await;
    let cut = gate_http::exchange(http().post(format!("{base}/jobs"))).await;
    assert_eq!(cut, Err(RequestFailure::Body { status: 201 }));
    let outcome = gate_http::call(http().post(format!("{base}/jobs")), "k-3", &JOBS).await;
    let CallOutcome::Transient(why) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(why.summary().contains("answer 201 unreadable"), "{why}");
}

/// A server that departs from the draft (its 422 refuses the operation, not the key): the
/// override decides that status, the key is sent as by `call`, and every other answer keeps the
/// draft's table (a 422 without the override is a key mismatch).
#[tokio::test]
async fn call_with_sends_the_key_and_lets_a_documented_status_depart() {
    let refused = raw(
        "422 Unprocessable Content",
        "content-type: application/json\r\n",
        "{}",
    );
    let declined = |answer: &gate_http::Received| {
        (answer.status == 422).then(|| CallOutcome::Declined {
            status: 422,
            detail: gate::effect::AnswerDetail::new("the refund was refused"),
        })
    };
    let (base, mut heads) = scripted(refused.clone()).await;
    let outcome = gate_http::call_with(
        http().post(format!("{base}/refunds")),
        "k-422",
        &JOBS,
        declined,
    )
    .await;
    assert!(
        matches!(outcome, CallOutcome::Declined { status: 422, .. }),
        "{outcome:?}"
    );
    let head = heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.contains("idempotency-key: \"k-422\""), "{head}");
    let (base, _heads) = scripted(refused).await;
    let outcome = gate_http::call(http().post(format!("{base}/refunds")), "k-422", &JOBS).await;
    assert!(
        matches!(outcome, CallOutcome::KeyMismatch(_)),
        "{outcome:?}"
    );
    let (base, _heads) = scripted(raw(
        "201 Created",
        "content-type: application/json\r\n",
        r#"{"id":"re_1"}"#,
    ))
    .await;
    let outcome = gate_http::call_with(
        http().post(format!("{base}/refunds")),
        "k-201",
        &JOBS,
        declined,
    )
    .await;
    let CallOutcome::Done(effect) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(effect.effect_id, "re_1");
}

/// A `429` or `503` with `Retry-After` reaches the classification from the answer's headers:
/// delta-seconds and an HTTP-date each become the transient outcome's delay; a `500`'s header
/// and a garbage value are no delay.
#[tokio::test]
async fn retry_after_reaches_the_classification() {
    use gate::effect::RetryAfter;
    let cases = [
        (
            "429 Too Many Requests",
            "retry-after: 7\r\n",
            Some(RetryAfter::Seconds(7)),
        ),
        (
            "503 Service Unavailable",
            "retry-after: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
            Some(RetryAfter::At(784_111_777_000)),
        ),
        ("429 Too Many Requests", "retry-after: soon\r\n", None),
        ("500 Internal Server Error", "retry-after: 7\r\n", None),
    ];
    for (status, header, delay) in cases {
        let (base, _heads) = scripted(raw(status, header, "")).await;
        let outcome = gate_http::call(http().post(format!("{base}/jobs")), "k-9", &JOBS).await;
        let CallOutcome::Transient(why) = outcome else {
            panic!("{status}: {outcome:?}");
        };
        assert_eq!(why.retry_after(), delay, "{status} {header}");
    }
}
