//! Charging a card for a demurrage invoice, exactly once, through a Stripe-like payments API:
//! the third integration on the gate's core, written against `gate`'s public API only
//! (`docs/INTEGRATING.md` walks through it from `cargo new`).
//!
//! * `POST {base}/v1/charges` with `Authorization: Bearer {API key}`, `Idempotency-Key: "K"` and
//!   the charge as JSON answers `201 {"id": "ch_..."}`; the same key and body replays that answer
//!   for 24 hours ([`KEY_RETENTION_MS`], as Stripe keeps keys); the same key with another body is
//!   `409` with problem type `idempotency_mismatch`; a declined card is `402`, reaching a person
//!   as `card_declined` ([`CARD_DECLINED`]); the core's table classifies every other status.
//! * **No lookup by key** (no [`Integration::lookup_by_key`]): inside the retention the gate
//!   re-sends the stored request under its key; past it a person gets the record.
//! * An invoice event is a JSON object, at most 8 KiB: `invoice_id`, `customer`
//!   (1 to 64 printable ASCII characters each), `amount_minor` (the amount in the currency's
//!   minor unit, an integer from 1 to 99,999,999: Stripe's eight digits), `currency` (an ISO 4217
//!   alphabetic code: three upper-case letters) and `payment_method` (the card's token: a
//!   secret, sent to the API only, never logged, never in the fingerprint). Anything else is
//!   rejected with a typed reason and reaches a person once.
//!
//! Size: the integration is this file and `src/lambda.rs` (non-blank lines that are not
//! comments); `src/bin/*` and `src/scenario.rs` (feature `testkit`) are not the integration.

pub mod lambda;
#[cfg(feature = "testkit")]
pub mod scenario;

use gate::prelude::*;
use serde_json::json;

/// The integration's code for a declined card (`402 Payment Required`): the core's
/// [`ManualReason::Declined`] on its manual items.
pub const CARD_DECLINED: &str = "card_declined";
/// How long the payments API keeps an `Idempotency-Key`, **milliseconds**: 24 hours.
pub const KEY_RETENTION_MS: i64 = 24 * 3_600_000;
/// The API's answers: a `201` holds the charge id at `/id`; a `402` is a declined card.
const API: JsonIdAt = JsonIdAt::new("payments API", "/id").declining(&[402]);

/// The payments API's client: its base URL (e.g. `https://api.payments.example`, no trailing
/// slash), its API key (`Debug` redacts it) and an HTTP client that follows no redirect
/// (`gate_http::builder`, with a timeout: [`lambda::build`] uses 10 s).
#[derive(Debug, Clone)]
pub struct Payments {
    /// The API's base URL.
    pub url: String,
    /// The API key, sent as a bearer token.
    pub key: SecretString,
    /// The HTTP client.
    pub http: reqwest::Client,
}

/// An invoice event's charge, or why the body can never be one (the crate docs).
///
/// # Errors
/// The rejection, typed (`gate::fields`): `body_too_large`, `not_json`, `unknown_field`,
/// `missing_field` or `bad_field`, naming the field.
pub fn invoice(body: &str) -> Result<Event, Rejection> {
    let f = Fields::parse(body, 8 * 1024)?;
    let (invoice, customer) = (f.text("invoice_id", 64)?, f.text("customer", 64)?);
    let amount = f.integer("amount_minor", 1..=99_999_999)?;
    let (currency, card) = (f.letters("currency", 3)?, f.text("payment_method", 255)?);
    f.all_read()?;
    let charge = json!({"invoice_id": invoice, "customer": customer,
        "amount": amount, "currency": currency});
    let request = json!({"amount": amount, "currency": currency, "customer": customer,
        "payment_method": card, "metadata": {"invoice_id": invoice}});
    let labels = [("invoice", invoice), ("customer", customer)];
    Ok(Event {
        key_material: format!("invoice:{invoice}"),
        business_fields: charge,
        request: request.to_string().into_bytes(),
        labels: labels.map(|(k, v)| (k.to_string(), v.to_string())).into(),
        ends_at_ms: None,
        subject: invoice.to_string(),
    })
}

#[async_trait::async_trait]
impl Integration for Payments {
    /// A charge's `Idempotency-Key` is made of its event key and this name.
    fn operation(&self) -> &str {
        "charge-invoice"
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        invoice(body).into()
    }

    async fn call(&self, held: &Held<'_>) -> CallOutcome {
        let (record, url) = (held.record(), format!("{}/v1/charges", self.url));
        let request = reqwest::Client::post(&self.http, url)
            .bearer_auth(self.key.expose())
            .header("Content-Type", "application/json")
            .body(record.request.clone());
        gate_http::call(request, &record.op_key, &API).await
    }

    /// A declined card is `card_declined` ([`CARD_DECLINED`]); the other reasons keep the core's
    /// codes.
    fn manual_reason_code(&self, reason: ManualReason) -> &'static str {
        match reason {
            ManualReason::Declined => CARD_DECLINED,
            other => other.code(),
        }
    }

    fn manual_reason_text(&self, reason: ManualReason) -> &'static str {
        match reason {
            ManualReason::Declined => "the card was declined: ask the customer for another card",
            other => other.text(),
        }
    }
}
