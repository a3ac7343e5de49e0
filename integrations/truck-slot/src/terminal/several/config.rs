//! `TERMINALS`, read and validated once at cold start: each terminal's spec, limits and policy.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{TerminalApi, TerminalPolicy};
use crate::notification::MAX_TERMINAL_CHARS;
use crate::terminal::base_url_allowed;
use gate::idempotency_key::{IdFormat, IdFormatError, DEFAULT_ID_MAX_CHARS, DEFAULT_ID_PATTERN};
use gate_lambda::secret_arn_valid;

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
    /// The format of the terminal's slot ids (`slot_id_pattern`, `slot_id_max_chars`; the
    /// strict default [`IdFormat::default`] when neither is given).
    pub slot_id_format: IdFormat,
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

pub(super) const FIELDS: &[&str] = &[
    "code",
    "supports_idempotency_key",
    "base_url",
    "token_secret_arn",
    "key_retention_seconds",
    "max_concurrent_calls",
    "api",
    "slot_id_pattern",
    "slot_id_max_chars",
];

/// Parses and validates `TERMINALS` (template parameter `Terminals`).
///
/// A JSON array, one object per terminal; read and validated once at cold start. Without it the stack books at one terminal configured by the
/// single-terminal variables (`TERMINAL_BASE_URL`, ..., see `crate::config`).
///
/// ```json
/// [
///   {"code": "ECT-DELTA", "supports_idempotency_key": true, "api": "slots",
///    "base_url": "https://slots.ect.example/api",
///    "token_secret_arn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ect-AbCdEf",
///    "key_retention_seconds": 86400, "max_concurrent_calls": 4},
///   {"code": "RWG", "supports_idempotency_key": false}
/// ]
/// ```
///
/// | field | meaning | unit | |
/// | --- | --- | --- | --- |
/// | `code` | the notification's `terminal` (exact match), `A-Z`, `0-9`, `-`, at most 32 characters, unique | | required |
/// | `supports_idempotency_key` | whether the terminal honours `Idempotency-Key`; `false`: every notification for it goes to the manual queue (`no_idempotency_support`), it is never called | | required |
/// | `base_url` | the API's base URL, as `TERMINAL_BASE_URL` (`https://`; `http://` to loopback only) | | required with key support |
/// | `token_secret_arn` | full ARN of the Secrets Manager secret whose `SecretString` is the bearer token, read once at cold start; two terminals may name the same secret only at the same origin (scheme, host, port) | | optional (no `Authorization` header) |
/// | `key_retention_seconds` | how long the terminal keeps a key; past it minus `RETENTION_MARGIN_SECONDS` nothing is claimed again; must be less than `KEY_TTL_SECONDS` (the record outlives the key) | seconds | required with key support |
/// | `max_concurrent_calls` | calls in flight to this terminal at once, per execution environment (the consumer's `MAX_CONCURRENCY` records share them) | calls | required with key support |
/// | `api` | `slots` (`POST {base}/slots`, the default) or `appointments-v2` (`POST {base}/v2/appointments`), see [`TerminalApi`](super::TerminalApi) | | optional |
/// | `slot_id_pattern` | the format of the terminal's slot ids: a regular expression (the `regex` crate's syntax) the whole id must match; a slot id outside it is never kept, the record goes to a person | | optional (default `[A-Za-z0-9_.:-]+`) |
/// | `slot_id_max_chars` | the longest slot id, `1..=128` | characters | optional (default 64) |
///
/// Every problem is reported at once, each naming the terminal and the field, as
/// `TERMINALS: terminal "APMT-MV2": key_retention_seconds: missing (required with key support)`
/// (a terminal whose code cannot be read is named by its position, `terminal #2`). A field named
/// twice in one terminal is refused (`given twice`): which value counts would be ambiguous.
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
pub(super) fn token_shared_elsewhere<'a>(
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
pub(super) struct FieldsTwice(Vec<String>);

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

pub(super) fn code_valid(code: &str) -> bool {
    !code.is_empty()
        && code.chars().count() <= MAX_TERMINAL_CHARS
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-')
        && !code.starts_with('-')
}

/// One entry; problems are pushed, `None` when any was found.
pub(super) fn parse_one(
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
    let slot_id_format = slot_id_format(
        required("slot_id_pattern"),
        required("slot_id_max_chars"),
        &mut problem,
    );
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
        slot_id_format: slot_id_format?,
    })
}

/// The declared slot-id format of one terminal: `pattern` (a regular expression the whole id
/// must match; default [`DEFAULT_ID_PATTERN`]) and `max_chars`
/// (`1..=`[`crate::terminal::MAX_SLOT_ID_CHARS`]; default [`DEFAULT_ID_MAX_CHARS`]). Problems are
/// pushed; `None` when any was found.
fn slot_id_format(
    pattern: Option<&Value>,
    max_chars: Option<&Value>,
    problem: &mut impl FnMut(&str, String),
) -> Option<IdFormat> {
    use crate::terminal::MAX_SLOT_ID_CHARS;
    let pattern = match pattern {
        None => DEFAULT_ID_PATTERN,
        Some(Value::String(p)) => p.as_str(),
        Some(_) => {
            problem("slot_id_pattern", "not a string".into());
            return None;
        }
    };
    let max_chars = match max_chars {
        None => DEFAULT_ID_MAX_CHARS,
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => n,
            None => {
                problem(
                    "slot_id_max_chars",
                    format!("{v} is not a positive integer"),
                );
                return None;
            }
        },
    };
    // Both fields are checked, each problem named with its field.
    let length_ok = (1..=MAX_SLOT_ID_CHARS).contains(&max_chars);
    if !length_ok {
        problem(
            "slot_id_max_chars",
            IdFormatError::BadLength(max_chars).to_string(),
        );
    }
    match IdFormat::new(pattern, max_chars.clamp(1, MAX_SLOT_ID_CHARS)) {
        Ok(format) => length_ok.then_some(format),
        Err(e) => {
            problem("slot_id_pattern", e.to_string());
            None
        }
    }
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
