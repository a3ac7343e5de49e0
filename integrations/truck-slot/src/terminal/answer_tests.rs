//! The terminal's hooks of the core classification: slots read and checked against the request's
//! secrets, excerpts scrubbed. The status table itself is tested once, in the core
//! (`gate::idempotency_key::classify`).

use gate::idempotency_key::{answer_digest, classify_lookup as core_lookup};

use super::*;

const PIN: &str = "PIN-XYZZY-7731";
const TOKEN: &str = "tok-PLUGH-0042";

fn known() -> TerminalAnswers<'static> {
    TerminalAnswers {
        secrets: vec![TOKEN, PIN],
        equipment_number: Some("CSQU3054383"),
        api: TerminalApi::Slots,
    }
}

fn claim_known(status: u16, body: &[u8], known: &TerminalAnswers<'_>) -> CallOutcome {
    classify_call(&Answer::new(status, body), known)
}

fn lookup_known(status: u16, body: &[u8], known: &TerminalAnswers<'_>) -> LookupOutcome {
    core_lookup(&Answer::new(status, body), known)
}

fn slot_id_valid(slot_id: &str) -> bool {
    slot_id_defect(slot_id, &[]).is_none()
}

/// The simulator's answers, as the deterministic simulation classifies them.
#[test]
fn the_simulators_answers() {
    assert_eq!(
        classify_claim(
            201,
            br#"{"slot_id":"S-1","equipment_number":"CSQU3054383"}"#
        ),
        CallOutcome::Done(Effect {
            effect_id: "S-1".into(),
            subject: Some("CSQU3054383".into())
        })
    );
    assert!(matches!(
        classify_claim(
            409,
            br#"{"type":"idempotency_mismatch","title":"Conflict","status":409}"#
        ),
        CallOutcome::KeyMismatch(_)
    ));
    assert_eq!(
        classify_claim(409, br#"{"type":"idempotency_key_in_flight"}"#),
        CallOutcome::KeyInFlight
    );
    let body =
        br#"{"type":"invalid_request","title":"Bad Request","status":400,"detail":"pin empty"}"#;
    let CallOutcome::Permanent { status, detail } = classify_claim(400, body) else {
        panic!("permanent");
    };
    assert_eq!(status, 400);
    assert_eq!(detail.excerpt(), Some("pin empty"));
    assert_eq!(
        detail.summary(),
        format!(
            "terminal answered 400 (no content type, {} bytes, keyed SHA-256 {}): the server \
             refused the request; the same request is refused again",
            body.len(),
            answer_digest(body)
        )
    );
    assert_eq!(detail.quoted(), format!("{}: pin empty", detail.summary()));
    for (status, body) in [
        (503, &br#"{"type":"service_unavailable","status":503}"#[..]),
        (504, br#"{"type":"upstream_response_lost","status":504}"#),
    ] {
        assert!(matches!(
            classify_claim(status, body),
            CallOutcome::Transient(_)
        ));
    }
    assert_eq!(
        classify_lookup(200, br#"{"slot":{"slot_id":"S-1"}}"#),
        LookupOutcome::Found(Effect {
            effect_id: "S-1".into(),
            subject: None
        })
    );
    assert_eq!(
        classify_lookup(404, br#"{"type":"not_found"}"#),
        LookupOutcome::NotFound
    );
}

/// Log lines get the summary: the status, the length and the keyed digest, never a character of
/// the answer, whatever the answer holds; the excerpt reaches only the quoted form.
#[test]
fn summaries_and_debug_never_quote_the_answer() {
    let body = br#"{"title":"upstream says: hello from the terminal"}"#;
    for outcome in [
        classify_claim(503, body),
        classify_claim(400, body),
        classify_claim(422, body),
        classify_claim(401, body),
    ] {
        let logged = format!("{outcome:?}");
        assert!(!logged.contains("hello"), "{logged}");
        assert!(logged.contains(&answer_digest(body)), "{logged}");
    }
    let LookupOutcome::Transient(why) = classify_lookup(500, body) else {
        panic!("transient");
    };
    assert!(!why.to_string().contains("hello"), "{why}");
    assert!(!format!("{why:?}").contains("hello"), "{why:?}");
    assert!(why.quoted().contains("hello"), "{}", why.quoted());
}

#[test]
fn slot_ids_must_be_short_printable_ascii() {
    assert!(slot_id_valid("ECTD-20250609-0800-0042"));
    assert!(slot_id_valid(&"S".repeat(MAX_SLOT_ID_CHARS)));
    for bad in [
        String::new(),
        "   ".to_string(),
        "S".repeat(MAX_SLOT_ID_CHARS + 1),
        "S-1\n".to_string(),
        "S-\u{1b}[31m".to_string(),
        "S-é".to_string(),
    ] {
        assert!(!slot_id_valid(&bad), "{bad:?}");
        let body = serde_json::json!({ "slot_id": bad }).to_string();
        let CallOutcome::Transient(why) = classify_claim(201, body.as_bytes()) else {
            panic!("{bad:?} must be transient");
        };
        assert!(why.summary().contains("may exist under the key"), "{why}");
        if bad.len() > 3 {
            assert!(!why.quoted().contains(bad.as_str()), "{why}");
        }
    }
    let CallOutcome::Transient(why) = classify_claim(201, br#"{"slot_id":42}"#) else {
        panic!("a number is not a slot id");
    };
    assert!(why.summary().contains("not a string"), "{why}");
    let CallOutcome::Transient(why) = classify_claim(200, b"<html>ok</html>") else {
        panic!("not JSON");
    };
    assert!(why.summary().contains("not JSON"), "{why}");
    // Duplicate keys in an answer are refused by serde's derive: no slot.
    assert!(matches!(
        classify_claim(201, br#"{"slot_id":"A","slot_id":"B"}"#),
        CallOutcome::Transient(_)
    ));
}

/// A slot id that quotes the PIN or the token, in any form, is an invalid answer (transient, like
/// every unusable slot id), for a claim and a lookup; the reason never quotes it.
#[test]
fn a_slot_id_quoting_a_secret_is_refused() {
    for slot_id in [
        "S-PIN-XYZZY-7731",
        "S-pinxyzzy7731",
        "S-PIN%2DXYZZY%2D7731",
        "S-tok-plugh-0042",
    ] {
        let body = serde_json::json!({"slot_id": slot_id, "equipment_number": "CSQU3054383"});
        let body = body.to_string();
        let CallOutcome::Transient(why) = claim_known(201, body.as_bytes(), &known()) else {
            panic!("{slot_id} must be refused");
        };
        assert!(why.summary().contains("quotes a secret"), "{why}");
        assert!(!why.quoted().to_lowercase().contains("xyzzy"), "{why}");
        let lookup = serde_json::json!({"slot": {"slot_id": slot_id}}).to_string();
        let LookupOutcome::Transient(why) = lookup_known(200, lookup.as_bytes(), &known()) else {
            panic!("{slot_id} must be refused by a lookup too");
        };
        assert!(why.summary().contains("quotes a secret"), "{why}");
        // Without the secrets (the simulator's classification) it is a slot like any other.
        assert!(matches!(
            classify_claim(201, body.as_bytes()),
            CallOutcome::Done(_)
        ));
    }
}

/// An answered equipment number that is the PIN is never kept as it is; the container asked for
/// is kept as it is even when it happens to contain the PIN's characters.
#[test]
fn an_echoed_equipment_number_is_scrubbed() {
    let body = serde_json::json!({"slot_id": "S-2", "equipment_number": "pin-xyzzy-7731"});
    let CallOutcome::Done(slot) = claim_known(201, body.to_string().as_bytes(), &known()) else {
        panic!("claimed");
    };
    assert_eq!(slot.subject.as_deref(), Some(EQUIPMENT_WITHHELD));
    let short = TerminalAnswers {
        secrets: vec!["3054"],
        equipment_number: Some("CSQU3054383"),
        api: TerminalApi::Slots,
    };
    let ours = serde_json::json!({"slot_id": "S-3", "equipment_number": "CSQU3054383"});
    let CallOutcome::Done(slot) = claim_known(201, ours.to_string().as_bytes(), &short) else {
        panic!("claimed");
    };
    assert_eq!(slot.subject.as_deref(), Some("CSQU3054383"));
}

#[test]
fn an_unreadable_equipment_number_cannot_match() {
    let body = serde_json::json!({"slot_id": "S-1", "equipment_number": "CSQU\n3054383"});
    let CallOutcome::Done(slot) = classify_claim(201, body.to_string().as_bytes()) else {
        panic!("claimed");
    };
    let e = slot.subject.unwrap();
    assert!(e.starts_with("(unreadable"), "{e}");
    assert!(!e.contains('\n'));
}

/// An `appointments-v2` answer is read in its own shape: the appointment's `id` is the slot id.
#[test]
fn an_appointments_v2_answer_is_reshaped() {
    let v2 = TerminalAnswers {
        api: TerminalApi::AppointmentsV2,
        ..known()
    };
    let body = br#"{"appointment":{"id":"APMT-1","container":{"number":"CSQU3054383"}}}"#;
    assert_eq!(
        claim_known(201, body, &v2),
        CallOutcome::Done(Effect {
            effect_id: "APMT-1".into(),
            subject: Some("CSQU3054383".into())
        })
    );
    assert!(matches!(
        lookup_known(200, body, &v2),
        LookupOutcome::Found(_)
    ));
    // The same bytes in the `slots` shape have no slot_id.
    assert!(matches!(
        claim_known(201, body, &known()),
        CallOutcome::Transient(_)
    ));
}

/// An answer that echoes the PIN in free text (a problem's `detail`), where the 300-character cut
/// falls inside the PIN: nothing of the PIN is left, not even its first half.
#[test]
fn a_secret_across_the_cut_is_scrubbed_before_the_cut() {
    let detail = format!("{}{PIN} tail", "x".repeat(DETAIL_MAX - 5));
    let body = serde_json::json!({ "detail": detail }).to_string();
    let CallOutcome::Transient(why) = claim_known(503, body.as_bytes(), &known()) else {
        panic!("transient");
    };
    assert!(!why.quoted().contains("PIN-X"), "{}", why.quoted());
    // Without a problem document, the excerpt path the same.
    let raw = format!("{}{PIN}", "y".repeat(DETAIL_MAX - 5));
    let CallOutcome::Transient(why) = claim_known(502, raw.as_bytes(), &known()) else {
        panic!("transient");
    };
    assert!(!why.quoted().contains("PIN-X"), "{}", why.quoted());
}

/// The issue's answers: a 503 and a lookup 500 that echo the PIN in another case, without
/// separators, JSON-escaped and percent-encoded; none reaches the excerpt.
#[test]
fn echoed_forms_are_cut_from_claim_and_lookup_excerpts() {
    for echo in [
        "upstream refused release pin pin-xyzzy-7731",
        "upstream refused release PINXYZZY7731",
        r"upstream refused release \u0050IN-XYZZY-7731",
        "upstream refused release PIN%2DXYZZY%2D7731, Bearer TOK-PLUGH-0042",
    ] {
        let CallOutcome::Transient(why) = claim_known(503, echo.as_bytes(), &known()) else {
            panic!("transient");
        };
        let text = why.quoted();
        assert!(text.contains("upstream refused release"), "{text}");
        assert!(!scrub::quotes_secret(&text, &[PIN, TOKEN]), "{text}");
        let body = serde_json::json!({"message": format!("lookup failed: {echo} is locked")});
        let LookupOutcome::Transient(why) =
            lookup_known(500, body.to_string().as_bytes(), &known())
        else {
            panic!("transient");
        };
        let text = why.quoted();
        assert!(text.contains("is locked"), "{text}");
        assert!(!scrub::quotes_secret(&text, &[PIN, TOKEN]), "{text}");
    }
}

/// A PIN too short to replace inside a text (here 3 digits) withholds any excerpt that holds it.
#[test]
fn a_short_secret_withholds_the_excerpt() {
    let body = br#"{"detail":"PIN 731 rejected by the gate"}"#;
    let short = TerminalAnswers {
        secrets: vec!["731"],
        ..TerminalAnswers::default()
    };
    let CallOutcome::Permanent { detail, .. } = claim_known(400, body, &short) else {
        panic!("permanent");
    };
    assert_eq!(detail.excerpt(), Some(scrub::WITHHELD));
}

#[test]
fn excerpts_redact_secret_keys_and_escape_controls() {
    let echoed = br#"{"title":"bad","request":{"pin":"PIN-XYZZY-7731","Release-Pin":"x","headers":{"Authorization":"Bearer tok-PLUGH-0042"}}}"#;
    let CallOutcome::Permanent { detail, .. } = classify_claim(418, echoed) else {
        panic!("permanent");
    };
    assert_eq!(detail.excerpt(), Some("bad"));
    // The problem has a title, so the title is the excerpt; the excerpt path:
    let text = excerpt(echoed, &[]);
    assert!(!text.contains("XYZZY") && !text.contains("PLUGH"), "{text}");
    assert!(text.contains("[redacted]"));
    assert_eq!(printable("a\nb\u{1b}", 10), "a\\nb\\u{1b}");
    assert_eq!(printable("abcdef", 3), "abc…");
}
