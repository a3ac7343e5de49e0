//! Several terminals in one stack: the `TERMINALS` configuration ([`parse_terminals`], its shape
//! and fields), each terminal's policy for the gate, and [`TerminalRouter`], the
//! [`SlotTerminal`](crate::terminal::SlotTerminal) that sends each record's calls to the client of
//! the terminal its notification names, at most `max_concurrent_calls` at once.

mod appointments_v2;
mod config;
mod router;

pub use appointments_v2::{appointments_v2_answer, appointments_v2_body, path_segment};
pub use config::{
    parse_terminals, policies, TerminalLimits, TerminalSpec, MAX_CONCURRENT_CALLS,
    MAX_KEY_RETENTION_S, MIN_KEY_RETENTION_S,
};
pub use router::{http_router, TerminalRouter};

/// What the gate needs to know of a terminal to decide before calling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalPolicy {
    /// Whether the terminal honours `Idempotency-Key` (if not, its records go to the manual
    /// queue, never claimed).
    pub supports_idempotency_key: bool,
    /// A record older than this many **milliseconds** is never claimed again at this terminal:
    /// its key retention minus the retention margin (see `gate::GateConfig::claim_horizon_ms`).
    pub claim_horizon_ms: i64,
}

/// The HTTP API a terminal speaks (both with IETF `Idempotency-Key` semantics, see
/// `crate::terminal`). The gate stores one request shape (`crate::keys::claim_request`); the
/// client renders it in the terminal's shape, deterministically (the same stored bytes always
/// give the same body bytes, so a retry under the key repeats the first request exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TerminalApi {
    /// `slots` (ECT Delta's): `POST {base}/slots` with the stored body
    /// `{equipment_number, pin, window_end, window_start}`, answered `201 {slot_id,
    /// equipment_number, ...}`; lookup `GET {base}/slots?idempotency_key=K`, answered
    /// `200 {"slot": {...}}` or `404`.
    #[default]
    Slots,
    /// `appointments-v2`: `POST {base}/v2/appointments` with
    /// `{"container": {"number"}, "release": {"pin"}, "slot_window": {"from", "until"}}` (RFC 8785
    /// canonical JSON), answered `201 {"appointment": {"id", "container": {"number"}, ...}}`;
    /// lookup `GET {base}/v2/appointments/by-key/{K}`, answered `200 {"appointment": {...}}` or
    /// `404`. The appointment's `id` is the slot id.
    AppointmentsV2,
}

impl TerminalApi {
    /// The configuration's name: `slots` or `appointments-v2`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Slots => "slots",
            Self::AppointmentsV2 => "appointments-v2",
        }
    }

    /// The API named `name` (`slots`, `appointments-v2`), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "slots" => Some(Self::Slots),
            "appointments-v2" => Some(Self::AppointmentsV2),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;

    use crate::terminal::{CallOutcome, LookupOutcome, SlotTerminal};
    use gate::idempotency_key::IdFormat;

    const LIMITS: TerminalLimits = TerminalLimits {
        key_ttl_s: 1_814_400,
        retention_margin_s: 3_600,
    };
    const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-delta/token-AbCdEf";

    fn three() -> String {
        serde_json::json!([
            {"code": "ECT-DELTA", "supports_idempotency_key": true, "api": "slots",
             "base_url": "https://slots.ect.example/api/", "token_secret_arn": ARN,
             "key_retention_seconds": 86_400, "max_concurrent_calls": 4},
            {"code": "APMT-MV2", "supports_idempotency_key": true, "api": "appointments-v2",
             "base_url": "https://apmt.example", "key_retention_seconds": 172_800,
             "max_concurrent_calls": 2},
            {"code": "RWG", "supports_idempotency_key": false}
        ])
        .to_string()
    }

    #[test]
    fn a_terminal_declares_its_slot_id_format() {
        let raw = r#"[{"code": "ECT-DELTA", "supports_idempotency_key": true,
            "base_url": "https://slots.ect.example/api", "key_retention_seconds": 86400,
            "max_concurrent_calls": 4, "slot_id_pattern": "ECTD-[0-9]{4}",
            "slot_id_max_chars": 9}]"#;
        let specs = parse_terminals(raw, LIMITS).unwrap();
        assert_eq!(
            specs[0].slot_id_format,
            IdFormat::new("ECTD-[0-9]{4}", 9).unwrap()
        );
        let bad = raw
            .replace("ECTD-[0-9]{4}", "ECTD-[0-9")
            .replace("\"slot_id_max_chars\": 9", "\"slot_id_max_chars\": 200");
        let problems = parse_terminals(&bad, LIMITS).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("terminal \"ECT-DELTA\": slot_id_max_chars: "));
        assert!(problems[1].starts_with("terminal \"ECT-DELTA\": slot_id_pattern: "));
    }

    #[test]
    fn three_terminals_parse_with_their_own_settings() {
        let specs = parse_terminals(&three(), LIMITS).unwrap();
        assert_eq!(specs.len(), 3);
        assert_eq!(
            specs[0],
            TerminalSpec {
                code: "ECT-DELTA".into(),
                supports_idempotency_key: true,
                base_url: Some("https://slots.ect.example/api".into()),
                token_secret_arn: Some(ARN.into()),
                key_retention_s: Some(86_400),
                max_concurrent_calls: Some(4),
                api: TerminalApi::Slots,
                slot_id_format: IdFormat::default(),
            }
        );
        assert_eq!(specs[1].api, TerminalApi::AppointmentsV2);
        assert_eq!(specs[1].token_secret_arn, None);
        assert!(!specs[2].supports_idempotency_key);
        assert_eq!(specs[2].base_url, None);
        let p = policies(&specs, 3_600_000);
        assert_eq!(p["ECT-DELTA"].claim_horizon_ms, 23 * 3_600_000);
        assert_eq!(p["APMT-MV2"].claim_horizon_ms, 47 * 3_600_000);
        assert!(!p["RWG"].supports_idempotency_key);
    }

    /// Every problem at once, each naming the terminal (or its position) and the field; a refused
    /// base URL is not quoted.
    #[test]
    fn every_problem_names_the_terminal_and_the_field() {
        let raw = serde_json::json!([
            {"code": "ECT-DELTA", "supports_idempotency_key": true,
             "base_url": "http://user:s3cret@slots.example", "key_retention_seconds": 2_000_000,
             "max_concurrent_calls": 0, "api": "soap", "colour": "red"},
            {"code": "apmt", "supports_idempotency_key": "yes"},
            {"code": "APMT-MV2", "supports_idempotency_key": true, "token_secret_arn": "apmt/token"},
            "RWG",
            {"code": "ECT-DELTA", "supports_idempotency_key": false}
        ])
        .to_string();
        let problems = parse_terminals(&raw, LIMITS).unwrap_err();
        assert_eq!(
            problems,
            vec![
                "terminal \"ECT-DELTA\": colour: unknown field (known: code, \
                 supports_idempotency_key, base_url, token_secret_arn, key_retention_seconds, \
                 max_concurrent_calls, api, slot_id_pattern, slot_id_max_chars)",
                "terminal \"ECT-DELTA\": base_url: must be https:// (http:// only to a loopback \
                 host), without user info, query, fragment or white space",
                "terminal \"ECT-DELTA\": max_concurrent_calls: 0 is outside 1..=1000",
                "terminal \"ECT-DELTA\": key_retention_seconds: 2000000 must be less than \
                 KEY_TTL_SECONDS (1814400): the record must outlive the terminal's key",
                "terminal \"ECT-DELTA\": api: \"soap\" is not `slots` or `appointments-v2`",
                "terminal #2: code: must be 1 to 32 characters A-Z, 0-9 and '-', not starting \
                 with '-'",
                "terminal #2: supports_idempotency_key: not `true` or `false`",
                "terminal \"APMT-MV2\": token_secret_arn: not a Secrets Manager secret ARN \
                 (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME; 10 characters, not quoted: \
                 it may be the secret itself)",
                "terminal \"APMT-MV2\": base_url: missing (required with key support)",
                "terminal \"APMT-MV2\": key_retention_seconds: missing (required with key support)",
                "terminal \"APMT-MV2\": max_concurrent_calls: missing (required with key support)",
                "terminal #4: not a JSON object",
            ]
        );
        assert!(!problems.join(" ").contains("s3cret"));
        // The duplicate code is reported once the first entry parses.
        let twice = serde_json::json!([
            {"code": "RWG", "supports_idempotency_key": false},
            {"code": "RWG", "supports_idempotency_key": false}
        ])
        .to_string();
        assert_eq!(
            parse_terminals(&twice, LIMITS).unwrap_err(),
            vec!["terminal \"RWG\": code: given twice"]
        );
        assert_eq!(
            parse_terminals("[]", LIMITS).unwrap_err(),
            vec!["no terminal given (an empty array)"]
        );
        assert_eq!(
            parse_terminals("{}", LIMITS).unwrap_err(),
            vec!["expected a JSON array of terminal objects"]
        );
        let short = serde_json::json!([{"code": "X", "supports_idempotency_key": true,
            "base_url": "https://x.example", "key_retention_seconds": 3_600,
            "max_concurrent_calls": 1}])
        .to_string();
        assert_eq!(
            parse_terminals(&short, LIMITS).unwrap_err(),
            vec![
                "terminal \"X\": key_retention_seconds: 3600 must be more than \
                  RETENTION_MARGIN_SECONDS (3600)"
            ]
        );
    }

    /// A terminal that counts its calls in flight, answering after `hold`.
    struct Counting {
        now: AtomicUsize,
        max: AtomicUsize,
        hold: Duration,
    }

    #[async_trait]
    impl SlotTerminal for Counting {
        async fn claim(&self, op_key: &str, _request: &[u8]) -> CallOutcome {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(self.hold).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            CallOutcome::Done(crate::terminal::Effect {
                effect_id: format!("S-{op_key}"),
                subject: None,
            })
        }

        async fn lookup(&self, _op_key: &str, _request: &[u8]) -> LookupOutcome {
            LookupOutcome::NotFound
        }
    }

    fn counting(hold_ms: u64) -> Arc<Counting> {
        Arc::new(Counting {
            now: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
            hold: Duration::from_millis(hold_ms),
        })
    }

    /// Ten claims at once at a terminal limited to 2: never more than 2 in flight there, while
    /// the other terminal's own limit (5) applies to its calls; every claim gets its slot.
    #[tokio::test]
    async fn each_terminal_gets_at_most_its_own_calls_at_once() {
        let (a, b) = (counting(20), counting(20));
        let router = TerminalRouter::new(Duration::from_secs(10))
            .with("A", a.clone(), 2)
            .with("B", b.clone(), 5);
        let calls = (0..10).map(|i| {
            let router = &router;
            async move {
                let terminal = if i % 2 == 0 { "A" } else { "B" };
                router.claim_at(terminal, &i.to_string(), b"{}").await
            }
        });
        let outcomes = futures::future::join_all(calls).await;
        assert!(outcomes.iter().all(|o| matches!(o, CallOutcome::Done(_))));
        assert_eq!(a.max.load(Ordering::SeqCst), 2);
        assert_eq!(b.max.load(Ordering::SeqCst), 5);
        assert_eq!(router.most_calls_at_once("A"), Some(2));
        assert_eq!(router.most_calls_at_once("B"), Some(5));
        assert_eq!(router.most_calls_at_once("C"), None);
    }

    /// A call that cannot get a permit within the request timeout is transient, sent nowhere; an
    /// unknown terminal is transient without a call.
    /// On paused time: both claims start at the same instant, so the second's wait for the
    /// permit and the first's call end on the same tick (on the machine's clock a loaded host
    /// could start the second a millisecond later and hand it the permit the first released).
    #[tokio::test(start_paused = true)]
    async fn a_call_without_a_free_permit_in_time_is_transient() {
        let slow = counting(300);
        let router = TerminalRouter::new(Duration::from_millis(100)).with("A", slow.clone(), 1);
        let (first, second) = tokio::join!(
            router.claim_at("A", "k1", b"{}"),
            router.claim_at("A", "k2", b"{}")
        );
        // The first holds the permit past the timeout: cut (transient); the second never got it.
        let CallOutcome::Transient(why) = second else {
            panic!("{second:?}");
        };
        assert!(why.summary().contains("busy"), "{why}");
        assert!(matches!(first, CallOutcome::Transient(_)), "{first:?}");
        assert_eq!(slow.max.load(Ordering::SeqCst), 1);
        let CallOutcome::Transient(why) = router.claim_at("RWG", "k", b"{}").await else {
            panic!("unknown terminal");
        };
        assert!(why.summary().contains("no client"), "{why}");
        // One terminal: a call without a code goes to it.
        let one = TerminalRouter::new(Duration::from_secs(1)).with("A", counting(0), 1);
        assert!(matches!(one.claim("k", b"{}").await, CallOutcome::Done(_)));
    }
}
