//! The sample Lambda events of `events/`, dated for today.
//!
//! The gate refuses a notification whose window has ended (`window_ended`) or ends more than
//! [`truck_slot::notification::MAX_WINDOW_AHEAD_DAYS`] days ahead (`window_too_far_ahead`), so no fixed
//! date in a sample SQS event stays valid: any window is refused within a year one way or the
//! other. The files in `events/` keep their dates as written; before they run on the real clock
//! (`docs/LOCAL_RUNS.md`, `tests/tests/lambda_runtime.rs`) they are dated with [`date_event`]
//! (`cargo run -p sim -- sample-events` writes `target/events/`).
//!
//! `sim/tests/sample_events.rs` dates every file in `events/` for three instants of every day of
//! the next five years and fails if the gate would refuse one of its notifications for its date,
//! or the ingress one of its webhooks.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, FixedOffset, SecondsFormat, TimeZone, Utc};
use md5::{Digest, Md5};
use serde_json::Value;

/// The SQS message attributes that hold an instant, in epoch milliseconds (as decimal strings).
pub const EPOCH_MS_ATTRIBUTES: [&str; 2] = ["SentTimestamp", "ApproximateFirstReceiveTimestamp"];

/// Why an event file could not be dated.
#[derive(Debug, thiserror::Error)]
pub enum SampleEventError {
    /// A webhook event without a string `body`, a `webhook-id` header or a `requestId`.
    #[error("webhook event: {0}")]
    BadWebhook(&'static str),
    /// The file is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// A window's `start` is not an RFC 3339 timestamp.
    #[error("record {record}: preferred_window.start {start:?} is not RFC 3339")]
    BadWindow {
        /// The record's index in `Records`.
        record: usize,
        /// The value found.
        start: String,
    },
    /// An epoch-millisecond attribute is not a decimal integer.
    #[error("record {record}: attribute {name} = {value:?} is not epoch milliseconds")]
    BadEpoch {
        /// The record's index in `Records`.
        record: usize,
        /// The attribute.
        name: &'static str,
        /// The value found.
        value: String,
    },
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// MD5 of `body` in lower-case hex, as SQS computes `md5OfBody` (RFC 1321).
pub fn md5_of_body(body: &str) -> String {
    hex::encode(Md5::digest(body.as_bytes()))
}

/// The records of an SQS event (`{"Records": [...]}`); empty for any other JSON.
fn records(event: &Value) -> &[Value] {
    event
        .get("Records")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The whole days to add so that the earliest `preferred_window.start` of the event's bodies
/// falls on the UTC day after `now_ms` (epoch ms); `None` when no body has a window.
///
/// # Errors
/// [`SampleEventError::BadWindow`] for a window start that is not RFC 3339.
pub fn shift_days(event: &Value, now_ms: i64) -> Result<Option<i64>, SampleEventError> {
    let mut earliest: Option<DateTime<Utc>> = None;
    for (record, r) in records(event).iter().enumerate() {
        let Some(body) = r.get("body").and_then(Value::as_str) else {
            continue;
        };
        let Ok(body) = serde_json::from_str::<Value>(body) else {
            continue; // a poison body (not JSON) has no window
        };
        let Some(start) = body
            .pointer("/preferred_window/start")
            .and_then(Value::as_str)
        else {
            continue;
        };
        let start = DateTime::parse_from_rfc3339(start)
            .map_err(|_| SampleEventError::BadWindow {
                record,
                start: start.to_string(),
            })?
            .with_timezone(&Utc);
        earliest = Some(earliest.map_or(start, |e| e.min(start)));
    }
    let Some(earliest) = earliest else {
        return Ok(None);
    };
    let today = Utc
        .timestamp_millis_opt(now_ms)
        .single()
        .unwrap_or_default()
        .date_naive();
    let tomorrow = today + Duration::days(1);
    Ok(Some((tomorrow - earliest.date_naive()).num_days()))
}

/// The length of an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`) starting at
/// `at` in `text`, if one starts there.
fn rfc3339_len(text: &[u8], at: usize) -> Option<usize> {
    let digits = |from: usize, n: usize| {
        text.get(from..from + n)
            .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
    };
    let byte = |i: usize| text.get(i).copied();
    let shape = digits(at, 4)
        && byte(at + 4) == Some(b'-')
        && digits(at + 5, 2)
        && byte(at + 7) == Some(b'-')
        && digits(at + 8, 2)
        && matches!(byte(at + 10), Some(b'T' | b't'))
        && digits(at + 11, 2)
        && byte(at + 13) == Some(b':')
        && digits(at + 14, 2)
        && byte(at + 16) == Some(b':')
        && digits(at + 17, 2);
    if !shape || (at > 0 && text[at - 1].is_ascii_digit()) {
        return None;
    }
    let mut end = at + 19;
    if byte(end) == Some(b'.') && byte(end + 1).is_some_and(|b| b.is_ascii_digit()) {
        end += 1;
        while byte(end).is_some_and(|b| b.is_ascii_digit()) {
            end += 1;
        }
    }
    match byte(end) {
        Some(b'Z' | b'z') => Some(end + 1 - at),
        Some(b'+' | b'-')
            if digits(end + 1, 2) && byte(end + 3) == Some(b':') && digits(end + 4, 2) =>
        {
            Some(end + 6 - at)
        }
        _ => None,
    }
}

/// `stamp` (RFC 3339) moved by `days`, written in the same form: the same offset (`Z` stays
/// `Z`) and the same number of fractional digits.
fn shift_rfc3339(stamp: &str, days: i64) -> Option<String> {
    let parsed: DateTime<FixedOffset> = DateTime::parse_from_rfc3339(stamp).ok()?;
    let shifted = parsed.checked_add_signed(Duration::days(days))?;
    let fraction = stamp.split_once('.').map_or(0, |(_, rest)| {
        rest.bytes().take_while(u8::is_ascii_digit).count()
    });
    let format = match fraction {
        0 => SecondsFormat::Secs,
        1..=3 => SecondsFormat::Millis,
        4..=6 => SecondsFormat::Micros,
        _ => SecondsFormat::Nanos,
    };
    let use_z = stamp.ends_with(['Z', 'z']);
    let text = shifted.to_rfc3339_opts(format, use_z);
    // Millis/Micros pad to 3/6 digits; keep the original count when it was shorter.
    match (fraction, text.split_once('.')) {
        (1 | 2 | 4 | 5, Some((head, rest))) => {
            let digits: String = rest.chars().take(fraction).collect();
            let tail: String = rest.chars().skip_while(char::is_ascii_digit).collect();
            Some(format!("{head}.{digits}{tail}"))
        }
        _ => Some(text),
    }
}

/// Every RFC 3339 timestamp in `text` moved by `days` (see [`shift_rfc3339`]).
fn shift_all_rfc3339(text: &str, days: i64) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(len) = rfc3339_len(bytes, i) {
            if let Some(shifted) = shift_rfc3339(&text[i..i + len], days) {
                out.push_str(&text[copied..i]);
                out.push_str(&shifted);
                i += len;
                copied = i;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// `text` (JSON) with every string token passed through `map` (its raw text between the quotes,
/// escapes as written); everything outside strings is copied as is.
fn map_json_strings(text: &str, mut map: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices();
    let mut copied = 0;
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            continue;
        }
        // A string token: up to the next quote that is not escaped.
        let mut end = None;
        while let Some((j, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        out.push_str(&text[copied..=i]);
        out.push_str(&map(&text[i + 1..end]));
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// The sample event `text` dated for `now_ms` (epoch ms): returned unchanged when no body has a
/// window.
///
/// * every RFC 3339 timestamp in the file (the windows inside the bodies) and the SQS
///   attributes `SentTimestamp` and `ApproximateFirstReceiveTimestamp` (epoch **milliseconds**)
///   move by the same whole number of days, chosen so that the earliest `preferred_window.start`
///   falls on the day after `now` (UTC); times of day and the gaps between timestamps are kept;
/// * each record's `md5OfBody` is recomputed (MD5 of the body, RFC 1321, as SQS computes it);
/// * nothing else changes: message ids, receipt handles, the other fields and the file's layout
///   stay as written. A file without a window (the scheduled events) is returned unchanged.
///
/// An API Gateway HTTP API event of a signed webhook (`events/webhook-portbase.json`: a
/// `requestContext.http` and a `webhook-signature` header) is dated the same way and **signed
/// again**: its body's timestamps move by whole days as above, `webhook-timestamp` becomes `now`
/// (epoch seconds; the ingress refuses a signature more than 5 minutes old), the signature is
/// computed again with the sample's local secret (`ingress::event::LOCAL_SAMPLE_SECRET`), and
/// `requestContext.time`/`timeEpoch` become `now`; the webhook-id and request id stay. The file
/// is written again as the signer writes it ([`ingress::event::SignedWebhook::http_api_event`]).
///
/// # Errors
/// Not JSON, a window start that is not RFC 3339, an epoch attribute that is not an integer.
pub fn date_event(text: &str, now_ms: i64) -> Result<String, SampleEventError> {
    let event: Value = serde_json::from_str(text)?;
    if is_webhook_event(&event) {
        return date_webhook_event(&event, now_ms);
    }
    let Some(days) = shift_days(&event, now_ms)? else {
        return Ok(text.to_string());
    };
    // Whole string values to replace: each `md5OfBody` by the MD5 of its dated body, each epoch
    // attribute by its shifted value.
    let mut replace = std::collections::HashMap::new();
    for (record, r) in records(&event).iter().enumerate() {
        if let (Some(body), Some(md5)) = (
            r.get("body").and_then(Value::as_str),
            r.get("md5OfBody").and_then(Value::as_str),
        ) {
            replace.insert(md5.to_string(), md5_of_body(&shift_all_rfc3339(body, days)));
        }
        for name in EPOCH_MS_ATTRIBUTES {
            let Some(value) = r
                .pointer(&format!("/attributes/{name}"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            let ms: i64 = value.parse().map_err(|_| SampleEventError::BadEpoch {
                record,
                name,
                value: value.to_string(),
            })?;
            replace.insert(
                value.to_string(),
                ms.saturating_add(days.saturating_mul(86_400_000))
                    .to_string(),
            );
        }
    }
    // One pass over the file's string tokens: a replaced value is never replaced again. A body is
    // a JSON string inside the file; a timestamp has no character JSON escapes, so it reads the
    // same in the file's text as in the body, and shifting it there shifts the body.
    let dated = map_json_strings(text, |raw| {
        replace
            .get(raw)
            .cloned()
            .unwrap_or_else(|| shift_all_rfc3339(raw, days))
    });
    Ok(dated)
}

/// Whether `event` is an API Gateway HTTP API event of a signed webhook (it has
/// `requestContext.http` and a `webhook-signature` header).
pub fn is_webhook_event(event: &Value) -> bool {
    event.pointer("/requestContext/http").is_some()
        && event.pointer("/headers/webhook-signature").is_some()
}

/// The webhook event `event` dated and signed again for `now_ms` (the module's rules).
///
/// # Errors
/// [`SampleEventError::BadWebhook`] for an event without a body, webhook-id or request id; a
/// window start that is not RFC 3339.
pub fn date_webhook_event(event: &Value, now_ms: i64) -> Result<String, SampleEventError> {
    let body = event
        .get("body")
        .and_then(Value::as_str)
        .ok_or(SampleEventError::BadWebhook("no string body"))?;
    let id = event
        .pointer("/headers/webhook-id")
        .and_then(Value::as_str)
        .ok_or(SampleEventError::BadWebhook("no webhook-id header"))?;
    let request_id = event
        .pointer("/requestContext/requestId")
        .and_then(Value::as_str)
        .ok_or(SampleEventError::BadWebhook("no requestContext.requestId"))?;
    // The body as the only record of an SQS event, to find its window with the same rule.
    let as_sqs = serde_json::json!({ "Records": [{ "body": body }] });
    let days = shift_days(&as_sqs, now_ms)?.unwrap_or(0);
    let dated_body = shift_all_rfc3339(body, days);
    let secret = ingress::signature::WebhookSecret::parse(ingress::event::LOCAL_SAMPLE_SECRET)
        .map_err(|_| SampleEventError::BadWebhook("the local sample secret does not parse"))?;
    let signed =
        ingress::event::SignedWebhook::sign(&[secret], id, now_ms.div_euclid(1000), &dated_body);
    let mut text = serde_json::to_string_pretty(&signed.http_api_event(now_ms, request_id))?;
    text.push('\n');
    Ok(text)
}

/// Dates every `*.json` file of `from` for `now_ms` ([`date_event`]) into `to` (created if
/// missing), under the same names; returns the files written, sorted.
///
/// # Errors
/// A file that cannot be read, dated or written.
pub fn date_dir(from: &Path, to: &Path, now_ms: i64) -> Result<Vec<PathBuf>, SampleEventError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SampleEventError::Io { path, source }
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(from)
        .map_err(io(from))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    std::fs::create_dir_all(to).map_err(io(to))?;
    let mut written = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(io(&file))?;
        let dated = date_event(&text, now_ms)?;
        let out = to.join(file.file_name().unwrap_or_default());
        std::fs::write(&out, dated).map_err(io(&out))?;
        written.push(out);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_keep_their_form() {
        assert_eq!(
            shift_rfc3339("2027-06-01T08:00:00Z", 2).as_deref(),
            Some("2027-06-03T08:00:00Z")
        );
        assert_eq!(
            shift_rfc3339("2028-02-28T23:30:00.5+02:00", 1).as_deref(),
            Some("2028-02-29T23:30:00.5+02:00")
        );
        assert_eq!(
            shift_rfc3339("2027-06-01T08:00:00.123456Z", -1).as_deref(),
            Some("2027-05-31T08:00:00.123456Z")
        );
    }

    #[test]
    fn only_timestamps_are_found() {
        let text = r#"{"a":"2027-06-01T08:00:00Z","b":"12027-06-01T08:00:00Z","c":"2027-06-01","d":"2027-06-01T08:00:00"}"#;
        assert_eq!(
            shift_all_rfc3339(text, 1),
            r#"{"a":"2027-06-02T08:00:00Z","b":"12027-06-01T08:00:00Z","c":"2027-06-01","d":"2027-06-01T08:00:00"}"#
        );
    }

    #[test]
    fn an_event_moves_to_tomorrow_with_its_md5_and_attributes() {
        let body = r#"{"notificationId":"N-1","preferred_window":{"start":"2027-06-01T08:00:00Z","end":"2027-06-01T10:00:00Z"}}"#;
        let event = serde_json::json!({"Records": [{
            "messageId": "m-1",
            "body": body,
            "attributes": {"SentTimestamp": "1811750400123"},
            "md5OfBody": md5_of_body(body),
        }]});
        let text = serde_json::to_string_pretty(&event).unwrap();
        // 2030-01-15T13:00:00Z: tomorrow is 2030-01-16.
        let now = Utc.with_ymd_and_hms(2030, 1, 15, 13, 0, 0).unwrap();
        let dated: Value =
            serde_json::from_str(&date_event(&text, now.timestamp_millis()).unwrap()).unwrap();
        let record = &dated["Records"][0];
        let new_body = record["body"].as_str().unwrap();
        assert_eq!(
            new_body,
            r#"{"notificationId":"N-1","preferred_window":{"start":"2030-01-16T08:00:00Z","end":"2030-01-16T10:00:00Z"}}"#
        );
        assert_eq!(record["md5OfBody"], md5_of_body(new_body));
        // 2027-05-31T08:00:00.123Z moved by the same 960 days.
        let days = (Utc.with_ymd_and_hms(2030, 1, 16, 0, 0, 0).unwrap()
            - Utc.with_ymd_and_hms(2027, 6, 1, 0, 0, 0).unwrap())
        .num_days();
        assert_eq!(days, 960);
        assert_eq!(
            record["attributes"]["SentTimestamp"],
            (1_811_750_400_123_i64 + days * 86_400_000).to_string()
        );
        assert_eq!(record["messageId"], "m-1");
    }

    #[test]
    fn an_event_without_a_window_is_unchanged() {
        let text = "{\"job\": \"reconcile\"}\n";
        assert_eq!(date_event(text, 0).unwrap(), text);
    }
}
