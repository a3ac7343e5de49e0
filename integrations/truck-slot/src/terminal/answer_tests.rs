//! The terminal's hooks of the core classification: slots read, slot ids in the terminal's
//! declared format and checked against the request's secrets, nothing of an answer quoted; the
//! operator's scrubbed view. The status table itself is tested once, in the core
//! (`gate::idempotency_key::classify`).

use gate::idempotency_key::{answer_digest, classify_lookup as core_lookup};

use super::*;

const PIN: &str = "PIN-XYZZY-7731";
const TOKEN: &str = "tok-PLUGH-0042";

fn known() -> TerminalAnswers<'static> {
    TerminalAnswers {
        secrets: vec![TOKEN, PIN],
        slot_id_format: IdFormat::default(),
        api: TerminalApi::Slots,
    }
}

fn claim_known(status: u16, body: &[u8], known: &TerminalAnswers<'_>) -> CallOutcome {
    classify_call(&Answer::new(status, body), known)
}

fn lookup_known(status: u16, body: &[u8], known: &TerminalAnswers<'_>) -> LookupOutcome {
    core_lookup(&Answer::new(status, body), known)
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
    assert_eq!(
        detail.summary(),
        format!(
            "terminal answered 400 (no content type, {} bytes, keyed SHA-256 {}): the server \
             refused the request; the same request is refused again",
            body.len(),
            answer_digest(body)
        )
    );
    assert_eq!(detail.to_string(), detail.summary());
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
/// the answer, whatever the answer holds, and nothing else of the answer is kept.
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
}

/// A slot id outside the terminal's format (the strict default here; the issue's encodings of a
/// PIN `Rls-732039`) or over the core's bounds is refused, for a claim and a lookup, named only by
/// its keyed digest; an answer without a slot id is transient.
#[test]
fn slot_ids_outside_the_format_are_refused() {
    for bad in [
        "SLOT-UmxzLTczMjAzOQ==".to_string(),
        "SLOT-&#82&#76&#83&#45&#55".to_string(),
        "RLS&minus;732039".to_string(),
        "RLS&ndash;732039".to_string(),
        "S".repeat(65),
        "S".repeat(MAX_SLOT_ID_CHARS + 1),
        "S-1\n".to_string(),
        "S-\u{1b}[31m".to_string(),
        "S-é".to_string(),
        "S 1".to_string(),
    ] {
        let body = serde_json::json!({ "slot_id": bad }).to_string();
        let CallOutcome::EffectRefused(why) = classify_claim(201, body.as_bytes()) else {
            panic!("{bad:?} must be refused");
        };
        assert!(
            why.summary().contains("the effect exists under the key"),
            "{why}"
        );
        assert!(
            why.summary().contains(&answer_digest(bad.as_bytes())),
            "{why}"
        );
        assert!(!why.summary().contains(bad.as_str()), "{why}");
        let lookup = serde_json::json!({ "slot": { "slot_id": bad } }).to_string();
        assert!(matches!(
            classify_lookup(200, lookup.as_bytes()),
            LookupOutcome::EffectRefused(_)
        ));
    }
    for (body, why) in [
        (&br#"{"slot_id":42}"#[..], "not a string"),
        (b"<html>ok</html>", "not JSON"),
        (br#"{"slot_id":"  "}"#, "empty"),
        (br#"{"slot_id":""}"#, "empty"),
    ] {
        let CallOutcome::Transient(d) = classify_claim(201, body) else {
            panic!("{body:?} must be transient");
        };
        assert!(d.summary().contains(why), "{d}");
    }
    // Duplicate keys in an answer are refused by serde's derive: no slot.
    assert!(matches!(
        classify_claim(201, br#"{"slot_id":"A","slot_id":"B"}"#),
        CallOutcome::Transient(_)
    ));
}

/// A terminal declares its own format (its configuration); the default is the strict one.
#[test]
fn a_terminal_declares_its_format() {
    let declared = TerminalAnswers {
        slot_id_format: IdFormat::new("ECTD-[0-9]{8}-[0-9]{4}-[0-9]{4}", 23).expect("a format"),
        ..known()
    };
    let ok = br#"{"slot_id":"ECTD-20250609-0800-0042"}"#;
    assert!(matches!(
        claim_known(201, ok, &declared),
        CallOutcome::Done(_)
    ));
    let other = br#"{"slot_id":"S-1"}"#;
    assert!(matches!(
        claim_known(201, other, &declared),
        CallOutcome::EffectRefused(_)
    ));
    assert!(matches!(
        claim_known(201, other, &known()),
        CallOutcome::Done(_)
    ));
}

/// The second line: a slot id in the format that quotes the PIN or the token in any form the
/// scrubber knows (hex fits the format: `526c...` is hex of `Rls-732039`) is refused alike, for a
/// claim and a lookup; the reason never quotes it.
#[test]
fn a_slot_id_quoting_a_secret_is_refused() {
    let hex_pin = "SLOT-526c732d373332303339";
    let rls = TerminalAnswers {
        secrets: vec!["RLS-732039"],
        ..known()
    };
    let body = serde_json::json!({ "slot_id": hex_pin }).to_string();
    let CallOutcome::EffectRefused(why) = claim_known(201, body.as_bytes(), &rls) else {
        panic!("hex of the PIN must be refused");
    };
    assert!(why.summary().contains("quotes a secret"), "{why}");
    assert!(matches!(
        classify_claim(201, body.as_bytes()),
        CallOutcome::Done(_)
    ));
    for slot_id in [
        "S-PIN-XYZZY-7731",
        "S-pinxyzzy7731",
        "S-tok-plugh-0042",
        "S-50494e2d58595a5a592d37373331",
    ] {
        let body = serde_json::json!({"slot_id": slot_id, "equipment_number": "CSQU3054383"});
        let body = body.to_string();
        let CallOutcome::EffectRefused(why) = claim_known(201, body.as_bytes(), &known()) else {
            panic!("{slot_id} must be refused");
        };
        assert!(why.summary().contains("quotes a secret"), "{why}");
        assert!(!why.to_string().to_lowercase().contains("xyzzy"), "{why}");
        let lookup = serde_json::json!({"slot": {"slot_id": slot_id}}).to_string();
        let LookupOutcome::EffectRefused(why) = lookup_known(200, lookup.as_bytes(), &known())
        else {
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

/// The answered equipment number is kept as the terminal's text in memory only, to be compared
/// with the container asked for; the gate names another one by its keyed digest
/// (`gate::consumer`).
#[test]
fn the_answered_equipment_number_is_read_as_given() {
    let body = serde_json::json!({"slot_id": "S-2", "equipment_number": "CSQU3054383"});
    let CallOutcome::Done(slot) = claim_known(201, body.to_string().as_bytes(), &known()) else {
        panic!("claimed");
    };
    assert_eq!(slot.subject.as_deref(), Some("CSQU3054383"));
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

/// The issue's answers: a 503 and a lookup 500 that echo the PIN in another case, without
/// separators, JSON-escaped and percent-encoded: what the gate keeps is the summary, which holds
/// no character of the answer.
#[test]
fn echoed_forms_never_reach_what_is_kept() {
    for echo in [
        "upstream refused release pin pin-xyzzy-7731",
        "upstream refused release PINXYZZY7731",
        r"upstream refused release \u0050IN-XYZZY-7731",
        "upstream refused release PIN%2DXYZZY%2D7731, Bearer TOK-PLUGH-0042",
    ] {
        let CallOutcome::Transient(why) = claim_known(503, echo.as_bytes(), &known()) else {
            panic!("transient");
        };
        let text = why.to_string();
        assert!(!text.contains("upstream"), "{text}");
        assert!(!scrub::quotes_secret(&text, &[PIN, TOKEN]), "{text}");
        let body = serde_json::json!({"message": format!("lookup failed: {echo} is locked")});
        let LookupOutcome::Transient(why) =
            lookup_known(500, body.to_string().as_bytes(), &known())
        else {
            panic!("transient");
        };
        let text = why.to_string();
        assert!(!text.contains("locked"), "{text}");
        assert!(!scrub::quotes_secret(&text, &[PIN, TOKEN]), "{text}");
    }
}

/// What `gatectl lookup` prints: secret-looking keys redacted, every secret cut out before the
/// cut (so a secret across it leaves nothing), control characters escaped.
#[test]
fn the_operators_view_is_scrubbed_and_bounded() {
    let echoed = br#"{"title":"bad","request":{"pin":"PIN-XYZZY-7731","Release-Pin":"x","headers":{"Authorization":"Bearer tok-PLUGH-0042"}}}"#;
    let text = for_the_operator(echoed, &[]);
    assert!(!text.contains("XYZZY") && !text.contains("PLUGH"), "{text}");
    assert!(
        text.contains("[redacted]") && text.contains("bad"),
        "{text}"
    );
    let raw = format!("{}{PIN}", "y".repeat(OPERATOR_VIEW_MAX - 5));
    let text = for_the_operator(raw.as_bytes(), &[PIN, TOKEN]);
    assert!(!text.contains("PIN-X"), "{text}");
    let text = for_the_operator(b"release pin-xyzzy-7731 \x1b[31m", &[PIN, TOKEN]);
    assert!(
        !text.to_lowercase().contains("xyzzy") && !text.contains('\u{1b}'),
        "{text}"
    );
    assert_eq!(printable("a\nb\u{1b}", 10), "a\\nb\\u{1b}");
    assert_eq!(printable("abcdef", 3), "abc…");
}
