//! How the terminal's answers are read: the truck-slot hooks of the core's `Idempotency-Key`
//! classification ([`gate::idempotency_key`], whose table gives every status its outcome and
//! reason). What is the terminal's alone lives here:
//!
//! * the slot of a `2xx` (`{slot_id, equipment_number}`; a lookup's `{"slot": {...}}`; an
//!   `appointments-v2` answer reshaped first, [`super::several::appointments_v2_answer`]);
//! * the terminal's slot-id format (its configuration declares it, [`gate::idempotency_key::IdFormat`],
//!   the strict default otherwise): the core refuses every slot id outside it, and, as a second
//!   line, every slot id that quotes the PIN or the token in any form [`super::scrub`] finds
//!   (hex of the PIN fits most formats): the record goes to a person, the id named only by its
//!   keyed digest;
//! * for `gatectl lookup` only, the answer rendered for the operator's terminal
//!   ([`for_the_operator`]): values of secret-looking JSON keys replaced, every secret cut out,
//!   control characters escaped. It is printed, never stored or logged: no record's `error`, no
//!   manual item's `detail` and no log line holds a character a terminal chose.

use std::borrow::Cow;

use gate::idempotency_key::{classify_call, Answer, AnswerReader, IdFormat, MAX_EFFECT_ID_CHARS};
use serde::Deserialize;
use serde_json::Value;

use super::scrub;
use super::several::{appointments_v2_answer, TerminalApi};
use super::{CallOutcome, Effect, LookupOutcome};

/// Longest slot id any terminal's format may declare, in characters: the core's
/// [`MAX_EFFECT_ID_CHARS`]. A slot id must also be printable ASCII (`0x20..=0x7E`) and not blank.
pub const MAX_SLOT_ID_CHARS: usize = MAX_EFFECT_ID_CHARS;

/// Longest rendering of an answer [`for_the_operator`] prints, in characters.
pub const OPERATOR_VIEW_MAX: usize = 4_000;

/// JSON keys whose values are replaced by `[redacted]` in [`for_the_operator`] (compared
/// case-insensitively, `-` and `_` ignored): a terminal that echoes the request or its headers
/// must not put the PIN or the token on the operator's screen.
const SECRET_KEYS: &[&str] = &[
    "pin",
    "releasepin",
    "token",
    "apitoken",
    "accesstoken",
    "authorization",
    "password",
    "secret",
];

#[derive(Deserialize)]
struct SlotBody {
    slot_id: Option<String>,
    equipment_number: Option<String>,
}

#[derive(Deserialize)]
struct LookupBody {
    slot: SlotBody,
}

/// The terminal's [`AnswerReader`]: what an answer about one request is checked against (the
/// secrets no slot id may quote: the token and the request's PIN), the terminal's declared
/// slot-id format and its API shape.
#[derive(Debug, Clone, Default)]
pub struct TerminalAnswers<'a> {
    /// The token and the request's PIN.
    pub secrets: Vec<&'a str>,
    /// The format the terminal's configuration declares for its slot ids.
    pub slot_id_format: IdFormat,
    /// The API shape the answer is in.
    pub api: TerminalApi,
}

impl TerminalAnswers<'_> {
    /// A `2xx` answer in the `slots` shape the slot is read from.
    fn shaped<'b>(&self, body: &'b [u8], lookup: bool) -> Cow<'b, [u8]> {
        match self.api {
            TerminalApi::AppointmentsV2 => {
                appointments_v2_answer(body, lookup).map_or(Cow::Borrowed(body), Cow::Owned)
            }
            TerminalApi::Slots => Cow::Borrowed(body),
        }
    }

    /// The slot of an answer: a JSON object with a non-blank string `slot_id`. The core checks
    /// the id against the declared format and [`AnswerReader::id_quotes_secret`]; the
    /// `equipment_number` is the terminal's text, compared with the container asked for and
    /// otherwise named only by its keyed digest (`gate::consumer`).
    fn slot(body: SlotBody) -> Option<Effect> {
        let slot_id = body.slot_id.filter(|s| !s.trim().is_empty())?;
        Some(Effect {
            effect_id: slot_id,
            subject: body.equipment_number,
        })
    }

    /// Why a `2xx` answer has no slot id to judge, in our words.
    fn defect(body: &[u8]) -> &'static str {
        let Ok(value) = serde_json::from_slice::<Value>(body) else {
            return "is not JSON";
        };
        let slot = value.get("slot").unwrap_or(&value);
        match slot.get("slot_id") {
            None | Some(Value::Null) => "has no slot_id",
            Some(Value::String(s)) if s.trim().is_empty() => "has an empty slot_id",
            Some(Value::String(_)) => "has a slot in an unreadable shape",
            Some(_) => "has a slot_id that is not a string",
        }
    }
}

impl AnswerReader for TerminalAnswers<'_> {
    fn server(&self) -> &str {
        "terminal"
    }

    fn effect(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
        let body = self.shaped(answer.body, false);
        serde_json::from_slice::<SlotBody>(&body)
            .ok()
            .and_then(Self::slot)
            .ok_or_else(|| Self::defect(&body))
    }

    fn found(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
        let body = self.shaped(answer.body, true);
        serde_json::from_slice::<LookupBody>(&body)
            .ok()
            .and_then(|b| Self::slot(b.slot))
            .ok_or_else(|| Self::defect(&body))
    }

    fn id_format(&self) -> &IdFormat {
        &self.slot_id_format
    }

    /// The second line: a slot id in the format that decodes to the PIN or the token under any
    /// encoding [`super::scrub`] knows (hex, base64, references, separators, case, ...).
    fn id_quotes_secret(&self, id: &str) -> bool {
        super::id_secrets::id_quotes_secret(id, &self.secrets)
    }
}

fn is_secret_key(key: &str) -> bool {
    let folded: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_KEYS.contains(&folded.as_str())
}

fn redact_secret_keys(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if is_secret_key(key) {
                    *v = Value::String(scrub::REDACTED.into());
                } else {
                    redact_secret_keys(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_secret_keys),
        _ => {}
    }
}

/// A printable, bounded rendering of `text`: at most `max` characters (then `…`), control
/// characters escaped (`\n`, `\u{1b}`), so a printed answer cannot drive the operator's terminal.
fn printable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// An answer body for the operator's terminal (`gatectl lookup`, never stored or logged): JSON
/// with secret-looking keys redacted (see [`SECRET_KEYS`]), then every secret scrubbed
/// ([`scrub::scrub`]: a second line, since what the screen shows is the terminal's text), and
/// only then shortened to [`OPERATOR_VIEW_MAX`] characters and escaped by [`printable`] (so a
/// secret cut in two by the shortening cannot leave its first half behind).
pub fn for_the_operator(body: &[u8], secrets: &[&str]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(mut v) => {
            redact_secret_keys(&mut v);
            v.to_string()
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    printable(&scrub::scrub(&text, secrets), OPERATOR_VIEW_MAX)
}

/// Classifies a claim answer (status and body bytes in the `slots` shape) by the core's table
/// ([`gate::idempotency_key::classify_call`]) with the terminal's hooks. No secret is known here
/// (the simulation's classification); [`super::HttpTerminal`] classifies with the secrets of the
/// request, which is what quotes an answer safely.
pub fn classify_claim(status: u16, body: &[u8]) -> CallOutcome {
    classify_call(&Answer::new(status, body), &TerminalAnswers::default())
}

/// Classifies a lookup answer (`GET /slots?idempotency_key=K`: status and body bytes): `200` with
/// a usable slot is [`LookupOutcome::Found`], `404` [`LookupOutcome::NotFound`], anything else
/// [`LookupOutcome::Transient`] ([`gate::idempotency_key::classify_lookup`]). No secret is known
/// here, as for [`classify_claim`].
pub fn classify_lookup(status: u16, body: &[u8]) -> LookupOutcome {
    gate::idempotency_key::classify_lookup(&Answer::new(status, body), &TerminalAnswers::default())
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
