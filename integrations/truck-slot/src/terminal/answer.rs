//! How the terminal's answers are read: the truck-slot hooks of the core's `Idempotency-Key`
//! classification ([`gate::idempotency_key`], whose table gives every status its outcome and
//! reason). What is the terminal's alone lives here:
//!
//! * the slot of a `2xx` (`{slot_id, equipment_number}`; a lookup's `{"slot": {...}}`; an
//!   `appointments-v2` answer reshaped first, [`super::several::appointments_v2_answer`]);
//! * every field of it checked against the request's secrets: a slot id that is not a usable
//!   effect id ([`gate::idempotency_key::effect_id_defect`]: blank, longer than
//!   [`MAX_SLOT_ID_CHARS`], not printable ASCII) or that quotes the PIN or the token in any form
//!   ([`super::scrub`]) makes the answer unusable (**transient**: the terminal has probably made
//!   the slot and stored its answer under the key, so only asking again under the key is safe);
//!   an `equipment_number` other than the container asked for is kept only scrubbed;
//! * the excerpt a person reads of an answer that gave no slot (the record's `error`, the manual
//!   item's `detail`; never a log line, whose summary is the core's): a problem's `detail` or
//!   `title`, or the answer's first [`DETAIL_MAX`] characters, values of secret-looking JSON keys
//!   replaced, every secret cut out before it is shortened, control characters escaped.

use std::borrow::Cow;

use gate::idempotency_key::{
    classify_call, effect_id_defect, Answer, AnswerReader, IdDefect, MAX_EFFECT_ID_CHARS,
};
use serde::Deserialize;
use serde_json::Value;

use super::scrub;
use super::several::{appointments_v2_answer, TerminalApi};
use super::{CallOutcome, Effect, LookupOutcome};
use crate::notification::MAX_EQUIPMENT_NUMBER_CHARS;

/// Longest slot id accepted, in characters: the core's [`MAX_EFFECT_ID_CHARS`]. A slot id must
/// also be printable ASCII (`0x20..=0x7E`) and not blank.
pub const MAX_SLOT_ID_CHARS: usize = MAX_EFFECT_ID_CHARS;

/// Longest excerpt of an error answer kept in a detail string, in characters.
pub const DETAIL_MAX: usize = 300;

/// JSON keys whose values are replaced by `[redacted]` in an excerpt (compared case-insensitively,
/// `-` and `_` ignored): a terminal that echoes the request or its headers must not put the PIN
/// or the token into a detail string.
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

/// What [`TerminalAnswers`] keeps of an answered equipment number that quotes a secret.
pub const EQUIPMENT_WITHHELD: &str = "(withheld: it quotes a secret of the request)";

#[derive(Deserialize)]
struct SlotBody {
    slot_id: Option<String>,
    equipment_number: Option<String>,
}

#[derive(Deserialize)]
struct LookupBody {
    slot: SlotBody,
}

#[derive(Deserialize)]
struct Problem {
    title: Option<String>,
    detail: Option<String>,
}

/// The terminal's [`AnswerReader`]: what an answer about one request is checked against (the
/// secrets no quoted text may hold: the token and the request's PIN; the container asked for)
/// and the terminal's API shape.
#[derive(Debug, Clone, Default)]
pub struct TerminalAnswers<'a> {
    /// The token and the request's PIN.
    pub secrets: Vec<&'a str>,
    /// The container the request asked for.
    pub equipment_number: Option<&'a str>,
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

    /// The slot of an answer (a JSON object with a usable string `slot_id`). An `equipment_number`
    /// other than the container asked for is kept only scrubbed: withheld when it quotes a secret,
    /// as its escaped excerpt when it is not short printable ASCII. It cannot equal the container
    /// asked for, so the gate routes the answer as invalid.
    fn slot(&self, body: SlotBody) -> Option<Effect> {
        let slot_id = body
            .slot_id
            .filter(|s| slot_id_defect(s, &self.secrets).is_none())?;
        let equipment_number = body.equipment_number.map(|e| {
            if self.equipment_number == Some(e.as_str()) {
                e
            } else if scrub::quotes_secret(&e, &self.secrets) {
                EQUIPMENT_WITHHELD.to_string()
            } else if e.len() <= MAX_EQUIPMENT_NUMBER_CHARS
                && e.bytes().all(|b| b.is_ascii_graphic())
            {
                e
            } else {
                format!(
                    "(unreadable: {:?})",
                    printable(&e, MAX_EQUIPMENT_NUMBER_CHARS)
                )
            }
        });
        Some(Effect {
            effect_id: slot_id,
            subject: equipment_number,
        })
    }

    /// Why a `2xx` answer has no usable slot, without quoting a slot id that failed the checks.
    fn defect(&self, body: &[u8]) -> &'static str {
        let Ok(value) = serde_json::from_slice::<Value>(body) else {
            return "is not JSON";
        };
        let slot = value.get("slot").unwrap_or(&value);
        match slot.get("slot_id") {
            None | Some(Value::Null) => "has no slot_id",
            // A valid slot_id with another field unreadable: reported with the id rules.
            Some(Value::String(s)) => slot_id_defect(s, &self.secrets)
                .unwrap_or("has a slot_id that is not printable ASCII"),
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
            .and_then(|b| self.slot(b))
            .ok_or_else(|| self.defect(&body))
    }

    fn found(&self, answer: &Answer<'_>) -> Result<Effect, &'static str> {
        let body = self.shaped(answer.body, true);
        serde_json::from_slice::<LookupBody>(&body)
            .ok()
            .and_then(|b| self.slot(b.slot))
            .ok_or_else(|| self.defect(&body))
    }

    fn excerpt(&self, answer: &Answer<'_>) -> Option<String> {
        let problem: Option<Problem> = serde_json::from_slice(answer.body).ok();
        Some(match problem.and_then(|p| p.detail.or(p.title)) {
            Some(text) => printable(&scrub::scrub(&text, &self.secrets), DETAIL_MAX),
            None => excerpt(answer.body, &self.secrets),
        })
    }
}

/// What is wrong with `slot_id`, or `None` if it is acceptable: a usable effect id
/// ([`effect_id_defect`]) quoting none of `secrets` in any form [`super::scrub`] finds (a slot id
/// is logged and stored in the booking).
fn slot_id_defect(slot_id: &str, secrets: &[&str]) -> Option<&'static str> {
    match effect_id_defect(slot_id) {
        Some(IdDefect::Empty) => Some("has an empty slot_id"),
        Some(IdDefect::TooLong) => Some("has a slot_id that is too long"),
        Some(IdDefect::NotPrintable) => Some("has a slot_id that is not printable ASCII"),
        None if scrub::quotes_secret(slot_id, secrets) => {
            Some("has a slot_id that quotes a secret of the request")
        }
        None => None,
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
/// characters escaped (`\n`, `\u{1b}`), so a quoted answer cannot forge a log line.
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

/// A detail excerpt of an answer body: JSON with secret-looking keys redacted (see
/// [`SECRET_KEYS`]), then every secret scrubbed ([`scrub::scrub`]), and only then shortened and
/// escaped by [`printable`] (so a secret cut in two by the shortening cannot leave its first half
/// behind).
fn excerpt(body: &[u8], secrets: &[&str]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(mut v) => {
            redact_secret_keys(&mut v);
            v.to_string()
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    printable(&scrub::scrub(&text, secrets), DETAIL_MAX)
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
