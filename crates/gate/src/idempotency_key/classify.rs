//! The classification of answers under an `Idempotency-Key`: one table for a **call** (the side
//! effect sent with the key, [`call_rule`]), one for a **lookup** by key ([`lookup_rule`]), one
//! for a request that got no answer ([`RequestFailure`]), each row with its reason; then
//! [`classify_call`] and [`classify_lookup`] turn a row into the gate's outcome, reading the effect
//! id of a `2xx` through the integration's [`AnswerReader`].
//!
//! Every status from 0 to 65535 falls in a row the `match` names (the compiler checks the ranges
//! cover them all): nothing is classified by a default. The rows follow the IETF draft
//! `draft-ietf-httpapi-idempotency-key-header-07` and the server simulator that honours it
//! (`sim/src/server.rs`): the tables are on [`call_rule`] and [`classify_lookup`].
//!
//! A summary never quotes the answer ([`super::describe`]), nor does anything else the gate
//! keeps: the record's `error` and the manual item's `detail` carry the summary; a
//! person who needs the answer asks the server live (`gatectl lookup`).

use std::sync::LazyLock;

use serde_json::Value;

use super::id_format::IdFormat;
use super::summary::{answer_digest, describe};
use crate::effect::{AnswerDetail, CallOutcome, Effect, LookupOutcome};

/// The RFC 9457 problem type (its last path segment, `is_mismatch_type`) of a `409` that says
/// the key was used with another request (the server simulator's, and many servers').
pub const PROBLEM_IDEMPOTENCY_MISMATCH: &str = "idempotency_mismatch";

/// The RFC 9457 problem type the server simulator (and the test kit's server) gives a `409` for
/// a key still being processed. The classification needs no type for it: every `409` that is not
/// a mismatch is in flight (draft -07, section 2.7).
pub const PROBLEM_IDEMPOTENCY_KEY_IN_FLIGHT: &str = "idempotency_key_in_flight";

/// Longest effect id [`effect_id_defect`] accepts, in characters. An effect id is committed with
/// the record, logged and written to the business row.
pub const MAX_EFFECT_ID_CHARS: usize = 128;

/// An answer as the classification reads it: the status, the `Content-Type` (only ever named from
/// a fixed list, [`super::describe`]) and the body bytes read (a client reads up to a bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer<'a> {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type` header, if any.
    pub content_type: Option<&'a str>,
    /// The body bytes.
    pub body: &'a [u8],
    /// The `Retry-After` header, if any: read on a `429` or a `503` only.
    pub retry_after: Option<&'a str>,
}

impl<'a> Answer<'a> {
    /// An answer with `status` and `body` and no content type.
    pub fn new(status: u16, body: &'a [u8]) -> Self {
        Self {
            status,
            content_type: None,
            body,
            retry_after: None,
        }
    }

    /// The same answer with its `Retry-After` header value.
    #[must_use]
    pub fn with_retry_after(self, retry_after: Option<&'a str>) -> Self {
        Self {
            retry_after,
            ..self
        }
    }

    /// The same answer with `content_type`.
    #[must_use]
    pub fn with_content_type(self, content_type: Option<&'a str>) -> Self {
        Self {
            content_type,
            ..self
        }
    }
}

/// A request that got no (whole) answer, by kind: what a client knows without quoting its
/// library's or the server's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFailure {
    /// No answer within the client's timeout: the request may have been processed.
    Timeout,
    /// No connection (DNS, TCP, TLS): nothing was sent.
    Connect,
    /// The answer's status arrived (`status`), its body could not be read (cut, timed out).
    Body {
        /// The status of the answer whose body was lost.
        status: u16,
    },
    /// Any other failure of the request (built, sent or read): the outcome is unknown.
    Other,
}

/// What the integration knows about its server's answers, for [`classify_call`] and
/// [`classify_lookup`]: where the effect id is, the format its server declares for ids
/// ([`AnswerReader::id_format`]) and, as a second line, which ids quote a secret of the request
/// ([`AnswerReader::id_quotes_secret`]). Every text it gives is its own words: the `&'static str`
/// of a defect cannot be the server's text.
pub trait AnswerReader {
    /// The server's name in summaries, e.g. `"server"`, `"job server"` (default `"server"`).
    fn server(&self) -> &str {
        "server"
    }

    /// The effect a call's `2xx` answer names (`answer.status` tells a `202` from a `201`), or
    /// what makes the answer unusable, as a phrase after "the answer" (`"is not JSON"`, `"has no
    /// id"`): such an answer is transient (the module's table says why).
    ///
    /// # Errors
    /// The defect, in the integration's words.
    fn effect(&self, answer: &Answer<'_>) -> Result<Effect, &'static str>;

    /// The effect a lookup's `200` answer names; by default read as [`AnswerReader::effect`].
    ///
    /// # Errors
    /// The defect, as for [`AnswerReader::effect`].
    fn found(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
        self.effect(answer)
    }

    /// The format the server declares for its effect ids: the core refuses every id outside it
    /// ([`CallOutcome::EffectRefused`]). Default: [`IdFormat::default`] (ASCII letters, digits
    /// and `-_.:`, 1 to 64 characters).
    fn id_format(&self) -> &IdFormat {
        static DEFAULT: LazyLock<IdFormat> = LazyLock::new(IdFormat::default);
        &DEFAULT
    }

    /// The second line behind the format: whether an id (already in the format) quotes a secret
    /// of the request the answer is about, under any encoding the integration's scrubber knows
    /// (the hex of a secret fits most formats). Such an id is refused like one outside the format.
    /// Default: `false` (the integration's requests hold no secret).
    fn id_quotes_secret(&self, id: &str) -> bool {
        let _ = id;
        false
    }

    /// Whether a permanent refusal with `status` is one of the server's business (a payments
    /// API's `402`: the card was declined): the call is then [`CallOutcome::Declined`] and a
    /// person gets it under [`crate::manual::ManualReason::Declined`] (in the integration's
    /// words, [`crate::Integration::manual_reason_code`]) instead of
    /// [`CallOutcome::Permanent`]. Asked only for a status the table classifies as permanent (a
    /// mismatch, an in-flight or a transient status stays what it is). Default: `false`.
    fn declines(&self, status: u16) -> bool {
        let _ = status;
        false
    }
}

/// Why the gate refuses to keep `id`, in our words after "its effect id", or `None` when it may be
/// kept: outside `reader`'s declared format (the core's floor included), or quoting a secret.
fn refusal<R: AnswerReader + ?Sized>(reader: &R, id: &str) -> Option<&'static str> {
    match reader.id_format().defect(id) {
        Some(IdDefect::Empty) => Some("is blank"),
        Some(IdDefect::TooLong) => Some("is longer than the gate keeps"),
        Some(IdDefect::NotPrintable) => Some("holds a byte outside printable ASCII"),
        Some(IdDefect::OutsideFormat) => Some("is outside the format the server declares"),
        None if reader.id_quotes_secret(id) => Some("quotes a secret of the request"),
        None => None,
    }
}

/// The detail of a refused id: the answer described, the refusal, the id's keyed digest and what
/// it means, never a character of the id.
fn refused(
    reader: &(impl AnswerReader + ?Sized),
    answer: &Answer<'_>,
    what: &str,
    why: &str,
    id: &str,
) -> AnswerDetail {
    AnswerDetail::new(format!(
        "{what}{} answered {}, and its effect id {why} (keyed SHA-256 of the id {}): the effect \
         exists under the key, but the gate never keeps that id",
        reader.server(),
        describe(answer),
        answer_digest(id.as_bytes())
    ))
}

/// An [`AnswerReader`] for a server that answers JSON with the effect id as a string at a JSON
/// pointer (RFC 6901): `{"id": "..."}` is `effect_at: "/id"`. The id must pass
/// the core's [`IdFormat`] checks (the default format); nothing is quoted. `declined` names the
/// permanent refusals of the server's business by status ([`AnswerReader::declines`]).
///
/// ```
/// use gate::idempotency_key::{AnswerReader, JsonIdAt};
///
/// const API: JsonIdAt = JsonIdAt::new("payments API", "/id").declining(&[402]);
/// assert!(API.declines(402));
/// assert!(!API.declines(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonIdAt {
    /// The server's name in summaries.
    pub server: &'static str,
    /// Where a call's `2xx` answer holds the effect id.
    pub effect_at: &'static str,
    /// Where a lookup's `200` answer holds the effect id.
    pub found_at: &'static str,
    /// The permanent statuses that are refusals of the server's business
    /// ([`AnswerReader::declines`]); empty for none.
    pub declined: &'static [u16],
}

impl JsonIdAt {
    /// A server named `server` whose call and lookup answers hold the id at `pointer`, declining
    /// nothing.
    pub const fn new(server: &'static str, pointer: &'static str) -> Self {
        Self {
            server,
            effect_at: pointer,
            found_at: pointer,
            declined: &[],
        }
    }

    /// The same reader, declining with the statuses `declined` ([`AnswerReader::declines`]).
    pub const fn declining(self, declined: &'static [u16]) -> Self {
        Self { declined, ..self }
    }

    fn read(body: &[u8], pointer: &str) -> Result<Effect, &'static str> {
        let value: Value = serde_json::from_slice(body).map_err(|_| "is not JSON")?;
        let id = match value.pointer(pointer) {
            None | Some(Value::Null) => return Err("has no id"),
            Some(Value::String(id)) => id,
            Some(_) => return Err("has an id that is not a string"),
        };
        if id.trim().is_empty() {
            return Err("has an empty id");
        }
        Ok(Effect {
            effect_id: id.clone(),
            subject: None,
        })
    }
}

impl AnswerReader for JsonIdAt {
    fn server(&self) -> &str {
        self.server
    }

    fn effect(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
        Self::read(answer.body, self.effect_at)
    }

    fn found(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
        Self::read(answer.body, self.found_at)
    }

    fn declines(&self, status: u16) -> bool {
        self.declined.contains(&status)
    }
}

/// Why an effect id cannot be committed ([`effect_id_defect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdDefect {
    /// Empty or only spaces.
    Empty,
    /// Longer than [`MAX_EFFECT_ID_CHARS`].
    TooLong,
    /// Holds a byte that is not printable ASCII (`0x20..=0x7E`): a control character could forge
    /// a log line, a non-ASCII one be another id that looks the same.
    NotPrintable,
    /// Printable ASCII within the core's bounds, but outside the format the server declares
    /// ([`IdFormat`]): its length or its pattern.
    OutsideFormat,
}

impl IdDefect {
    /// The defect as a phrase after "the answer": `"has an empty id"`, ...
    pub fn words(self) -> &'static str {
        match self {
            Self::Empty => "has an empty id",
            Self::TooLong => "has an id that is too long",
            Self::NotPrintable => "has an id that is not printable ASCII",
            Self::OutsideFormat => "has an id outside the format the server declares",
        }
    }
}

/// What is wrong with an effect id, `None` if nothing: not blank, at most
/// [`MAX_EFFECT_ID_CHARS`] characters, only printable ASCII (graphic or space). An integration adds
/// its own checks (a secret quoted in the id) in its [`AnswerReader`].
pub fn effect_id_defect(id: &str) -> Option<IdDefect> {
    if id.trim().is_empty() {
        Some(IdDefect::Empty)
    } else if id.len() > MAX_EFFECT_ID_CHARS {
        Some(IdDefect::TooLong)
    } else if !id.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        Some(IdDefect::NotPrintable)
    } else {
        None
    }
}

/// The RFC 9457 problem type of a body: the `type` member of a JSON object, if it is a string.
/// Read whatever the `Content-Type` (some servers send problems as `application/json`).
pub fn problem_type(body: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(body).ok()? {
        Value::Object(mut members) => match members.remove("type")? {
            Value::String(kind) => Some(kind),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a problem type says "the key was used with another request": its last path segment
/// (after the last `/`, query and fragment removed) is exactly [`PROBLEM_IDEMPOTENCY_MISMATCH`].
/// `idempotency_mismatch` and `https://errors.example/p/idempotency_mismatch` are;
/// `not_idempotency_mismatch`, `https://x.example/idempotency_mismatch/help` and `about:blank`
/// are not.
pub(crate) fn is_mismatch_type(problem_type: &str) -> bool {
    let path = problem_type.split(['?', '#']).next().unwrap_or_default();
    path.rsplit('/').next() == Some(PROBLEM_IDEMPOTENCY_MISMATCH)
}

/// A row of a table: the class and the reason, in a few words (summaries carry it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule<C> {
    /// What the answer means.
    pub class: C,
    /// Why, in our words.
    pub why: &'static str,
}

/// What an answer to a call means, before a `2xx` is read for its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallClass {
    /// `2xx`: read the effect id ([`AnswerReader::effect`]); none usable is transient.
    Effect,
    /// Unknown or not the event's fault: ask again later under the same key with the same bytes.
    Transient,
    /// The request itself is refused: it will never succeed.
    Permanent,
    /// The key was used with another request.
    KeyMismatch,
    /// A request with the same key is still being processed.
    KeyInFlight,
}

/// What an answer to a lookup by key means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LookupClass {
    /// `200`: read the effect id ([`AnswerReader::found`]); none usable is transient.
    Found,
    /// `404`: no effect under the key.
    NotFound,
    /// Unknown: ask again later.
    Transient,
}

const fn rule<C>(class: C, why: &'static str) -> Rule<C> {
    Rule { class, why }
}

/// The row of the call table for `status`, with the answer's problem type:
///
/// | answer to a call | outcome | why |
/// | --- | --- | --- |
/// | `2xx` with a usable effect id ([`AnswerReader::effect`]) | `Done` | the effect was made; a retry under the key replays this answer byte for byte |
/// | `2xx` naming an id the gate refuses to keep: outside the server's declared format ([`IdFormat`]; the core's floor: at most [`MAX_EFFECT_ID_CHARS`] printable ASCII), or quoting a secret of the request ([`AnswerReader::id_quotes_secret`]) | `EffectRefused` | the effect exists under the key and every retry replays the same id: a person gets the record at once, told the id only by its keyed digest ([`answer_digest`]); the id is never logged, stored or booked |
/// | `2xx` without one (not JSON, no id, an empty id) | `Transient` | the server has probably made the effect and stored this answer under the key: only asking again under the same key (a redelivery, the reconciler's lookup) is safe; permanent would send it to a person at once, who would make a second effect by hand |
/// | `202 Accepted` | as any `2xx` | the server took the request under the key and stores and replays this answer, so every retry gets the same `202`: an id in it names the accepted effect (committed; what becomes of it later is the server's, looked up by its id); transient would retry until the key's retention ends and then page a person for an effect that exists. An integration whose effects must be complete refuses a `202` in [`AnswerReader::effect`] (then transient) |
/// | `1xx` as a final answer, a status outside `100..=599` | `Transient` | not an outcome: whether the effect was made is unknown |
/// | `3xx` | `Transient` | a redirect is never followed (the request's credentials and secrets go only to the host the configuration names), and it says nothing of whether the effect exists (RFC 9110 15.4.4: a `303` may even answer a completed `POST`). A server that honours the draft answers a keyed call itself; a redirect is its configuration or ours, for an operator to fix, never the event's fault. Asked again under the key; past the key's retention a person gets the record, told the effect may exist |
/// | `401`, `407` | `Transient` | the credentials were refused (by the server, by a proxy): an operator fixes them, the event is not at fault |
/// | `408`, `421`, `423`, `425`, `429` | `Transient` | timed out before processing, misdirected (RFC 9110 15.5.20), locked (RFC 4918), too early (RFC 8470), too many requests: the same request may succeed later (a `429`'s `Retry-After` is its delay) |
/// | `409` with problem type `idempotency_mismatch` (`is_mismatch_type`) | `KeyMismatch` | the key was used with another request (the simulator's answer, and many servers') |
/// | `409` otherwise | `KeyInFlight` | draft -07, section 2.7: a request with the same key is still being processed |
/// | `422` | `KeyMismatch` | draft -07, section 2.7: the key was reused with another request payload |
/// | every other `4xx` (`400`, `402`, `403`, `404`, `405`, `410`, `413`, ...) | `Permanent` | the server refused the request itself (RFC 9110 15.5); the same bytes under the same key are refused again (draft -07: a missing key is `400` too) |
/// | one of those `4xx` the integration names as a refusal of its business ([`AnswerReader::declines`]: a payments API's `402`, a declined card) | `Declined` | as `Permanent`, but a person gets it under its own reason ([`crate::manual::ManualReason::Declined`]) |
/// | `5xx` | `Transient` | the server failed before or after making the effect (the simulator's `503` before taking the key, its `504` after storing the effect): unknown; asked again under the same key, whose replay tells (a `503`'s `Retry-After` is its delay) |
/// | no answer: timeout, connect error, answer body unreadable, any other request error | `Transient` | nothing or an unknown part was done; asked again under the same key |
pub fn call_rule(status: u16, problem_type: Option<&str>) -> Rule<CallClass> {
    use CallClass::{Effect, KeyInFlight, KeyMismatch, Permanent, Transient};
    match status {
        0..=99 | 600..=u16::MAX => rule(Transient, "not an HTTP status: the outcome is unknown"),
        100..=199 => rule(Transient, "an interim answer, not an outcome"),
        200..=299 => rule(Effect, "the effect was made or accepted under the key"),
        300..=399 => rule(
            Transient,
            "a redirect, never followed: the configuration must be fixed",
        ),
        401 | 407 => rule(
            Transient,
            "the credentials were refused: an operator must fix them",
        ),
        408 => rule(Transient, "the server timed out before processing"),
        409 if problem_type.is_some_and(is_mismatch_type) => rule(
            KeyMismatch,
            "the key was used with another request (409 idempotency_mismatch)",
        ),
        409 => rule(
            KeyInFlight,
            "a request with this key is still being processed",
        ),
        421 => rule(
            Transient,
            "misdirected: another connection may reach the server",
        ),
        422 => rule(
            KeyMismatch,
            "the key was used with another request (422, draft -07)",
        ),
        423 => rule(Transient, "the target is locked for now"),
        425 => rule(Transient, "too early: asked again later"),
        429 => rule(Transient, "too many requests: asked again later"),
        400 | 402..=406 | 410..=420 | 424 | 426..=428 | 430..=499 => rule(
            Permanent,
            "the server refused the request; the same request is refused again",
        ),
        500..=599 => rule(
            Transient,
            "the server failed, before or after making the effect",
        ),
    }
}

/// The row of the call table for a request that got no whole answer.
pub(crate) fn failure_rule(failure: RequestFailure) -> Rule<CallClass> {
    use CallClass::Transient;
    match failure {
        RequestFailure::Timeout => rule(
            Transient,
            "no answer in time: the effect may have been made",
        ),
        RequestFailure::Connect => rule(Transient, "no connection: nothing was sent"),
        RequestFailure::Body { .. } => rule(
            Transient,
            "the answer's body was lost: the effect may have been made",
        ),
        RequestFailure::Other => rule(Transient, "the request failed: the outcome is unknown"),
    }
}

/// The row of the lookup table (the module's docs) for `status`.
pub(crate) fn lookup_rule(status: u16) -> Rule<LookupClass> {
    use LookupClass::{Found, NotFound, Transient};
    match status {
        200 => rule(Found, "the effect held under the key"),
        404 => rule(NotFound, "no effect under the key"),
        0..=99 | 600..=u16::MAX => rule(Transient, "not an HTTP status"),
        100..=199 => rule(Transient, "an interim answer, not an outcome"),
        201..=299 => rule(Transient, "a lookup answers 200 or 404, not another 2xx"),
        300..=399 => rule(Transient, "a redirect, never followed"),
        400..=403 | 405..=499 => rule(Transient, "the lookup was refused"),
        500..=599 => rule(Transient, "the server failed"),
    }
}

/// Classifies an answer to a call under a key ([`call_rule`]); a `2xx` is read for its effect by
/// `reader`. Summaries name the server, the status, the content type, the length and the keyed
/// digest, and the row's reason; an id the gate refuses to keep ([`AnswerReader::id_format`],
/// [`AnswerReader::id_quotes_secret`]) is [`CallOutcome::EffectRefused`].
pub fn classify_call<R: AnswerReader + ?Sized>(answer: &Answer<'_>, reader: &R) -> CallOutcome {
    let kind = problem_type(answer.body);
    let rule = call_rule(answer.status, kind.as_deref());
    let summary = || {
        format!(
            "{} answered {}: {}",
            reader.server(),
            describe(answer),
            rule.why
        )
    };
    let detail = || AnswerDetail::new(summary());
    match rule.class {
        CallClass::Effect => match reader.effect(answer) {
            Ok(effect) => match refusal(reader, &effect.effect_id) {
                None => CallOutcome::Done(effect),
                Some(why) => {
                    CallOutcome::EffectRefused(refused(reader, answer, "", why, &effect.effect_id))
                }
            },
            Err(defect) => CallOutcome::Transient(AnswerDetail::new(format!(
                "{} answered {}, but the answer {defect}; the effect may exist under the key: \
                 asked again with the same key",
                reader.server(),
                describe(answer)
            ))),
        },
        CallClass::Transient => CallOutcome::Transient(detail().with_retry_after(delay(answer))),
        CallClass::Permanent if reader.declines(answer.status) => CallOutcome::Declined {
            status: answer.status,
            detail: detail(),
        },
        CallClass::Permanent => CallOutcome::Permanent {
            status: answer.status,
            detail: detail(),
        },
        CallClass::KeyMismatch => CallOutcome::KeyMismatch(detail()),
        CallClass::KeyInFlight => CallOutcome::KeyInFlight,
    }
}

/// The delay a `429` or `503` asks for in `Retry-After` (RFC 9110 §10.2.3 and §15.6.4:
/// the other statuses' header is not read), `None` without one or when it is garbage.
fn delay(answer: &Answer<'_>) -> Option<crate::effect::RetryAfter> {
    match answer.status {
        429 | 503 => answer.retry_after.and_then(super::parse_retry_after),
        _ => None,
    }
}

/// Classifies a call that got no whole answer (`failure_rule`): always transient, in our words.
pub fn classify_call_failure<R: AnswerReader + ?Sized>(
    failure: RequestFailure,
    reader: &R,
) -> CallOutcome {
    let rule = failure_rule(failure);
    CallOutcome::Transient(AnswerDetail::new(format!(
        "call to {} failed: {}: {}",
        reader.server(),
        failure_words(failure),
        rule.why
    )))
}

/// Classifies an answer to a lookup by key (`lookup_rule`); a `200` is read for its effect by
/// `reader`.
///
/// | answer to a lookup | outcome |
/// | --- | --- |
/// | `200` with a usable effect id ([`AnswerReader::found`]) | `Found` |
/// | `404` | `NotFound` (never made, failed, or forgotten past the retention) |
/// | anything else (another `2xx`, `200` without a usable id, `1xx`, `3xx`, another `4xx`, `5xx`, no answer) | `Transient` |
pub fn classify_lookup<R: AnswerReader + ?Sized>(answer: &Answer<'_>, reader: &R) -> LookupOutcome {
    let rule = lookup_rule(answer.status);
    match rule.class {
        LookupClass::Found => match reader.found(answer) {
            Ok(effect) => match refusal(reader, &effect.effect_id) {
                None => LookupOutcome::Found(effect),
                Some(why) => LookupOutcome::EffectRefused(refused(
                    reader,
                    answer,
                    "lookup: ",
                    why,
                    &effect.effect_id,
                )),
            },
            Err(defect) => LookupOutcome::Transient(AnswerDetail::new(format!(
                "lookup: {} answered {}, but the answer {defect}",
                reader.server(),
                describe(answer)
            ))),
        },
        LookupClass::NotFound => LookupOutcome::NotFound,
        LookupClass::Transient => LookupOutcome::Transient(
            AnswerDetail::new(format!(
                "lookup: {} answered {}: {}",
                reader.server(),
                describe(answer),
                rule.why
            ))
            .with_retry_after(delay(answer)),
        ),
    }
}

/// Classifies a lookup that got no whole answer: transient, in our words.
pub fn classify_lookup_failure<R: AnswerReader + ?Sized>(
    failure: RequestFailure,
    reader: &R,
) -> LookupOutcome {
    LookupOutcome::Transient(AnswerDetail::new(format!(
        "lookup at {} failed: {}",
        reader.server(),
        failure_words(failure)
    )))
}

fn failure_words(failure: RequestFailure) -> String {
    match failure {
        RequestFailure::Timeout => "timeout".into(),
        RequestFailure::Connect => "connect error".into(),
        RequestFailure::Body { status } => format!("answer {status} unreadable (body error)"),
        RequestFailure::Other => "request error".into(),
    }
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
