//! No sample event goes stale: every file in `events/`, dated as `docs/LOCAL_RUNS.md` and
//! `tests/tests/lambda_runtime.rs` date it before it runs on the real clock
//! (`sim::sample_events`), is accepted by the gate at the first millisecond, noon and the last
//! millisecond of every day of the next five years, leap days included.

use std::path::PathBuf;

use aws_lambda_events::event::apigw::ApiGatewayV2httpRequest;
use aws_lambda_events::event::sqs::SqsEvent;
use chrono::{DateTime, Duration, TimeZone, Utc};
use ingress::event::LOCAL_SAMPLE_SECRET;
use ingress::signature::{verify, SecretSet, SignatureHeaders};
use serde_json::Value;
use sim::sample_events::{date_event, is_webhook_event, md5_of_body, EPOCH_MS_ATTRIBUTES};
use truck_slot::notification::{parse_notification, MAX_WINDOW_AHEAD_DAYS};

/// The terminal codes the consumer books at by default (`KNOWN_TERMINALS`).
fn terminals() -> Vec<String> {
    vec!["ECT-DELTA".to_string()]
}

/// Every `events/*.json` of the repository, by name.
fn sample_files() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../events");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("events/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("readable"))
        })
        .collect();
    files.sort();
    assert!(
        files.iter().any(|(n, _)| n == "notification.json"),
        "{files:?}"
    );
    files
}

/// Every instant a timestamp in `text` names: RFC 3339 strings anywhere (bodies included) and
/// the epoch-millisecond SQS attributes.
fn instants(event: &Value) -> Vec<DateTime<Utc>> {
    let mut found = Vec::new();
    let mut strings = vec![event.clone()];
    while let Some(v) = strings.pop() {
        match v {
            Value::String(s) => {
                if let Ok(t) = DateTime::parse_from_rfc3339(&s) {
                    found.push(t.with_timezone(&Utc));
                } else if let Ok(inner) = serde_json::from_str::<Value>(&s) {
                    if inner.is_object() || inner.is_array() {
                        strings.push(inner);
                    }
                }
            }
            Value::Array(items) => strings.extend(items),
            Value::Object(map) => strings.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
    for record in event["Records"].as_array().into_iter().flatten() {
        for name in EPOCH_MS_ATTRIBUTES {
            if let Some(ms) = record["attributes"][name].as_str() {
                let ms: i64 = ms.parse().expect("epoch ms");
                found.push(Utc.timestamp_millis_opt(ms).unwrap());
            }
        }
    }
    found
}

/// The sample webhook's signature verified with the local sample secret at `now_s` (epoch s).
fn verify_webhook(event: &Value, now_s: i64) -> Result<(), String> {
    let request: ApiGatewayV2httpRequest =
        serde_json::from_value(event.clone()).map_err(|e| format!("not an HTTP API event: {e}"))?;
    let header = |n: &str| request.headers.get(n).and_then(|v| v.to_str().ok());
    let secrets = SecretSet::parse_json(&format!(r#"{{"active":["{LOCAL_SAMPLE_SECRET}"]}}"#))
        .map_err(|e| e.to_string())?;
    let headers = SignatureHeaders {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
    };
    let body = request.body.unwrap_or_default();
    if header("content-length") != Some(body.len().to_string().as_str()) {
        return Err("content-length is not the body's length".into());
    }
    verify(&secrets, &headers, body.as_bytes(), now_s)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks one dated file at `now`: a Lambda SQS event (or the scheduler's input), each
/// `md5OfBody` the MD5 of its body, every notification accepted by the gate, every timestamp
/// between a day before `now` and the window limit ahead; a webhook event signed so that the
/// ingress accepts it at `now`, its body a notification the gate accepts.
fn check_dated(name: &str, text: &str, now: DateTime<Utc>) {
    let event: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    if is_webhook_event(&event) {
        verify_webhook(&event, now.timestamp())
            .unwrap_or_else(|e| panic!("{name} dated at {now}: the ingress refuses it: {e}"));
        let body = event["body"].as_str().expect("body");
        if let Err(reason) = parse_notification(body, now.timestamp_millis(), &terminals()) {
            panic!(
                "{name} dated at {now} is refused: {} ({reason:?})",
                reason.code()
            );
        }
        assert_eq!(
            event["requestContext"]["timeEpoch"].as_i64(),
            Some(now.timestamp_millis()),
            "{name}"
        );
    }
    if event.get("Records").is_some() {
        serde_json::from_value::<SqsEvent>(event.clone())
            .unwrap_or_else(|e| panic!("{name}: not a Lambda SQS event: {e}"));
    }
    for (i, record) in event["Records"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let body = record["body"].as_str().expect("body");
        assert_eq!(
            record["md5OfBody"].as_str(),
            Some(md5_of_body(body).as_str()),
            "{name} record {i}: md5OfBody"
        );
        // A body that is not a JSON object is the sample's poison body: it is meant to be refused.
        if serde_json::from_str::<Value>(body).is_ok_and(|b| b.is_object()) {
            if let Err(reason) = parse_notification(body, now.timestamp_millis(), &terminals()) {
                panic!(
                    "{name} record {i} dated at {now} is refused: {} ({reason:?})",
                    reason.code()
                );
            }
        }
    }
    let earliest = now - Duration::days(1);
    let latest = now + Duration::days(MAX_WINDOW_AHEAD_DAYS);
    for t in instants(&event) {
        assert!(
            (earliest..=latest).contains(&t),
            "{name} dated at {now} still names {t}: stale or too far ahead"
        );
    }
}

/// The contract of this test: every sample event, dated for the day it is used, stays valid on
/// every day of the next five years.
#[test]
fn no_sample_event_goes_stale_within_five_years() {
    let files = sample_files();
    let today = Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let mut checked = 0;
    for day in 0..=(5 * 366) {
        let midnight = today + Duration::days(day);
        for at in [
            Duration::zero(),
            Duration::hours(12),
            Duration::days(1) - Duration::milliseconds(1),
        ] {
            let now = midnight + at;
            for (name, text) in &files {
                let dated = date_event(text, now.timestamp_millis())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                check_dated(name, &dated, now);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, (5 * 366 + 1) * 3 * files.len());
}

/// The committed files themselves: consistent events (each `md5OfBody` right), each
/// notification accepted a day before its window, the message ids unchanged by dating.
#[test]
fn the_committed_sample_events_are_consistent() {
    let mut webhooks = 0;
    for (name, text) in sample_files() {
        let event: Value = serde_json::from_str(&text).unwrap();
        let dated: Value =
            serde_json::from_str(&date_event(&text, Utc::now().timestamp_millis()).unwrap())
                .unwrap();
        if is_webhook_event(&event) {
            // Signed as written, at its own timestamp; dating keeps the ids.
            webhooks += 1;
            let ts: i64 = event["headers"]["webhook-timestamp"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            verify_webhook(&event, ts).unwrap_or_else(|e| panic!("{name}: {e}"));
            for pointer in ["/headers/webhook-id", "/requestContext/requestId"] {
                assert_eq!(
                    dated.pointer(pointer),
                    event.pointer(pointer),
                    "{name} {pointer}"
                );
            }
            let body = event["body"].as_str().unwrap();
            let start = serde_json::from_str::<Value>(body).unwrap()["preferred_window"]["start"]
                .as_str()
                .unwrap()
                .to_string();
            let day_before = DateTime::parse_from_rfc3339(&start).unwrap() - Duration::days(1);
            parse_notification(body, day_before.timestamp_millis(), &terminals())
                .unwrap_or_else(|r| panic!("{name}: {r:?}"));
            // Five minutes and a second later the same signature is refused: a committed file
            // could not be sent as written, hence the dating.
            assert!(verify_webhook(&event, ts + 301).is_err(), "{name}");
        }
        for (i, record) in event["Records"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let body = record["body"].as_str().unwrap();
            assert_eq!(
                record["md5OfBody"].as_str(),
                Some(md5_of_body(body).as_str()),
                "{name} record {i}"
            );
            assert_eq!(
                dated["Records"][i]["messageId"], record["messageId"],
                "{name}"
            );
            assert_eq!(
                dated["Records"][i]["receiptHandle"], record["receiptHandle"],
                "{name}"
            );
            let Some(start) = serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|b| b["preferred_window"]["start"].as_str().map(String::from))
            else {
                continue;
            };
            let day_before = DateTime::parse_from_rfc3339(&start).unwrap() - Duration::days(1);
            parse_notification(body, day_before.timestamp_millis(), &terminals())
                .unwrap_or_else(|r| panic!("{name} record {i}: {r:?}"));
        }
    }
    assert_eq!(webhooks, 1, "events/webhook-portbase.json");
}
