// Over 600 lines: about 200 of them are tests (from `#[cfg(test)]`); the rest is one concern,
// the TERMINALS configuration and the router; a split is issue 22 item 11's open work.
//! Several terminals in one stack: the `TERMINALS` configuration, each terminal's policy for the
//! gate, and [`TerminalRouter`], the [`SlotTerminal`] that sends each record's calls to the
//! client of the terminal its notification names, at most `max_concurrent_calls` at once.
//!
//! ## `TERMINALS` (template parameter `Terminals`)
//!
//! A JSON array, one object per terminal; read and validated once at cold start
//! ([`parse_terminals`]). Without it the stack books at one terminal configured by the
//! single-terminal variables (`TERMINAL_BASE_URL`, ..., see `crate::config`).
//!
//! ```json
//! [
//!   {"code": "ECT-DELTA", "supports_idempotency_key": true, "api": "slots",
//!    "base_url": "https://slots.ect.example/api",
//!    "token_secret_arn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-AbCdEf",
//!    "key_retention_seconds": 86400, "max_concurrent_calls": 4},
//!   {"code": "RWG", "supports_idempotency_key": false}
//! ]
//! ```
//!
//! | field | meaning | unit | |
//! | --- | --- | --- | --- |
//! | `code` | the notification's `terminal` (exact match), `A-Z`, `0-9`, `-`, at most 32 characters, unique | | required |
//! | `supports_idempotency_key` | whether the terminal honours `Idempotency-Key`; `false`: every notification for it goes to the manual queue (`no_idempotency_support`), it is never called | | required |
//! | `base_url` | the API's base URL, as `TERMINAL_BASE_URL` (`https://`; `http://` to loopback only) | | required with key support |
//! | `token_secret_arn` | full ARN of the Secrets Manager secret whose `SecretString` is the bearer token, read once at cold start; two terminals may name the same secret only at the same origin (scheme, host, port) | | optional (no `Authorization` header) |
//! | `key_retention_seconds` | how long the terminal keeps a key; past it minus `RETENTION_MARGIN_SECONDS` nothing is claimed again; must be less than `KEY_TTL_SECONDS` (the record outlives the key) | seconds | required with key support |
//! | `max_concurrent_calls` | calls in flight to this terminal at once, per execution environment (the consumer's `MAX_CONCURRENCY` records share them) | calls | required with key support |
//! | `api` | `slots` (`POST {base}/slots`, the default) or `appointments-v2` (`POST {base}/v2/appointments`), see [`TerminalApi`] | | optional |
//!
//! Every problem is reported at once, each naming the terminal and the field, as
//! `TERMINALS: terminal "APMT-MV2": key_retention_seconds: missing (required with key support)`
//! (a terminal whose code cannot be read is named by its position, `terminal #2`). A field named
//! twice in one terminal is refused (`given twice`): which value counts would be ambiguous.
//!
//! ## The concurrency limit
//!
//! A terminal's calls (claims and lookups) wait for one of its `max_concurrent_calls` permits. The
//! wait and the call together are bounded by the request timeout: a call that cannot start in time
//! is [`CallOutcome::Transient`] (nothing was sent; the record is retried later with the same key),
//! so a record's deadline arithmetic (`crate::config`, the deadline margin) still holds. The limit
//! is per execution environment: at most `max_concurrent_calls` × the consumer's concurrent
//! environments (`MaximumConcurrency` of its SQS event source) + the reconciler's reach a terminal.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::Semaphore;

use super::{
    base_url_allowed, AnswerDetail, ApiToken, CallOutcome, HttpTerminal, HttpTerminalConfig,
    HttpTerminalError, LookupOutcome, SlotTerminal,
};
use crate::notification::MAX_TERMINAL_CHARS;
use gate::lambda::secret_arn_valid;

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

/// The `appointments-v2` body for a stored claim request (`crate::keys::claim_request`'s
/// `{equipment_number, pin, window_end, window_start}`): `{"container": {"number"}, "release":
/// {"pin"}, "slot_window": {"from", "until"}}` as RFC 8785 canonical JSON, so the same stored bytes
/// always give the same body. Holds the PIN: never log it.
///
/// # Errors
/// A stored request that is not that object (never one this gate wrote), described without
/// quoting it.
pub fn appointments_v2_body(stored: &[u8]) -> Result<Vec<u8>, String> {
    #[derive(serde::Deserialize)]
    struct Stored {
        equipment_number: String,
        pin: String,
        window_start: String,
        window_end: String,
    }
    let s: Stored = serde_json::from_slice(stored).map_err(|e| {
        format!(
            "the stored request cannot be rendered for the appointments-v2 API (line {}, column \
             {}): nothing sent",
            e.line(),
            e.column()
        )
    })?;
    let body = serde_json::json!({
        "container": {"number": s.equipment_number},
        "release": {"pin": s.pin},
        "slot_window": {"from": s.window_start, "until": s.window_end},
    });
    serde_json_canonicalizer::to_vec(&body).map_err(|e| e.to_string())
}

/// An `appointments-v2` answer `{"appointment": {"id", "container": {"number"}}}` in the `slots`
/// shape the classification reads: `{"slot_id", "equipment_number"}` (`lookup`: inside
/// `{"slot": ...}`). `None` when the answer is not such an object, or names a field twice
/// (`gate::strict_json`: which `id` was made would be ambiguous, as a `slots` answer naming
/// `slot_id` twice): it is then classified as it is (an error answer, or a `2xx` without a
/// usable slot).
pub fn appointments_v2_answer(body: &[u8], lookup: bool) -> Option<Vec<u8>> {
    let value = gate::strict_json::from_str_strict(std::str::from_utf8(body).ok()?).ok()?;
    let appointment = value.get("appointment")?.as_object()?;
    let id = appointment.get("id")?;
    let mut slot = Map::new();
    slot.insert("slot_id".into(), id.clone());
    if let Some(number) = appointment.get("container").and_then(|c| c.get("number")) {
        slot.insert("equipment_number".into(), number.clone());
    }
    let slot = Value::Object(slot);
    let shaped = if lookup {
        serde_json::json!({ "slot": slot })
    } else {
        slot
    };
    serde_json::to_vec(&shaped).ok()
}

/// `key` as one URL path segment: unreserved characters (RFC 3986: `A-Z a-z 0-9 - . _ ~`) as they
/// are, every other byte percent-encoded (an operation key is lowercase hex, kept as it is).
pub fn path_segment(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One terminal of `TERMINALS`, validated (see the module docs for each field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalSpec {
    /// The terminal code, as notifications name it.
    pub code: String,
    /// Whether the terminal honours `Idempotency-Key`.
    pub supports_idempotency_key: bool,
    /// The API's base URL without a trailing slash; `None` only without key support (never
    /// called).
    pub base_url: Option<String>,
    /// The token's Secrets Manager secret (an ARN, not a secret itself).
    pub token_secret_arn: Option<String>,
    /// How long the terminal keeps a key, **seconds**; `None` only without key support.
    pub key_retention_s: Option<i64>,
    /// Calls in flight at once, per execution environment; `None` only without key support.
    pub max_concurrent_calls: Option<usize>,
    /// The API shape.
    pub api: TerminalApi,
}

/// The bounds [`parse_terminals`] checks a terminal against, from the rest of the configuration.
#[derive(Debug, Clone, Copy)]
pub struct TerminalLimits {
    /// `KEY_TTL_SECONDS`: a key retention must be less (the record outlives the key).
    pub key_ttl_s: i64,
    /// `RETENTION_MARGIN_SECONDS`: a key retention must be more.
    pub retention_margin_s: i64,
}

/// Longest accepted key retention, seconds (366 days, as `SERVER_KEY_RETENTION_SECONDS`).
pub const MAX_KEY_RETENTION_S: i64 = 366 * 86_400;
/// Shortest accepted key retention, seconds (as `SERVER_KEY_RETENTION_SECONDS`).
pub const MIN_KEY_RETENTION_S: i64 = 60;
/// Most calls in flight to one terminal per execution environment.
pub const MAX_CONCURRENT_CALLS: i64 = 1_000;

const FIELDS: &[&str] = &[
    "code",
    "supports_idempotency_key",
    "base_url",
    "token_secret_arn",
    "key_retention_seconds",
    "max_concurrent_calls",
    "api",
];

/// Parses and validates `TERMINALS` (the module docs give the shape).
///
/// # Errors
/// Every problem found, each `terminal "CODE": FIELD: PROBLEM` (or `terminal #N` when the code
/// cannot be read); no value of a refused `base_url` is quoted (it may carry a credential).
pub fn parse_terminals(
    raw: &str,
    limits: TerminalLimits,
) -> Result<Vec<TerminalSpec>, Vec<String>> {
    let value: Value = serde_json::from_str(raw).map_err(|e| {
        vec![format!(
            "not JSON ({e}); expected an array of terminal objects"
        )]
    })?;
    let Value::Array(entries) = value else {
        return Err(vec!["expected a JSON array of terminal objects".into()]);
    };
    if entries.is_empty() {
        return Err(vec!["no terminal given (an empty array)".into()]);
    }
    // `Value` keeps the last of a field named twice; which one was meant is not known.
    let twice: Vec<FieldsTwice> = serde_json::from_str(raw).unwrap_or_default();
    let mut problems = Vec::new();
    let mut specs = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Value::Object(fields) = entry else {
            problems.push(format!("terminal #{}: not a JSON object", i + 1));
            continue;
        };
        let twice = twice.get(i).map_or(&[][..], |t| &t.0[..]);
        if !twice.is_empty() {
            let name = match fields.get("code").and_then(Value::as_str) {
                Some(c) if code_valid(c) && !twice.iter().any(|f| f == "code") => {
                    format!("terminal {c:?}")
                }
                _ => format!("terminal #{}", i + 1),
            };
            for field in twice {
                problems.push(format!(
                    "{name}: {field}: given twice (which value counts would be ambiguous)"
                ));
            }
        }
        let spec = parse_one(i, fields, limits, &mut problems);
        if let Some(spec) = spec.filter(|_| twice.is_empty()) {
            if specs.iter().any(|s: &TerminalSpec| s.code == spec.code) {
                problems.push(format!("terminal {:?}: code: given twice", spec.code));
            } else if let Some(other) = token_shared_elsewhere(&specs, &spec) {
                problems.push(format!(
                    "terminal {:?}: token_secret_arn: also terminal {:?}'s, whose base_url is \
                     another host: a token is sent only to the host it is for (give each its \
                     own secret)",
                    spec.code, other.code
                ));
            } else {
                specs.push(spec);
            }
        }
    }
    if problems.is_empty() {
        Ok(specs)
    } else {
        Err(problems)
    }
}

/// A terminal of `specs` that names `spec`'s token secret while its base URL is at another
/// origin (scheme, host, port): that token would be sent to two parties. Terminals without key
/// support are never called (their secret is never read) and are not compared.
fn token_shared_elsewhere<'a>(
    specs: &'a [TerminalSpec],
    spec: &TerminalSpec,
) -> Option<&'a TerminalSpec> {
    let origin = |s: &TerminalSpec| {
        s.base_url
            .as_deref()
            .and_then(|u| reqwest::Url::parse(u).ok())
            .map(|u| u.origin().ascii_serialization())
    };
    let arn = spec.token_secret_arn.as_deref()?;
    if !spec.supports_idempotency_key {
        return None;
    }
    specs.iter().find(|s| {
        s.supports_idempotency_key
            && s.token_secret_arn.as_deref() == Some(arn)
            && origin(s) != origin(spec)
    })
}

/// The fields one entry of `TERMINALS` names more than once (none for an entry that is not an
/// object), each once, in the order of their second mention.
#[derive(Default)]
struct FieldsTwice(Vec<String>);

impl<'de> serde::Deserialize<'de> for FieldsTwice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct Names;
        impl<'de> Visitor<'de> for Names {
            type Value = FieldsTwice;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FieldsTwice, A::Error> {
                let (mut seen, mut twice) = (Vec::<String>::new(), Vec::new());
                while let Some(name) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    if seen.contains(&name) {
                        if !twice.contains(&name) {
                            twice.push(name);
                        }
                    } else {
                        seen.push(name);
                    }
                }
                Ok(FieldsTwice(twice))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FieldsTwice, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FieldsTwice::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<FieldsTwice, E> {
                Ok(FieldsTwice::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<FieldsTwice, E> {
                Ok(FieldsTwice::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<FieldsTwice, E> {
                Ok(FieldsTwice::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<FieldsTwice, E> {
                Ok(FieldsTwice::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<FieldsTwice, E> {
                Ok(FieldsTwice::default())
            }
            fn visit_unit<E>(self) -> Result<FieldsTwice, E> {
                Ok(FieldsTwice::default())
            }
        }
        d.deserialize_any(Names)
    }
}

fn code_valid(code: &str) -> bool {
    !code.is_empty()
        && code.chars().count() <= MAX_TERMINAL_CHARS
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-')
        && !code.starts_with('-')
}

/// One entry; problems are pushed, `None` when any was found.
fn parse_one(
    i: usize,
    fields: &Map<String, Value>,
    limits: TerminalLimits,
    problems: &mut Vec<String>,
) -> Option<TerminalSpec> {
    let before = problems.len();
    let code = fields.get("code").and_then(Value::as_str);
    let name = match code {
        Some(c) if code_valid(c) => format!("terminal {c:?}"),
        _ => format!("terminal #{}", i + 1),
    };
    let mut problem = |field: &str, what: String| problems.push(format!("{name}: {field}: {what}"));
    match fields.get("code") {
        None => problem("code", "missing (required)".into()),
        Some(Value::String(c)) if code_valid(c) => {}
        Some(Value::String(_)) => problem(
            "code",
            "must be 1 to 32 characters A-Z, 0-9 and '-', not starting with '-'".into(),
        ),
        Some(_) => problem("code", "not a string".into()),
    }
    for key in fields.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
        problem(key, format!("unknown field (known: {})", FIELDS.join(", ")));
    }
    let keyed = match fields.get("supports_idempotency_key") {
        Some(Value::Bool(b)) => *b,
        None => {
            problem("supports_idempotency_key", "missing (required)".into());
            false
        }
        Some(_) => {
            problem("supports_idempotency_key", "not `true` or `false`".into());
            false
        }
    };
    let required = |field: &str| -> Option<&Value> { fields.get(field).filter(|v| !v.is_null()) };
    let base_url = match required("base_url") {
        None => None,
        Some(Value::String(u)) if base_url_allowed(u) => Some(u.trim_end_matches('/').to_string()),
        // Not quoted: a refused URL may carry a credential.
        Some(Value::String(_)) => {
            problem(
                "base_url",
                "must be https:// (http:// only to a loopback host), without user info, query, \
                 fragment or white space"
                    .into(),
            );
            None
        }
        Some(_) => {
            problem("base_url", "not a string".into());
            None
        }
    };
    let token_secret_arn = match required("token_secret_arn") {
        None => None,
        Some(Value::String(a)) if secret_arn_valid(a) => Some(a.clone()),
        // Not quoted: a value that is no ARN may be the token itself, pasted in the wrong place.
        Some(Value::String(a)) => {
            problem(
                "token_secret_arn",
                format!(
                    "not a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:\
                     secret:NAME; {} characters, not quoted: it may be the secret itself)",
                    a.chars().count()
                ),
            );
            None
        }
        Some(_) => {
            problem("token_secret_arn", "not a string".into());
            None
        }
    };
    let mut integer = |field: &str, min: i64, max: i64| -> Option<i64> {
        let v = required(field)?;
        match v.as_i64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            Some(n) => {
                problem(field, format!("{n} is outside {min}..={max}"));
                None
            }
            None => {
                problem(field, format!("{v} is not an integer"));
                None
            }
        }
    };
    let key_retention_s = integer(
        "key_retention_seconds",
        MIN_KEY_RETENTION_S,
        MAX_KEY_RETENTION_S,
    );
    let max_calls = integer("max_concurrent_calls", 1, MAX_CONCURRENT_CALLS);
    let mut problem = |field: &str, what: String| problems.push(format!("{name}: {field}: {what}"));
    if let Some(retention) = key_retention_s {
        if retention >= limits.key_ttl_s {
            problem(
                "key_retention_seconds",
                format!(
                    "{retention} must be less than KEY_TTL_SECONDS ({}): the record must outlive \
                     the terminal's key",
                    limits.key_ttl_s
                ),
            );
        }
        if retention <= limits.retention_margin_s {
            problem(
                "key_retention_seconds",
                format!(
                    "{retention} must be more than RETENTION_MARGIN_SECONDS ({})",
                    limits.retention_margin_s
                ),
            );
        }
    }
    let api = match required("api") {
        None => TerminalApi::Slots,
        Some(Value::String(a)) => TerminalApi::from_name(a).unwrap_or_else(|| {
            problem("api", format!("{a:?} is not `slots` or `appointments-v2`"));
            TerminalApi::Slots
        }),
        Some(_) => {
            problem("api", "not a string".into());
            TerminalApi::Slots
        }
    };
    if keyed {
        for (field, given) in [
            ("base_url", required("base_url").is_some()),
            (
                "key_retention_seconds",
                required("key_retention_seconds").is_some(),
            ),
            (
                "max_concurrent_calls",
                required("max_concurrent_calls").is_some(),
            ),
        ] {
            if !given {
                problem(field, "missing (required with key support)".into());
            }
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(TerminalSpec {
        code: code?.to_string(),
        supports_idempotency_key: keyed,
        base_url,
        token_secret_arn,
        key_retention_s,
        max_concurrent_calls: max_calls.map(|n| n as usize),
        api,
    })
}

/// The gate's policy per terminal code: key support and claim horizon (key retention minus
/// `retention_margin_ms`, milliseconds). A terminal without key support gets a horizon of 0 (it is
/// never claimed at anyway).
pub fn policies(
    specs: &[TerminalSpec],
    retention_margin_ms: i64,
) -> BTreeMap<String, TerminalPolicy> {
    specs
        .iter()
        .map(|s| {
            let horizon = s
                .key_retention_s
                .map_or(0, |r| r * 1000 - retention_margin_ms);
            (
                s.code.clone(),
                TerminalPolicy {
                    supports_idempotency_key: s.supports_idempotency_key,
                    claim_horizon_ms: horizon,
                },
            )
        })
        .collect()
}

/// The [`TerminalRouter`] for `specs` (`TERMINALS`): one [`HttpTerminal`] per terminal with key
/// support, with its base URL, API shape and call limit, the timeouts of `shared`, and its token
/// from `tokens` (by terminal code; read from each one's secret at cold start,
/// `crate::lambda::terminal_router`). A terminal without key support gets no client: the gate
/// never calls it.
///
/// # Errors
/// A client that cannot be built.
pub fn http_router(
    specs: &[TerminalSpec],
    shared: &HttpTerminalConfig,
    mut tokens: BTreeMap<String, ApiToken>,
) -> Result<TerminalRouter, HttpTerminalError> {
    let mut router = TerminalRouter::new(shared.request_timeout);
    for spec in specs.iter().filter(|s| s.supports_idempotency_key) {
        let mut config = HttpTerminalConfig::new(spec.base_url.clone().unwrap_or_default());
        config.connect_timeout = shared.connect_timeout;
        config.request_timeout = shared.request_timeout;
        config.api = spec.api;
        config.token = tokens.remove(&spec.code);
        router = router.with(
            spec.code.clone(),
            Arc::new(HttpTerminal::new(config)?),
            spec.max_concurrent_calls.unwrap_or(1),
        );
    }
    Ok(router)
}

/// A call counted in flight while this lives.
struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One terminal behind the router: its client and its call permits.
struct Routed {
    client: Arc<dyn SlotTerminal>,
    permits: Arc<Semaphore>,
    max_calls: usize,
    /// Calls in flight now, and the most at once so far.
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

/// A [`SlotTerminal`] for several terminals: each call goes to the client of the terminal its
/// record names ([`SlotTerminal::claim_at`], [`SlotTerminal::lookup_at`]), after one of that
/// terminal's call permits is free (see "The concurrency limit" in the module docs). A terminal
/// the router does not know (a record of a terminal since removed from the configuration, or one
/// without key support, which the gate never calls) is answered transient without a call: nothing
/// is claimed where no client is configured, and the record goes to a person past its horizon.
pub struct TerminalRouter {
    terminals: BTreeMap<String, Routed>,
    call_timeout: Duration,
}

impl std::fmt::Debug for TerminalRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalRouter")
            .field("terminals", &self.terminals.keys().collect::<Vec<_>>())
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

impl TerminalRouter {
    /// An empty router whose calls (the wait for a permit and the call together) take at most
    /// `call_timeout` (the terminals' request timeout).
    pub fn new(call_timeout: Duration) -> Self {
        Self {
            terminals: BTreeMap::new(),
            call_timeout,
        }
    }

    /// Adds terminal `code` served by `client`, at most `max_concurrent_calls` (at least 1) calls
    /// at once.
    #[must_use]
    pub fn with(
        mut self,
        code: impl Into<String>,
        client: Arc<dyn SlotTerminal>,
        max_concurrent_calls: usize,
    ) -> Self {
        let max_calls = max_concurrent_calls.max(1);
        self.terminals.insert(
            code.into(),
            Routed {
                client,
                permits: Arc::new(Semaphore::new(max_calls)),
                max_calls,
                in_flight: AtomicUsize::new(0),
                most: AtomicUsize::new(0),
            },
        );
        self
    }

    /// The most calls this router had in flight at `terminal` at one time so far (never above its
    /// `max_concurrent_calls`); `None` for a terminal it has no client for.
    pub fn most_calls_at_once(&self, terminal: &str) -> Option<usize> {
        self.terminals
            .get(terminal)
            .map(|r| r.most.load(Ordering::SeqCst))
    }

    /// The terminal codes the router has a client for.
    pub fn codes(&self) -> Vec<&str> {
        self.terminals.keys().map(String::as_str).collect()
    }

    /// Calls `call` on `terminal`'s client once a permit is free; `Err` (transient, nothing sent)
    /// when there is no such terminal or no permit within the call timeout, or when the call does
    /// not finish within what is left of it.
    async fn limited<T, F, Fut>(&self, terminal: &str, call: F) -> Result<T, AnswerDetail>
    where
        F: FnOnce(Arc<dyn SlotTerminal>) -> Fut,
        Fut: Future<Output = T>,
    {
        let Some(routed) = self.terminals.get(terminal) else {
            return Err(AnswerDetail::new(format!(
                "no client for terminal {terminal:?} in this stack's TERMINALS: nothing sent"
            )));
        };
        let started = Instant::now();
        let permit = match tokio::time::timeout(self.call_timeout, routed.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) | Err(_) => {
                return Err(AnswerDetail::new(format!(
                    "terminal {terminal:?}: all {} calls (max_concurrent_calls) busy for {} ms: \
                     nothing sent, retried later",
                    routed.max_calls,
                    started.elapsed().as_millis()
                )))
            }
        };
        let left = self.call_timeout.saturating_sub(started.elapsed());
        let now = routed.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        routed.most.fetch_max(now, Ordering::SeqCst);
        // Counted out when the call ends or is dropped (an invocation that ends mid-call).
        let counted = Counted(&routed.in_flight);
        let outcome = tokio::time::timeout(left, call(routed.client.clone())).await;
        drop(counted);
        drop(permit);
        outcome.map_err(|_| {
            AnswerDetail::new(format!(
                "terminal {terminal:?}: no answer within the request timeout ({} ms, the wait \
                 for a free call included)",
                self.call_timeout.as_millis()
            ))
        })
    }

    /// The only terminal's code, when the router has exactly one.
    fn only(&self) -> Option<&str> {
        let mut codes = self.terminals.keys();
        match (codes.next(), codes.next()) {
            (Some(code), None) => Some(code),
            _ => None,
        }
    }
}

const NO_TERMINAL_NAMED: &str =
    "the terminal router has several terminals and the call named none: nothing sent";

#[async_trait]
impl SlotTerminal for TerminalRouter {
    /// Without a terminal code: the only terminal's client, if the router has exactly one.
    async fn claim(&self, op_key: &str, request: &[u8]) -> CallOutcome {
        match self.only() {
            Some(code) => self.claim_at(code, op_key, request).await,
            None => CallOutcome::Transient(NO_TERMINAL_NAMED.into()),
        }
    }

    /// Without a terminal code: the only terminal's client, if the router has exactly one.
    async fn lookup(&self, op_key: &str, request: &[u8]) -> LookupOutcome {
        match self.only() {
            Some(code) => self.lookup_at(code, op_key, request).await,
            None => LookupOutcome::Transient(NO_TERMINAL_NAMED.into()),
        }
    }

    async fn claim_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> CallOutcome {
        self.limited(terminal, |client| async move {
            client.claim_at(terminal, op_key, request).await
        })
        .await
        .unwrap_or_else(CallOutcome::Transient)
    }

    async fn lookup_at(&self, terminal: &str, op_key: &str, request: &[u8]) -> LookupOutcome {
        self.limited(terminal, |client| async move {
            client.lookup_at(terminal, op_key, request).await
        })
        .await
        .unwrap_or_else(LookupOutcome::Transient)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                 max_concurrent_calls, api)",
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
    #[tokio::test]
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
