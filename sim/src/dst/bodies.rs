//! The bodies a schedule sends: valid ISO 6346 container numbers, one event's business fields
//! serialised in the many forms that normalise to the same fingerprint, and poison bodies the
//! strict parser can never accept.

use std::fmt::Write as _;

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use truck_slot::iso6346::check_digit;

fn ten_chars(rng: &mut ChaCha8Rng) -> String {
    let mut s = String::new();
    for _ in 0..3 {
        s.push(char::from(b'A' + rng.random_range(0..26u8)));
    }
    s.push(['U', 'U', 'U', 'J', 'Z'][rng.random_range(0..5)]);
    for _ in 0..6 {
        s.push(char::from(b'0' + rng.random_range(0..10u8)));
    }
    s
}

/// A valid ISO 6346 number, canonical.
pub fn container(rng: &mut ChaCha8Rng) -> String {
    let first = ten_chars(rng);
    let digit = check_digit(&first).unwrap_or(0);
    format!("{first}{digit}")
}

/// Another way to write a canonical container number that normalises to it.
fn container_form(canonical: &str, form: u8) -> String {
    match form {
        1 => canonical.to_ascii_lowercase(),
        2 => format!(
            "{} {}-{}",
            &canonical[..4],
            &canonical[4..10],
            &canonical[10..]
        ),
        3 => format!(
            "{}-{} {}",
            canonical[..4].to_ascii_lowercase(),
            &canonical[4..10],
            &canonical[10..]
        ),
        _ => canonical.to_string(),
    }
}

fn rfc3339(ms: i64, form: u8) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
    match form {
        1 => (t + chrono::Duration::hours(2))
            .format("%Y-%m-%dT%H:%M:%S+02:00")
            .to_string(),
        2 => t.format("%Y-%m-%dT%H:%M:%S.000Z").to_string(),
        _ => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    }
}

fn mass_form(tonnes: i64, form: u8) -> String {
    match form {
        1 => format!("{tonnes}000.0"),
        2 => format!("{tonnes}E3"),
        3 => format!("{tonnes}.0e3"),
        _ => format!("{tonnes}000"),
    }
}

/// The business fields of one event variant.
#[derive(Clone)]
pub(crate) struct Fields {
    pub(crate) notification_id: String,
    pub(crate) container: String,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) pin: String,
    pub(crate) tonnes: i64,
}

/// Serialises `f` as JSON text in a form the seed picks: key order, whitespace, number form,
/// container form and time zone of the window vary; the business fields do not.
pub(crate) fn serialise(f: &Fields, rng: &mut ChaCha8Rng) -> String {
    let form = |rng: &mut ChaCha8Rng, n: u8| rng.random_range(0..n);
    let time_form = form(rng, 3);
    let window = format!(
        "{{\"start\":\"{}\",\"end\":\"{}\"}}",
        rfc3339(f.start_ms, time_form),
        rfc3339(f.end_ms, time_form)
    );
    let mut fields = [
        ("notificationId", format!("\"{}\"", f.notification_id)),
        (
            "equipment_number",
            format!("\"{}\"", container_form(&f.container, form(rng, 4))),
        ),
        ("preferred_window", window),
        ("terminal", "\"ECT-DELTA\"".to_string()),
        ("pin", format!("\"{}\"", f.pin)),
        ("gross_mass_kg", mass_form(f.tonnes, form(rng, 4))),
    ];
    if rng.random_bool(0.7) {
        fields.shuffle(rng);
    }
    let (sep, colon) = match form(rng, 3) {
        1 => (", ", ": "),
        2 => (",\n  ", " : "),
        _ => (",", ":"),
    };
    let mut out = String::from("{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        let _ = write!(out, "\"{k}\"{colon}{v}");
    }
    out.push('}');
    out
}

/// The poison bodies the schedules draw from: each can never pass the strict parser.
pub(crate) fn poison(rng: &mut ChaCha8Rng, good: &Fields) -> (String, &'static str) {
    let mut bad = good.clone();
    match rng.random_range(0..9) {
        0 => ("{\"notificationId\": \"PCS-1\", ".to_string(), "not_json"),
        1 => ("[1,2,3]".to_string(), "not_an_object"),
        2 => (String::new(), "empty"),
        3 => {
            let body = serialise(&bad, rng).replace("\"pin\"", "\"pin_code\"");
            (body, "missing_pin")
        }
        4 => {
            let last = bad
                .container
                .pop()
                .and_then(|c| c.to_digit(10))
                .unwrap_or(0);
            bad.container.push_str(&((last + 1) % 10).to_string());
            (serialise(&bad, rng), "bad_check_digit")
        }
        5 => {
            std::mem::swap(&mut bad.start_ms, &mut bad.end_ms);
            (serialise(&bad, rng), "window_not_ordered")
        }
        6 => (
            serialise(&bad, rng).replace("ECT-DELTA", "APMT-MV2"),
            "unknown_terminal",
        ),
        7 => (
            serialise(&bad, rng).replace(&format!("\"{}\"", bad.pin), "4711"),
            "pin_not_a_string",
        ),
        _ => (
            serialise(&bad, rng).replace("notificationId", "notification_id"),
            "missing_notification_id",
        ),
    }
}
