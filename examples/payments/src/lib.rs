//! Charging a card for a demurrage invoice, exactly once, through a Stripe-like payments API:
//! the third integration on the gate's core, written against `gate`'s public API only
//! (`docs/INTEGRATING.md` walks through it from `cargo new`).
//!
//! * `POST {base}/v1/charges` with `Authorization: Bearer {API key}`, `Idempotency-Key: "K"` and
//!   the charge as JSON answers `201 {"id": "ch_..."}`; the same key and body replays that answer
//!   for 24 hours ([`KEY_RETENTION_MS`], as Stripe keeps keys); the same key with another body is
//!   `409` with problem type `idempotency_mismatch`; a declined card is `402`, permanent, and
//!   reaches a person as `card_declined` ([`CARD_DECLINED`]). Every other status is classified by
//!   the core's Idempotency-Key table (`gate::idempotency_key`).
//! * The API has **no lookup by key** ([`Integration::supports_lookup`] is `false`): inside the
//!   retention the gate re-sends the stored request under its key (the API's replay is the
//!   lookup); past it a person gets the record with what is known.
//! * An invoice event is a JSON object, at most [`MAX_BODY_BYTES`]: `invoice_id`, `customer`
//!   (1 to 64 printable ASCII characters each), `amount_minor` (the amount in the currency's
//!   minor unit, an integer from 1 to 99,999,999: Stripe's eight digits), `currency` (an ISO 4217
//!   alphabetic code: three upper-case letters) and `payment_method` (the card's token: a
//!   secret, sent to the API only, never logged, never in the fingerprint). Anything else is
//!   rejected with a typed reason and reaches a person once.
//!
//! Size, as issue 22 counts it: the integration is this file and `src/lambda.rs`, counted as
//! their non-blank lines that are not comments (`//` or `//!` or `///`); `src/bin/*` (the mains)
//! and `src/scenario.rs` (the exactly-once scenario of the tests and the `payments-seeds`
//! benchmark, feature `testkit`) are not the integration.

pub mod lambda;
#[cfg(feature = "testkit")]
pub mod scenario;

use async_trait::async_trait;
use gate::effect::{ClaimOutcome, LookupOutcome};
use gate::idempotency_key::{client, JsonIdAt};
use gate::integration::{Event, Held, Integration, Parsed, Rejection};
use gate::lambda::SecretString;
use gate::record::{IdempotencyRecord, Labels};
use serde_json::{json, Map, Value};

/// The operation name of a charge's `Idempotency-Key`.
pub const CHARGE: &str = "charge-invoice";
/// The integration's reason code for a declined card (`402 Payment Required`).
pub const CARD_DECLINED: &str = "card_declined";
/// Largest invoice event accepted, bytes.
pub const MAX_BODY_BYTES: usize = 8 * 1024;
/// How long the payments API keeps an `Idempotency-Key`, **milliseconds**: 24 hours.
pub const KEY_RETENTION_MS: i64 = 24 * 3_600_000;
/// Where a `201` holds the charge id (`{"id": "ch_..."}`); no lookup answer exists.
const API: JsonIdAt = JsonIdAt {
    server: "payments API",
    effect_at: "/id",
    found_at: "/id",
};

/// The payments API's client. `Debug` redacts the API key.
#[derive(Debug, Clone)]
pub struct Payments {
    base: String,
    api_key: SecretString,
    http: reqwest::Client,
}

impl Payments {
    /// A client of the API at `base` (e.g. `https://api.payments.example`), 10 s per request.
    ///
    /// # Errors
    /// If the HTTP client cannot be built.
    pub fn new(base: impl Into<String>, api_key: SecretString) -> Result<Self, reqwest::Error> {
        let http = client::builder("payments-example/0.1")
            .timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Self::with_http(base, api_key, http))
    }

    /// A client of the API at `base` on an HTTP client of yours (one client for many tests).
    pub fn with_http(
        base: impl Into<String>,
        api_key: SecretString,
        http: reqwest::Client,
    ) -> Self {
        Self {
            base: base.into(),
            api_key,
            http,
        }
    }
}

fn reject(code: &'static str, detail: &str) -> Parsed {
    Parsed::Rejected(Rejection {
        code,
        detail: detail.to_string(),
        ended: false,
    })
}

/// The field `name` if it is 1 to `max` printable ASCII characters.
fn text<'a>(fields: &'a Map<String, Value>, name: &str, max: usize) -> Option<&'a str> {
    let value = fields.get(name)?.as_str()?;
    let printable = value.bytes().all(|b| b.is_ascii_graphic());
    (printable && !value.is_empty() && value.len() <= max).then_some(value)
}

#[async_trait]
impl Integration for Payments {
    fn operation(&self) -> &str {
        CHARGE
    }

    fn parse(&self, body: &str, _now_ms: i64) -> Parsed {
        if body.len() > MAX_BODY_BYTES {
            return reject("body_too_large", "invoice event over 8 KiB");
        }
        let Ok(Value::Object(f)) = gate::strict_json::from_str_strict(body) else {
            return reject(
                "not_json",
                "invoice event is not a JSON object with unique keys",
            );
        };
        const FIELDS: [&str; 5] = [
            "invoice_id",
            "customer",
            "amount_minor",
            "currency",
            "payment_method",
        ];
        if f.len() != FIELDS.len() || !FIELDS.iter().all(|k| f.contains_key(*k)) {
            return reject("bad_fields", "fields must be exactly invoice_id, customer, amount_minor, currency, payment_method");
        }
        let (Some(invoice), Some(customer)) =
            (text(&f, "invoice_id", 64), text(&f, "customer", 64))
        else {
            return reject(
                "bad_id",
                "invoice_id or customer not 1 to 64 printable ASCII characters",
            );
        };
        let Some(amount) = f["amount_minor"]
            .as_u64()
            .filter(|a| (1..=99_999_999).contains(a))
        else {
            return reject(
                "bad_amount",
                "amount_minor not an integer from 1 to 99999999",
            );
        };
        let Some(currency) = text(&f, "currency", 3)
            .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()))
        else {
            return reject(
                "bad_currency",
                "currency not an ISO 4217 code (three upper-case letters)",
            );
        };
        let Some(card) = text(&f, "payment_method", 255) else {
            return reject(
                "bad_payment_method",
                "payment_method not 1 to 255 printable ASCII characters",
            );
        };
        let charge = json!({ "invoice_id": invoice, "customer": customer, "amount": amount, "currency": currency });
        let request = json!({ "amount": amount, "currency": currency, "customer": customer, "payment_method": card, "metadata": { "invoice_id": invoice } });
        let labels = [
            ("invoice", invoice),
            ("customer", customer),
            ("currency", currency),
        ];
        let mut labels: Labels = labels.map(|(k, v)| (k.to_string(), v.to_string())).into();
        labels.insert("amount_minor".to_string(), amount.to_string());
        Parsed::Event(Event {
            key_material: format!("invoice:{invoice}"),
            business_fields: charge,
            request: request.to_string().into_bytes(),
            labels,
            ends_at_ms: None,
            subject: invoice.to_string(),
        })
    }

    async fn call(&self, held: &Held<'_>) -> ClaimOutcome {
        let record = held.record();
        let request = self
            .http
            .post(format!("{}/v1/charges", self.base))
            .bearer_auth(self.api_key.expose())
            .header("Content-Type", "application/json")
            .body(record.request.clone());
        match client::call(request, &record.op_key, &API).await {
            ClaimOutcome::Permanent {
                status: 402,
                detail,
            } => ClaimOutcome::Refused {
                code: CARD_DECLINED,
                detail,
            },
            outcome => outcome,
        }
    }

    /// Never called: [`Integration::supports_lookup`] is `false`.
    async fn lookup(&self, _held: &Held<'_>) -> LookupOutcome {
        LookupOutcome::Transient("payments API has no lookup by key".into())
    }

    fn supports_lookup(&self, _record: &IdempotencyRecord) -> bool {
        false
    }

    /// An invoice does not end: its record lives the key TTL from its reservation.
    fn ends_at_ms(&self, _record: &IdempotencyRecord) -> Option<i64> {
        None
    }

    fn label_names(&self) -> &[&'static str] {
        &["invoice", "customer", "currency", "amount_minor"]
    }
}
