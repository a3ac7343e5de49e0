//! Tests of `signature`.

use super::*;

const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn secret(byte: u8) -> WebhookSecret {
    WebhookSecret::from_bytes(vec![byte; 32]).unwrap()
}

fn headers<'a>(id: &'a str, ts: &'a str, sig: &'a str) -> SignatureHeaders<'a> {
    SignatureHeaders {
        id: Some(id),
        timestamp: Some(ts),
        signature: Some(sig),
    }
}

/// The test vector of the `standardwebhooks` crate (and the spec's other libraries).
#[test]
fn the_reference_vector() {
    let s = WebhookSecret::parse("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
    assert_eq!(
        s.sign(
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            br#"{"email":"test@example.com","username":"test_user"}"#
        ),
        "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
    );
}

/// Both directions against the reference implementation: its signature verifies here, ours
/// verifies there (it reads the system clock, so the timestamp is now).
#[test]
fn interoperates_with_the_standardwebhooks_crate() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let body = br#"{"notificationId":"N-1"}"#;
    let reference = standardwebhooks::Webhook::new(SPEC_SECRET).unwrap();
    let theirs = reference.sign("msg_1", now, body).unwrap();
    let ours = SecretSet::parse_json(&format!(r#"{{"active":["{SPEC_SECRET}"]}}"#)).unwrap();
    let ts = now.to_string();
    assert_eq!(
        verify(&ours, &headers("msg_1", &ts, &theirs), body, now),
        Ok(Verified { secret_index: 0 })
    );
    let mine = ours.secrets()[0].sign("msg_1", now, body);
    assert_eq!(mine, theirs);
    let mut map = http::HeaderMap::new();
    map.insert(HEADER_ID, "msg_1".parse().unwrap());
    map.insert(HEADER_TIMESTAMP, ts.parse().unwrap());
    map.insert(
        HEADER_SIGNATURE,
        format!("v1,bm9wZQ== {mine}").parse().unwrap(),
    );
    reference.verify(body, &map).unwrap();
}

#[test]
fn several_signatures_and_several_secrets() {
    let (old, new, other) = (secret(1), secret(2), secret(3));
    let body = b"{}";
    let both = SecretSet::new(vec![old.clone(), new.clone()]).unwrap();
    let now = 1_800_000_000;
    let ts = now.to_string();
    // The sender signs with the new secret only: the second active secret matches.
    let sig = new.sign("msg_a", now, body);
    assert_eq!(
        verify(&both, &headers("msg_a", &ts, &sig), body, now),
        Ok(Verified { secret_index: 1 })
    );
    // The sender signs with an unknown and the old secret, plus a v1a and junk entries.
    let sig = format!(
        "v1a,AAAA {} garbage v1,!!! {}",
        other.sign("msg_a", now, body),
        old.sign("msg_a", now, body)
    );
    assert_eq!(
        verify(&both, &headers("msg_a", &ts, &sig), body, now),
        Ok(Verified { secret_index: 0 })
    );
    // Only the unknown secret: refused.
    let sig = other.sign("msg_a", now, body);
    assert_eq!(
        verify(&both, &headers("msg_a", &ts, &sig), body, now),
        Err(VerifyError::InvalidSignature)
    );
    // The right MAC under another version tag is not a v1 signature.
    let sig = old.sign("msg_a", now, body).replacen("v1,", "v2,", 1);
    assert_eq!(
        verify(&both, &headers("msg_a", &ts, &sig), body, now),
        Err(VerifyError::InvalidSignature)
    );
}

#[test]
fn the_mac_covers_id_timestamp_and_body() {
    let s = secret(7);
    let set = SecretSet::new(vec![s.clone()]).unwrap();
    let now = 1_800_000_000;
    let ts = now.to_string();
    let sig = s.sign("msg_a", now, b"{\"a\":1}");
    let ok = verify(&set, &headers("msg_a", &ts, &sig), b"{\"a\":1}", now);
    assert_eq!(ok, Ok(Verified { secret_index: 0 }));
    for (id, ts, body) in [
        ("msg_b", ts.as_str(), &b"{\"a\":1}"[..]),
        ("msg_a", "1800000001", &b"{\"a\":1}"[..]),
        ("msg_a", ts.as_str(), &b"{\"a\":2}"[..]),
        ("msg_a", ts.as_str(), &b"{\"a\":1} "[..]),
    ] {
        assert_eq!(
            verify(&set, &headers(id, ts, &sig), body, now),
            Err(VerifyError::InvalidSignature),
            "{id} {ts} {body:?}"
        );
    }
}

#[test]
fn the_tolerance_is_five_minutes_either_way() {
    let s = secret(9);
    let set = SecretSet::new(vec![s.clone()]).unwrap();
    let now = 1_800_000_000;
    for (offset, ok) in [
        (0, true),
        (300, true),
        (-300, true),
        (301, false),
        (-301, false),
        (360, false),
        (-360, false),
    ] {
        let ts = now - offset;
        let sig = s.sign("msg_a", ts, b"{}");
        let got = verify(&set, &headers("msg_a", &ts.to_string(), &sig), b"{}", now);
        if ok {
            assert!(got.is_ok(), "{offset}: {got:?}");
        } else {
            assert_eq!(got, Err(VerifyError::StaleTimestamp { skew_s: offset }));
        }
    }
    assert_eq!(
        VerifyError::StaleTimestamp { skew_s: 360 }.to_string(),
        "webhook-timestamp is 360 s behind the receiver's clock (tolerance 300 s)"
    );
    assert_eq!(
        VerifyError::StaleTimestamp { skew_s: -360 }.to_string(),
        "webhook-timestamp is 360 s ahead of the receiver's clock (tolerance 300 s)"
    );
}

#[test]
fn header_forms() {
    let set = SecretSet::new(vec![secret(1)]).unwrap();
    let now = 1_800_000_000;
    let ts = now.to_string();
    let check = |h: SignatureHeaders<'_>| verify(&set, &h, b"{}", now);
    assert_eq!(
        check(SignatureHeaders {
            id: None,
            ..headers("", &ts, "v1,x")
        }),
        Err(VerifyError::MissingHeader(HEADER_ID))
    );
    assert_eq!(
        check(SignatureHeaders {
            timestamp: None,
            ..headers("m", "", "v1,x")
        }),
        Err(VerifyError::MissingHeader(HEADER_TIMESTAMP))
    );
    assert_eq!(
        check(headers("m", &ts, " ")),
        Err(VerifyError::MissingHeader(HEADER_SIGNATURE))
    );
    for bad_ts in [
        "-1",
        "+1800000000",
        "1800000000.5",
        " 1800000000",
        "1e9",
        "9999999999999",
    ] {
        assert_eq!(
            check(headers("m", bad_ts, "v1,x")),
            Err(VerifyError::InvalidTimestamp),
            "{bad_ts}"
        );
    }
    let long = "a".repeat(MAX_WEBHOOK_ID_CHARS + 1);
    for bad_id in ["msg 1", "msg\n1", "msg_ü", "<script>", long.as_str()] {
        assert_eq!(
            check(headers(bad_id, &ts, "v1,x")),
            Err(VerifyError::InvalidWebhookId),
            "{bad_id}"
        );
    }
    assert!(valid_webhook_id(&"a".repeat(MAX_WEBHOOK_ID_CHARS)));
    assert!(valid_webhook_id("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"));
}

#[test]
fn secrets_parse_and_stay_out_of_debug_and_errors() {
    let set = SecretSet::parse_json(&format!(
        r#"{{"active": ["{SPEC_SECRET}", "{}"]}}"#,
        secret(4).to_written()
    ))
    .unwrap();
    assert_eq!(set.len(), 2);
    let debug = format!("{set:?} {:?}", set.secrets()[0]);
    assert_eq!(
        debug,
        "SecretSet(<2 redacted secrets>) WebhookSecret(<redacted 24 bytes>)"
    );
    // Without the prefix it is the same secret.
    assert_eq!(
        WebhookSecret::parse(SPEC_SECRET.trim_start_matches("whsec_")).unwrap(),
        set.secrets()[0]
    );
    assert_eq!(
        WebhookSecret::parse("whsec_c2hvcnQ="),
        Err(SecretFormatError::BadLength(5))
    );
    assert_eq!(
        WebhookSecret::parse("whsec_not base64!"),
        Err(SecretFormatError::NotBase64)
    );
    for bad in [
        r#"{"active": []}"#.to_string(),
        r#"["whsec_x"]"#.to_string(),
        r#"{"active": ["a"], "extra": 1}"#.to_string(),
        format!(r#"{{"active": ["{SPEC_SECRET}""#),
        format!(r#"{{"active": {:?}}}"#, vec![SPEC_SECRET; 11]),
    ] {
        let err = SecretSet::parse_json(&bad).unwrap_err();
        assert!(
            !err.to_string().contains("MfKQ9r8GKYqr"),
            "the error quotes the secret: {err}"
        );
    }
}
