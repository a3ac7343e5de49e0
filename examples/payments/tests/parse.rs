//! The invoice event's parse: a good event's key, fingerprint material, request and labels; every
//! malformed or oversized event rejected with its typed reason; the card token a secret (in the
//! request only, never in the fingerprint, the labels or any `Debug`).

use gate::integration::{Integration, Parsed};
use gate_lambda::SecretString;
use payments::Payments;
use serde_json::{json, Value};

fn client() -> Payments {
    Payments {
        url: "http://127.0.0.1:9".into(),
        key: SecretString::new("sk_live_do_not_log"),
        http: reqwest::Client::new(),
    }
}

fn body(patch: &[(&str, Value)]) -> String {
    let mut v = json!({"invoice_id": "INV-1", "customer": "cus_1", "amount_minor": 12500,
        "currency": "EUR", "payment_method": "pm_card_secret_4242"});
    for (k, x) in patch {
        if x.is_null() {
            v.as_object_mut().unwrap().remove(*k);
        } else {
            v[*k] = x.clone();
        }
    }
    v.to_string()
}

/// The code and the detail of a rejected body.
fn rejected(body: &str) -> (&'static str, String) {
    match client().parse(body, 0) {
        Parsed::Rejected(r) => (r.code, r.detail),
        other => panic!("accepted: {other:?}"),
    }
}

#[test]
fn a_good_invoice_is_one_charge() {
    let Parsed::Event(e) = client().parse(&body(&[]), 0) else {
        panic!()
    };
    assert_eq!(e.key_material, "invoice:INV-1");
    assert_eq!(
        e.business_fields,
        json!({"invoice_id": "INV-1", "customer": "cus_1", "amount": 12500, "currency": "EUR"})
    );
    let request: Value = serde_json::from_slice(&e.request).unwrap();
    assert_eq!(request["payment_method"], "pm_card_secret_4242");
    assert_eq!(request["amount"], 12500);
    assert_eq!(request["metadata"]["invoice_id"], "INV-1");
    assert_eq!(e.labels["invoice"], "INV-1");
    assert_eq!(e.ends_at_ms, None);
    // The token is a secret: not in the fingerprint's material, the labels, or any Debug.
    let debug = format!("{e:?} {:?}", client());
    for shown in [
        e.business_fields.to_string(),
        format!("{:?}", e.labels),
        debug,
    ] {
        assert!(!shown.contains("pm_card_secret"), "{shown}");
        assert!(!shown.contains("sk_live"), "{shown}");
    }
}

/// Each malformed event: its code and the field its detail names; no detail quotes the body.
#[test]
fn every_malformed_event_has_its_typed_reason() {
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("{{\"pad\":\"{}\"}}", "x".repeat(8 * 1024)),
            "body_too_large",
            "over 8192",
        ),
        ("{not json".into(), "not_json", "JSON object"),
        ("[1]".into(), "not_json", "JSON object"),
        (
            r#"{"invoice_id":"A","invoice_id":"B"}"#.into(),
            "not_json",
            "unique keys",
        ),
        (
            body(&[("payment_method", Value::Null)]),
            "missing_field",
            "payment_method",
        ),
        (
            body(&[("note_pm_x", json!("x"))]),
            "unknown_field",
            "a field other than",
        ),
        (
            body(&[("invoice_id", json!(""))]),
            "bad_field",
            "invoice_id",
        ),
        (
            body(&[("customer", json!("cus 1"))]),
            "bad_field",
            "customer",
        ),
        (
            body(&[("invoice_id", json!("I".repeat(65)))]),
            "bad_field",
            "invoice_id",
        ),
        (
            body(&[("amount_minor", json!(0))]),
            "bad_field",
            "amount_minor",
        ),
        (
            body(&[("amount_minor", json!(125.5))]),
            "bad_field",
            "amount_minor",
        ),
        (
            body(&[("amount_minor", json!(100_000_000))]),
            "bad_field",
            "amount_minor",
        ),
        (
            body(&[("amount_minor", json!("12500"))]),
            "bad_field",
            "amount_minor",
        ),
        (
            body(&[("currency", json!("eur"))]),
            "bad_field",
            "currency: not 3 upper-case",
        ),
        (
            body(&[("currency", json!("EURO"))]),
            "bad_field",
            "currency",
        ),
        (
            body(&[("payment_method", json!(""))]),
            "bad_field",
            "payment_method",
        ),
        (
            body(&[("payment_method", json!(7))]),
            "bad_field",
            "payment_method",
        ),
    ];
    for (body, want, names) in cases {
        let (code, detail) = rejected(&body);
        assert_eq!(code, want, "{body:.80}");
        assert!(detail.contains(names), "{detail:?} does not name {names:?}");
        assert!(
            !detail.contains("pm_card") && !detail.contains("note_pm"),
            "{detail}"
        );
    }
}

/// A declined card reaches a person under payments' own code and text (the core's
/// `ManualReason::Declined`), read back from the item's JSON; the other reasons keep the core's.
#[test]
fn a_declined_card_is_card_declined_on_the_manual_item() {
    use gate::manual::{ManualItem, ManualReason};
    let payments = client();
    let code = |r: ManualReason| payments.manual_reason_code(r);
    assert_eq!(code(ManualReason::Declined), "card_declined");
    assert_eq!(code(ManualReason::Mismatch), "mismatch");
    assert!(payments
        .manual_reason_text(ManualReason::Declined)
        .starts_with("the card was declined"));
    let item = ManualItem {
        reason: ManualReason::Declined,
        detail: "payments API answered 402".into(),
        original_body: body(&[]),
        event_key: Some("ab".repeat(32)),
        message_id: "m-1".into(),
        original_body_cut: None,
    };
    let json: Value = serde_json::from_slice(&item.to_json_with(code)).unwrap();
    assert_eq!(json["reason"], "card_declined");
    let back = ManualItem::from_json_with(&item.to_json_with(code), code);
    assert_eq!(back, Some(item));
}
