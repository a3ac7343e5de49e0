//! Identifiers that look alike and numbers that would collapse: refused, never merged.

use super::*;

#[tokio::test]
async fn a_notification_id_with_a_trailing_space_is_refused() {
    let item = assert_rejected(
        Some(&with("notificationId", Value::from("PCS-77 "))),
        "surrounding_whitespace",
    )
    .await;
    assert!(item.detail.contains("notificationId"), "{}", item.detail);
    assert_rejected(
        Some(&with("notificationId", Value::from(" PCS-77"))),
        "surrounding_whitespace",
    )
    .await;
}

#[tokio::test]
async fn a_notification_id_with_an_invisible_character_is_refused() {
    for (value, code_point) in [
        ("PCS-77\u{200b}", "U+200B"),
        ("PCS-77\u{feff}", "U+FEFF"),
        ("PCS\u{2060}-77", "U+2060"),
        ("PCS-\u{202e}77", "U+202E"),
        ("PCS-\u{2066}77\u{2069}", "U+2066"),
        ("PCS-7\u{ad}7", "U+00AD"),
        ("PCS-77\u{fe0f}", "U+FE0F"),
        ("PCS\u{a0}77", "U+00A0"),
        ("PCS-77\u{3000}", "U+3000"),
    ] {
        let item = assert_rejected(
            Some(&with("notificationId", Value::from(value))),
            "invisible_character",
        )
        .await;
        assert!(
            item.detail.contains(code_point),
            "{value:?}: {}",
            item.detail
        );
    }
    // In the other identifiers too.
    assert_rejected(
        Some(&with(
            "equipment_number",
            Value::from("CSQU3054383\u{200b}"),
        )),
        "invisible_character",
    )
    .await;
    assert_rejected(
        Some(&with("terminal", Value::from("ECT-DELTA\u{200d}"))),
        "invisible_character",
    )
    .await;
}

#[tokio::test]
async fn a_notification_id_not_in_nfc_is_refused() {
    // "é" as "e" + U+0301 (decomposed); the precomposed U+00E9 is NFC and passes.
    let item = assert_rejected(
        Some(&with(
            "notificationId",
            Value::from("PCS-Caf\u{65}\u{301}-77"),
        )),
        "not_nfc",
    )
    .await;
    assert!(item.detail.contains("notificationId"), "{}", item.detail);
    // U+212B ANGSTROM SIGN is not NFC either (it is U+00C5 in NFC).
    assert_rejected(
        Some(&with("notificationId", Value::from("PCS-\u{212b}-77"))),
        "not_nfc",
    )
    .await;
}

/// Three look-alike bodies for one container: one event (one record, one slot, one booking) and
/// two rejections, not three slots.
#[tokio::test]
async fn look_alike_ids_make_one_event_and_two_rejections() {
    let (w, terminal) = scripted_world(|_| {
        json(
            201,
            json!({"slot_id": "S-77", "equipment_number": CONTAINER}),
        )
    })
    .await;
    let ids = ["PCS-77", "PCS-77 ", "PCS-77\u{200b}"];
    let mut outcomes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let body = with("notificationId", Value::from(*id));
        let report = w
            .gate
            .handle_batch(
                event(&format!("m-{i}"), Some(&body)),
                &invocation(&w, "inv-1"),
            )
            .await;
        outcomes.push(report.records[0].outcome.clone());
    }
    assert!(
        matches!(outcomes[0], RecordOutcome::Committed { .. }),
        "{outcomes:?}"
    );
    let codes: Vec<&str> = outcomes[1..]
        .iter()
        .map(|o| match o {
            RecordOutcome::Rejected(r) => r.code(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(codes, ["surrounding_whitespace", "invisible_character"]);
    assert_eq!(terminal.seen().len(), 1, "one claim");
    assert_eq!(w.store.business_rows().len(), 1, "one booking");
    let items = w.manual.items();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i.reason == ManualReason::Rejected));
}

#[tokio::test]
async fn integers_beyond_2_pow_53_are_refused_not_collapsed() {
    // 2^53 + 1 and 2^53 canonicalise to the same double: refused, each with its reason.
    for n in [
        "9007199254740993",
        "9007199254740992",
        "-9007199254740993",
        "1e16",
    ] {
        let body = good()
            .to_string()
            .replace("\"pin\"", &format!("\"gross_mass_kg\":{n},\"pin\""));
        assert!(body.contains(n));
        let item = assert_rejected(Some(&body), "number_out_of_range").await;
        assert!(item.detail.contains("RFC 7493"), "{}", item.detail);
    }
    // 2^53 - 1 is exact: accepted (not rejected).
    let body = good()
        .to_string()
        .replace("\"pin\"", "\"gross_mass_kg\":9007199254740991,\"pin\"");
    let w = world(Arc::new(Untouched::default()));
    let report = w
        .gate
        .handle_batch(event("m-1", Some(&body)), &invocation(&w, "inv-1"))
        .await;
    assert!(
        !matches!(report.records[0].outcome, RecordOutcome::Rejected(_)),
        "{:?}",
        report.records[0].outcome
    );
}

#[tokio::test]
async fn numbers_more_precise_than_a_double_are_refused_not_collapsed() {
    for n in ["0.10000000000000001", "25000.0000000000000001", "1e-400"] {
        let body = good()
            .to_string()
            .replace("\"pin\"", &format!("\"gross_mass_kg\":{n},\"pin\""));
        assert_rejected(Some(&body), "number_not_exact").await;
    }
}

/// A reason never quotes body text: a PIN in the terminal field, or as a duplicated key, does
/// not reach the reason (which is logged) nor the manual item's detail.
#[tokio::test]
async fn reasons_quote_no_body_text() {
    let pin = "RLS-104233";
    let item = assert_rejected(
        Some(&with("terminal", Value::from(pin))),
        "unknown_terminal",
    )
    .await;
    assert!(!item.detail.contains(pin), "{}", item.detail);
    let body = good()
        .to_string()
        .replacen('{', &format!("{{\"{pin}\":1,\"{pin}\":2,"), 1);
    let item = assert_rejected(Some(&body), "duplicate_key").await;
    assert!(!item.detail.contains(pin), "{}", item.detail);
    assert!(item.original_body.contains(pin), "the person gets the body");
}
