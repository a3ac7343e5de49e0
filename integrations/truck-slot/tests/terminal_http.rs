//! The HTTP terminal client's hardening, against a scripted terminal on loopback: it sends a
//! `User-Agent`, the token only in the `Authorization` header, follows no redirect (so neither the
//! token nor the PIN ever travels to a host the configuration did not name), reads a bounded
//! answer, and never quotes a secret the terminal echoes back.

mod support;

use serde_json::json;
use support::{json, raw, spawn};
use truck_slot::terminal::{
    ApiToken, CallOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal,
    USER_AGENT,
};

const PIN: &str = "PIN-XYZZY-7731";
const TOKEN: &str = "tok-PLUGH-0042";

fn request() -> Vec<u8> {
    json!({"equipment_number": "CSQU3054383", "window_start": "2026-12-01T08:00:00Z",
           "window_end": "2026-12-01T10:00:00Z", "pin": PIN})
    .to_string()
    .into_bytes()
}

fn client(base_url: &str) -> HttpTerminal {
    let mut config = HttpTerminalConfig::new(base_url);
    config.token = Some(ApiToken::new(TOKEN));
    HttpTerminal::new(config).unwrap()
}

/// What the gate may write anywhere of a claim's outcome: what a log line gets (`Debug`) and what
/// a record's `error` or a manual item gets (the summary, in our words).
fn text(outcome: &CallOutcome) -> String {
    let quoted = match outcome {
        CallOutcome::Transient(d)
        | CallOutcome::KeyMismatch(d)
        | CallOutcome::EffectRefused(d)
        | CallOutcome::Permanent { detail: d, .. }
        | CallOutcome::Declined { detail: d, .. } => d.to_string(),
        CallOutcome::Done(slot) => format!("{slot:?}"),
        CallOutcome::KeyInFlight => String::new(),
    };
    format!("{outcome:?} {quoted}")
}

/// The same for a lookup's outcome.
fn lookup_text(outcome: &LookupOutcome) -> String {
    let quoted = match outcome {
        LookupOutcome::Transient(d) | LookupOutcome::EffectRefused(d) => d.to_string(),
        LookupOutcome::Found(slot) => format!("{slot:?}"),
        LookupOutcome::NotFound => String::new(),
    };
    format!("{outcome:?} {quoted}")
}

#[tokio::test]
async fn sends_its_user_agent_and_the_token_in_the_authorization_header_only() {
    let terminal = spawn(|seen| {
        if seen.method == "POST" {
            json(
                201,
                json!({"slot_id": "S-1", "equipment_number": "CSQU3054383"}),
            )
        } else {
            json(200, json!({"slot": {"slot_id": "S-1"}}))
        }
    })
    .await;
    let http = client(&terminal.base_url);
    assert!(matches!(
        http.claim("key-1", &request()).await,
        CallOutcome::Done(_)
    ));
    assert!(matches!(
        http.lookup("key-1", &request()).await,
        LookupOutcome::Found(_)
    ));
    let seen = terminal.seen();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(s.header("user-agent"), Some(USER_AGENT));
        assert!(USER_AGENT.starts_with("exactly-once-gate/"));
        assert_eq!(
            s.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(!s.uri.contains(TOKEN), "{}", s.uri);
    }
    assert_eq!(seen[0].uri, "/slots");
    assert_eq!(seen[0].header("idempotency-key"), Some("\"key-1\""));
    assert_eq!(seen[0].body, request());
    assert_eq!(seen[1].uri, "/slots?idempotency_key=key-1");
}

#[tokio::test]
async fn follows_no_redirect_of_any_kind() {
    // A second server stands for the host a redirect points to: it must never hear from us.
    let elsewhere = spawn(|_| json(201, json!({"slot_id": "STOLEN"}))).await;
    for status in [301u16, 302, 303, 307, 308] {
        let target = format!("{}/slots", elsewhere.base_url);
        let terminal =
            spawn(move |_| (status, vec![("location", target.clone())], Vec::new())).await;
        let http = client(&terminal.base_url);
        let outcome = http.claim("key-2", &request()).await;
        let CallOutcome::Transient(why) = &outcome else {
            panic!("{status}: {outcome:?}");
        };
        assert!(why.summary().contains(&status.to_string()), "{why}");
        let LookupOutcome::Transient(why) = http.lookup("key-2", &request()).await else {
            panic!("{status}: lookup must be transient");
        };
        assert!(why.summary().contains(&status.to_string()), "{why}");
        assert_eq!(
            terminal.seen().len(),
            2,
            "one claim, one lookup, no second hop"
        );
    }
    assert!(elsewhere.seen().is_empty(), "{:?}", elsewhere.seen());
}

#[tokio::test]
async fn reads_a_bounded_answer() {
    // 4 MiB: a slot id followed by padding. Cut at 64 KiB, it is not JSON any more: transient.
    let huge = format!(
        "{{\"slot_id\":\"S-1\",\"pad\":\"{}\"}}",
        "x".repeat(4 * 1024 * 1024)
    );
    let huge_again = huge.clone();
    let terminal = spawn(move |seen| {
        if seen.method == "POST" {
            raw(201, huge_again.clone())
        } else {
            raw(500, huge_again.clone())
        }
    })
    .await;
    let http = client(&terminal.base_url);
    let outcome = http.claim("key-3", &request()).await;
    let CallOutcome::Transient(why) = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        why.to_string().len() < 1_000,
        "{} bytes",
        why.to_string().len()
    );
    let LookupOutcome::Transient(why) = http.lookup("key-3", &request()).await else {
        panic!("lookup must be transient");
    };
    assert!(
        why.to_string().len() < 1_000,
        "{} bytes",
        why.to_string().len()
    );
}

#[tokio::test]
async fn never_quotes_a_secret_the_terminal_echoes() {
    // A terminal that echoes the request body and the Authorization header as plain text.
    let terminal = spawn(|seen| {
        let body = String::from_utf8_lossy(&seen.body).into_owned();
        let auth = seen.header("authorization").unwrap_or("").to_string();
        raw(500, format!("you sent {body} with {auth}"))
    })
    .await;
    let http = client(&terminal.base_url);
    let outcome = http.claim("key-4", &request()).await;
    assert!(matches!(outcome, CallOutcome::Transient(_)));
    let t = text(&outcome);
    assert!(
        !t.contains("XYZZY") && !t.contains("PLUGH"),
        "secrets leaked: {t}"
    );
    assert!(
        !t.contains("you sent"),
        "nothing of the answer is kept: {t}"
    );
    let lookup = lookup_text(&http.lookup("key-4", &request()).await);
    assert!(
        !lookup.contains("XYZZY") && !lookup.contains("PLUGH"),
        "{lookup}"
    );
    assert!(!lookup.contains("you sent"), "{lookup}");
    // Only the operator's live view quotes the answer, scrubbed.
    let live = http
        .show_lookup_at("ECT-DELTA", "key-4", &request())
        .await
        .expect("the HTTP client shows its lookup");
    assert!(
        live.contains("you sent") && live.contains("[redacted]"),
        "{live}"
    );
    assert!(!live.contains("XYZZY") && !live.contains("PLUGH"), "{live}");

    // Every other status, as a problem document and as text.
    for status in [400u16, 403, 409, 422, 200, 201, 503] {
        let terminal = spawn(move |seen| {
            let body = String::from_utf8_lossy(&seen.body).into_owned();
            let auth = seen.header("authorization").unwrap_or("").to_string();
            let problem = json!({
                "type": if status == 409 { "idempotency_mismatch" } else { "bad_request" },
                "title": format!("rejected {body}"),
                "detail": format!("pin {PIN} refused for {auth}"),
                "request": serde_json::from_slice::<serde_json::Value>(&seen.body).ok(),
                "status": status,
            });
            json(status, problem)
        })
        .await;
        let http = client(&terminal.base_url);
        let t = text(&http.claim("key-5", &request()).await);
        assert!(
            !t.contains("XYZZY") && !t.contains("PLUGH"),
            "{status}: secrets leaked: {t}"
        );
    }
}

/// A terminal that echoes the PIN and the token in another case, without separators,
/// JSON-escaped, percent-encoded, as HTML references, hex and base64, in a claim's 4xx and 5xx,
/// in a lookup's 500, and as the slot id and the equipment number of a 2xx: none of it reaches
/// what the gate may write. The slot id that quotes the PIN is refused.
#[tokio::test]
async fn never_quotes_a_secret_echoed_in_another_form() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(PIN);
    let forms: Vec<String> = vec![
        PIN.to_lowercase(),
        PIN.replace('-', ""),
        PIN.replace('-', " "),
        r"\u0050IN-XYZZY-7731".to_string(),
        PIN.replace('-', "%2D"),
        "&#80;IN-XYZZY-7731".to_string(),
        b64,
        TOKEN.to_uppercase(),
        TOKEN.replace('-', "_"),
    ];
    for form in forms {
        for (status, kind) in [
            (503u16, "text"),
            (400, "problem"),
            (201, "slot"),
            (201, "equipment"),
        ] {
            let echo = form.clone();
            let terminal = spawn(move |seen| {
                let message = format!("upstream refused release {echo}");
                match (seen.method.as_str(), kind) {
                    ("GET", _) => raw(
                        500,
                        format!("lookup failed: slot for release {echo} is locked"),
                    ),
                    (_, "text") => raw(status, message),
                    (_, "problem") => json(status, json!({"type": "bad", "detail": message})),
                    (_, "slot") => json(
                        status,
                        json!({"slot_id": format!("S-{echo}"),
                                                        "equipment_number": "CSQU3054383"}),
                    ),
                    _ => json(status, json!({"slot_id": "S-2", "equipment_number": echo})),
                }
            })
            .await;
            let http = client(&terminal.base_url);
            let claim = http.claim("key-6", &request()).await;
            if kind == "slot" {
                assert!(
                    matches!(claim, CallOutcome::EffectRefused(_)),
                    "{form}: {claim:?}"
                );
            }
            let t = format!(
                "{} {}",
                text(&claim),
                lookup_text(&http.lookup("key-6", &request()).await)
            );
            let lower = t.to_lowercase();
            assert!(
                !lower.contains("xyzzy") && !lower.contains("plugh") && !t.contains(&form),
                "{form} ({status} {kind}) leaked: {t}"
            );
        }
    }
}
