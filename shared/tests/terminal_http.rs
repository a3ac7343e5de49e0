//! The HTTP terminal client's hardening, against a scripted terminal on loopback: it sends a
//! `User-Agent`, the token only in the `Authorization` header, follows no redirect (so neither the
//! token nor the PIN ever travels to a host the configuration did not name), reads a bounded
//! answer, and never quotes a secret the terminal echoes back.

mod support;

use gate::terminal::{
    ApiToken, ClaimOutcome, HttpTerminal, HttpTerminalConfig, LookupOutcome, SlotTerminal,
    USER_AGENT,
};
use serde_json::json;
use support::{json, raw, spawn};

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

fn text(outcome: &ClaimOutcome) -> String {
    format!("{outcome:?}")
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
        ClaimOutcome::Claimed(_)
    ));
    assert!(matches!(
        http.lookup("key-1").await,
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
        let ClaimOutcome::Transient(why) = &outcome else {
            panic!("{status}: {outcome:?}");
        };
        assert!(why.contains(&status.to_string()), "{why}");
        let LookupOutcome::Transient(why) = http.lookup("key-2").await else {
            panic!("{status}: lookup must be transient");
        };
        assert!(why.contains(&status.to_string()), "{why}");
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
    let ClaimOutcome::Transient(why) = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(why.len() < 1_000, "{} bytes", why.len());
    let LookupOutcome::Transient(why) = http.lookup("key-3").await else {
        panic!("lookup must be transient");
    };
    assert!(why.len() < 1_000, "{} bytes", why.len());
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
    assert!(matches!(outcome, ClaimOutcome::Transient(_)));
    let t = text(&outcome);
    assert!(
        !t.contains("XYZZY") && !t.contains("PLUGH"),
        "secrets leaked: {t}"
    );
    assert!(t.contains("[redacted]"), "{t}");
    let lookup = format!("{:?}", http.lookup("key-4").await);
    assert!(!lookup.contains("PLUGH"), "{lookup}");

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
