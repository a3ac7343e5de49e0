//! Tests of `notification`.

use super::*;
use crate::iso6346::EquipmentNumberError;

const NOW: i64 = 1_749_441_600_000; // 2025-06-09T04:00:00Z

fn terminals() -> Vec<String> {
    vec!["ECT-DELTA".to_string()]
}

fn body(over: &[(&str, Value)]) -> String {
    let mut v = serde_json::json!({
        "notificationId": "N-1",
        "equipment_number": "CSQU3054383",
        "preferred_window": {"start": "2025-06-09T08:00:00Z", "end": "2025-06-09T10:00:00Z"},
        "terminal": "ECT-DELTA",
        "pin": "4711"
    });
    for (k, val) in over {
        if val.is_null() {
            v.as_object_mut().map(|o| o.remove(*k));
        } else {
            v[*k] = val.clone();
        }
    }
    v.to_string()
}

#[test]
fn parses_a_good_body() {
    let n = parse_notification(&body(&[]), NOW, &terminals()).unwrap();
    assert_eq!(n.notification_id, "N-1");
    assert_eq!(n.equipment_number.as_str(), "CSQU3054383");
    assert_eq!(n.preferred_window.start_rfc3339(), "2025-06-09T08:00:00Z");
    assert_eq!(n.terminal, "ECT-DELTA");
    assert_eq!(n.pin.expose(), "4711");
    assert_eq!(format!("{:?}", n.pin), "Pin([redacted])");
    assert!(!format!("{n:?}").contains("4711"), "{n:?}");
}

#[test]
fn each_way_to_be_wrong_has_its_reason() {
    let t = terminals();
    assert!(matches!(
        parse_notification("{bad", NOW, &t),
        Err(RejectReason::NotJson(_))
    ));
    assert!(matches!(
        parse_notification("[1]", NOW, &t),
        Err(RejectReason::NotJson(_))
    ));
    assert_eq!(
        parse_notification(&body(&[("notificationId", Value::Null)]), NOW, &t).unwrap_err(),
        RejectReason::MissingField("notificationId")
    );
    assert_eq!(
        parse_notification(&body(&[("pin", Value::from(" "))]), NOW, &t).unwrap_err(),
        RejectReason::EmptyField("pin")
    );
    assert_eq!(
        parse_notification(&body(&[("pin", Value::from(4711))]), NOW, &t).unwrap_err(),
        RejectReason::WrongType {
            field: "pin",
            expected: "a string"
        }
    );
    assert!(matches!(
        parse_notification(
            &body(&[("equipment_number", Value::from("CSQU3054384"))]),
            NOW,
            &t
        ),
        Err(RejectReason::BadEquipmentNumber(
            EquipmentNumberError::CheckDigit { expected: 3, .. }
        ))
    ));
    let reversed =
        serde_json::json!({"start": "2025-06-09T10:00:00Z", "end": "2025-06-09T08:00:00Z"});
    assert_eq!(
        parse_notification(&body(&[("preferred_window", reversed)]), NOW, &t)
            .unwrap_err()
            .code(),
        "window_not_ordered"
    );
    let late = NOW + 24 * 3600 * 1000;
    assert_eq!(
        parse_notification(&body(&[]), late, &t).unwrap_err(),
        RejectReason::WindowEnded {
            end: "2025-06-09T10:00:00Z".into()
        }
    );
    // The reason gives the parsed instant in the gate's words, never the body's spelling of it.
    let offset = serde_json::json!({"start": "2025-06-09T10:00:00+02:00", "end": "2025-06-09T12:00:00.000+02:00"});
    let reason = parse_notification(&body(&[("preferred_window", offset)]), late, &t).unwrap_err();
    assert_eq!(
        reason,
        RejectReason::WindowEnded {
            end: "2025-06-09T10:00:00Z".into()
        }
    );
    assert!(!reason.to_string().contains("+02:00"), "{reason}");
    assert_eq!(
        parse_notification(&body(&[("terminal", Value::from("APMT-2"))]), NOW, &t).unwrap_err(),
        RejectReason::UnknownTerminal
    );
    let bad_time = serde_json::json!({"start": "yesterday", "end": "2025-06-09T08:00:00Z"});
    assert_eq!(
        parse_notification(&body(&[("preferred_window", bad_time)]), NOW, &t)
            .unwrap_err()
            .code(),
        "bad_timestamp"
    );
}

fn code_of(body: &str) -> &'static str {
    parse_notification(body, NOW, &terminals())
        .map(|_| "ok")
        .unwrap_or_else(|e| e.code())
}

#[test]
fn limits_at_the_edge() {
    // Size: exactly the limit passes (padding in an extra field), one byte more does not.
    let base = body(&[("padding", Value::from(""))]);
    let pad = MAX_BODY_BYTES - base.len();
    let at_limit = body(&[("padding", Value::from("x".repeat(pad)))]);
    assert_eq!(at_limit.len(), MAX_BODY_BYTES);
    assert_eq!(code_of(&at_limit), "ok");
    let over = body(&[("padding", Value::from("x".repeat(pad + 1)))]);
    assert_eq!(
        parse_notification(&over, NOW, &terminals()).unwrap_err(),
        RejectReason::BodyTooLarge {
            bytes: MAX_BODY_BYTES + 1,
            limit: MAX_BODY_BYTES
        }
    );
    // Field lengths, in characters (not bytes).
    let id = "é".repeat(MAX_NOTIFICATION_ID_CHARS);
    assert_eq!(code_of(&body(&[("notificationId", Value::from(id))])), "ok");
    for (field, limit) in [
        ("notificationId", MAX_NOTIFICATION_ID_CHARS),
        ("pin", MAX_PIN_CHARS),
        ("terminal", MAX_TERMINAL_CHARS),
        ("equipment_number", MAX_EQUIPMENT_NUMBER_CHARS),
    ] {
        let long = Value::from("A".repeat(limit + 1));
        assert_eq!(
            parse_notification(&body(&[(field, long)]), NOW, &terminals()).unwrap_err(),
            RejectReason::FieldTooLong {
                field,
                chars: limit + 1,
                limit
            },
            "{field}"
        );
    }
}

#[test]
fn control_and_replacement_characters_are_refused() {
    for (field, value) in [
        ("notificationId", r"N-1\u0000"),
        ("pin", r"47\n11"),
        ("terminal", r"ECT-DELTA\r"),
        ("notificationId", r"N\u007f1"),
        ("pin", r"47\u009b11"),
    ] {
        let text = body(&[]).replacen(
            &format!("\"{field}\":"),
            &format!("\"{field}\":\"{value}\",\"x-{field}\":"),
            1,
        );
        let err = parse_notification(&text, NOW, &terminals()).unwrap_err();
        assert!(
            matches!(err, RejectReason::ControlCharacter { field: f, .. } if f == field),
            "{field} {value}: {err:?}"
        );
    }
    let err = parse_notification(
        &body(&[("notificationId", Value::from("PCS-\u{fffd}-1"))]),
        NOW,
        &terminals(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        RejectReason::ReplacementCharacter {
            field: "notificationId",
            position: 4
        }
    );
    // A lone surrogate escape is not a character: not JSON.
    let lone = body(&[]).replace("\"N-1\"", "\"N-\\ud800\"");
    assert!(lone.contains("\\ud800"));
    assert_eq!(code_of(&lone), "not_json");
}

#[test]
fn numbers_where_strings_belong() {
    for field in ["notificationId", "equipment_number", "terminal", "pin"] {
        assert_eq!(
            parse_notification(&body(&[(field, Value::from(12345))]), NOW, &terminals())
                .unwrap_err(),
            RejectReason::WrongType {
                field,
                expected: "a string"
            }
        );
    }
    let numeric_window = serde_json::json!({"start": 1749456000, "end": "2025-06-09T10:00:00Z"});
    assert_eq!(
        code_of(&body(&[("preferred_window", numeric_window)])),
        "wrong_type"
    );
}

#[test]
fn duplicate_keys_are_refused_at_any_depth() {
    let twice = body(&[]).replacen("\"pin\":", "\"pin\":\"1111\",\"pin\":", 1);
    assert_eq!(
        parse_notification(&twice, NOW, &terminals()).unwrap_err(),
        RejectReason::DuplicateKey("\"pin\"".into())
    );
    let nested = body(&[]).replacen("\"start\":", "\"start\":\"x\",\"start\":", 1);
    assert_eq!(code_of(&nested), "duplicate_key");
}

#[test]
fn a_window_years_away_is_refused() {
    let far = serde_json::json!({"start": "2031-06-09T08:00:00Z", "end": "2031-06-09T10:00:00Z"});
    assert_eq!(
        parse_notification(&body(&[("preferred_window", far)]), NOW, &terminals()).unwrap_err(),
        RejectReason::WindowTooFarAhead {
            end: "2031-06-09T10:00:00Z".into(),
            limit_days: MAX_WINDOW_AHEAD_DAYS
        }
    );
    // Eleven months ahead is fine.
    let near = serde_json::json!({"start": "2026-05-09T08:00:00Z", "end": "2026-05-09T10:00:00Z"});
    assert_eq!(code_of(&body(&[("preferred_window", near)])), "ok");
}

#[test]
fn no_reason_quotes_the_pin() {
    let pin = "PIN-XYZZY-7731";
    let mut reasons = Vec::new();
    for over in [
        vec![("pin", Value::from(format!("{pin}\n")))],
        vec![("pin", Value::from(format!("{pin}{}", "9".repeat(80))))],
        vec![("pin", Value::from(format!("{pin}\u{fffd}")))],
        vec![("pin", Value::from(pin)), ("terminal", Value::from("NOPE"))],
        vec![("pin", Value::from(pin)), ("terminal", Value::from(pin))],
        vec![
            ("pin", Value::from(pin)),
            ("notificationId", Value::from(format!("{pin} "))),
        ],
    ] {
        let text = body(&over);
        reasons.push(parse_notification(&text, NOW, &terminals()).unwrap_err());
    }
    let twice =
        body(&[("pin", Value::from(pin))]).replacen('{', &format!("{{\"{pin}\":1,\"{pin}\":2,"), 1);
    reasons.push(parse_notification(&twice, NOW, &terminals()).unwrap_err());
    assert_eq!(
        reasons.last().map(RejectReason::code),
        Some("duplicate_key")
    );
    for r in reasons {
        assert!(!format!("{r} {r:?}").contains("XYZZY"), "{r:?}");
    }
}
