//! The gate itself: [`Gate`], the value every path runs on (the consumer, the reconciler, an
//! operator's finish and cancel, the purge), built once per cold start; its settings
//! ([`GateConfig`], with the lease and the record a reserve writes); the execution it runs in
//! ([`Invocation`]) and one delivery as the steps see it ([`Delivery`]); and what every path
//! does alike: the take-over of an expired lease, the release of a lease after a transient
//! failure, the policy the one decision reads. A held record's steps are in [`crate::held`].

use std::sync::Arc;

use tracing::warn;

use crate::clock::{ms_to_s, Clock};
use crate::decision::Policy;
use crate::derive::DerivedKeys;
use crate::integration::{Event, Integration};
use crate::manual::ManualQueue;
use crate::outcome::RecordOutcome;
use crate::record::DEFAULT_KEY_TTL_S;
use crate::record::{inflight_shard, record_pk, IdempotencyRecord, NaturalKey, RecordStatus};
use crate::store::{IdempotencyStore, StoreError, TakeOver};
use crate::visibility::MessageVisibility;

/// The gate's generic settings, the same for every integration: the record keys' prefix, the
/// server's key support, the record TTL (**seconds**), the lease floor, the deadline margin and the
/// claim horizon (**milliseconds**), the concurrency within a batch. [`GateConfig::new`] gives
/// the defaults; in a deployment `gate_lambda` reads them from the environment at cold start.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// The integration's name, the prefix of every record key (`"{integration}#{event_key}"`).
    pub integration: String,
    /// Whether the side effect's server honours `Idempotency-Key` (the server, on the
    /// truck-slot path), unless the integration says otherwise for a record
    /// ([`Integration::supports_idempotency_key`]). If not, every event goes to the manual queue:
    /// a retry could make a second effect.
    pub server_supports_idempotency_key: bool,
    /// Record lifetime in **seconds**, counted from the later of the reservation and the event's
    /// end ([`crate::integration::Event::ends_at_ms`]; `expires_at = max(now, end) + ttl`, see
    /// [`GateConfig::record_expiry_s`]); routing records count from their reservation. Default 21 days
    /// ([`DEFAULT_KEY_TTL_S`]).
    pub key_ttl_s: i64,
    /// The lease, **milliseconds**: a holder keeps a record this long from its reserve or
    /// take-over, or [`GateConfig::deadline_margin_ms`] (one record's work: a server call and a
    /// commit) if that is longer (default 15 s: the server's 10 s request timeout, a commit and a
    /// margin). It covers the holder's call and commit and no more, so a record stranded by a
    /// crash is free for the reconciler soon after; a holder that outlives it is fenced (its
    /// commit refused, its effect id recorded for the next holder).
    pub lease_floor_ms: i64,
    /// Records processed at once within a batch (0 counts as 1); each holds its own lease.
    pub max_concurrency: usize,
    /// No new record is started when less than this many **milliseconds** remain before the
    /// invocation's deadline (keep it above the server's request timeout plus a commit).
    pub deadline_margin_ms: i64,
    /// A record older than this many **milliseconds** is never claimed again by whoever resumes
    /// it: the server's key retention minus a margin (default 23 h: 24 h retention, 1 h
    /// margin, as [`crate::reconciler::ReconcilerConfig`]). Past it the server may have
    /// forgotten the key, so a claim could make a second effect; the effect is looked up instead,
    /// and without one the record goes to a person (`past_key_retention`). This is what keeps a
    /// redelivery days later from claiming again.
    pub claim_horizon_ms: i64,
    /// The longest one call to the side effect's server may take, **milliseconds** (its
    /// request timeout; default 10 s, the server's). Before a call the holder needs this plus
    /// [`COMMIT_ALLOWANCE_MS`] of lease left ([`GateConfig::call_lease_ms`]); with less (a slow
    /// reserve or guard ate it) it extends its lease first (`HeldRecord::call`). In a
    /// deployment set from the integration's request timeout (`gate_lambda`).
    pub call_timeout_ms: i64,
    /// The event queue's visibility port: a message whose server asked to wait
    /// (`Retry-After`) is hidden for the delay. `None` (the default): such a record is left to
    /// the reconciler with its lease held to the delay's end (docs/OPERATING.md,
    /// "Retry-After"). The Lambda wiring sets SQS's (`gate_dynamo::sqs::SqsVisibility`).
    pub visibility: Option<Arc<dyn MessageVisibility>>,
}

/// What one record's work needs after its server calls, **milliseconds**: the commit and the
/// store calls around it. The deadline margin fits the calls and this
/// ([`min_deadline_margin_ms`]); a holder calls only with a call's timeout and this
/// of lease left ([`GateConfig::call_lease_ms`]).
pub const COMMIT_ALLOWANCE_MS: i64 = 2_000;

/// The least deadline margin for a record that makes `calls` server calls of at most
/// `call_timeout_ms` each and then commits, milliseconds: `calls × timeout + COMMIT_ALLOWANCE_MS`
/// (a negative timeout counts as 0).
pub fn min_deadline_margin_ms(call_timeout_ms: i64, calls: i64) -> i64 {
    call_timeout_ms
        .max(0)
        .saturating_mul(calls)
        .saturating_add(COMMIT_ALLOWANCE_MS)
}

impl GateConfig {
    /// Defaults for `integration` (the record keys' prefix): key support on, 21-day TTL,
    /// 15 s lease, 10 records at once, 12 s deadline margin, 23 h claim horizon, 10 s call
    /// timeout.
    pub fn new(integration: impl Into<String>) -> Self {
        Self {
            integration: integration.into(),
            server_supports_idempotency_key: true,
            key_ttl_s: DEFAULT_KEY_TTL_S,
            lease_floor_ms: 15_000,
            max_concurrency: 10,
            deadline_margin_ms: 12_000,
            claim_horizon_ms: 23 * 3_600_000,
            call_timeout_ms: 10_000,
            visibility: None,
        }
    }

    /// One record's lease, **milliseconds**: `max(lease_floor_ms, deadline_margin_ms)`, a
    /// server call and a commit with a margin ([`GateConfig::lease_until`]).
    pub fn lease_ms(&self) -> i64 {
        self.lease_floor_ms.max(self.deadline_margin_ms)
    }

    /// The lease a holder must have left to call the server, **milliseconds**: one call's
    /// timeout ([`GateConfig::call_timeout_ms`], never below 0) and the commit
    /// ([`COMMIT_ALLOWANCE_MS`]). A holder with less left extends its lease before it calls.
    pub fn call_lease_ms(&self) -> i64 {
        min_deadline_margin_ms(self.call_timeout_ms, 1)
    }

    /// The lease end for a record started at `now_ms` (epoch ms): `now + lease_ms()`, one
    /// record's work (a server call and a commit) with a margin, and no more. Not the
    /// invocation's deadline: a record stranded by a crash must be free for the reconciler soon.
    /// A holder slower than its lease is fenced: its commit is refused and its effect id recorded
    /// for the next holder (`RecordOutcome::LeaseLost`).
    pub fn lease_until(&self, now_ms: i64) -> i64 {
        now_ms.saturating_add(self.lease_ms())
    }

    /// When a record for an event ending at `ends_at_ms` (epoch ms, [`Event::ends_at_ms`]),
    /// reserved at `now_ms` (epoch ms), expires, epoch **seconds**: the key TTL counted from the
    /// later of now and the event's end. A record must outlive the event it guards: until the
    /// event ends a redelivery can still act, and after it every copy is rejected as ended on the
    /// event's own record, which must still be there to say "committed" for the whole redelivery
    /// horizon the TTL covers.
    pub fn record_expiry_s(&self, ends_at_ms: Option<i64>, now_ms: i64) -> i64 {
        let from = ends_at_ms.map_or(ms_to_s(now_ms), |end| ms_to_s(now_ms).max(ms_to_s(end)));
        from + self.key_ttl_s
    }

    /// The record that step 2 reserves for `event` with the keys of step 1, held by
    /// `invocation`'s lease token until [`GateConfig::lease_until`] of `now_ms` (epoch ms).
    pub fn new_record(
        &self,
        event: &Event,
        keys: &DerivedKeys,
        invocation: &Invocation,
        now_ms: i64,
    ) -> IdempotencyRecord {
        IdempotencyRecord {
            pk: record_pk(&self.integration, &keys.event_key),
            event_key: keys.event_key.clone(),
            status: RecordStatus::InFlight,
            fingerprint: keys.fingerprint.clone(),
            request: keys.request.clone(),
            op_key: keys.op_key.clone(),
            lease_owner: Some(invocation.request_id.clone()),
            lease_until_ms: Some(self.lease_until(now_ms)),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            expires_at_s: self.record_expiry_s(event.ends_at_ms, now_ms),
            effect_id: None,
            effect_ids: Default::default(),
            inflight_shard: Some(inflight_shard(&keys.event_key)),
            error: None,
            route_pending: false,
            labels: event.labels.clone(),
        }
    }
}

/// What an extension adds beyond what a call needs ([`GateConfig::call_lease_ms`]),
/// **milliseconds**: one store attempt (the Lambda wiring's DynamoDB attempt timeout, 3 s), so
/// that the extension's own round trip does not leave the lease short again. Without it a lease
/// no longer than what a call needs (a request timeout of 13 s or more against the 15 s floor)
/// would be extended, found short by the extension's few milliseconds, extended again, and
/// released: no call ever made by the consumer.
pub const EXTENSION_HEADROOM_MS: i64 = 3_000;

/// The gate and its ports, built once per cold start.
#[derive(Clone)]
pub struct Gate {
    /// The generic settings (TTL, lease floor, deadline margin, claim horizon, concurrency).
    pub config: GateConfig,
    /// The idempotency table and the business table (the write path).
    pub store: Arc<dyn IdempotencyStore>,
    /// The integration: the parse, the side effect and its lookup, the business row.
    pub integration: Arc<dyn Integration>,
    /// The manual queue: where a record goes to a person (`crate::routing`).
    pub manual: Arc<dyn ManualQueue>,
    /// The time every lease, TTL and horizon is measured by (epoch milliseconds): the system
    /// clock in a deployment, a simulated one in tests and the simulation.
    pub clock: Arc<dyn Clock>,
}

/// The invocation a batch (or a reconciler run) arrives in: one execution of the function.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The execution's id, the stem of every lease token it writes: in a deployment the Lambda
    /// request id and a nonce drawn for this execution, `"{request_id}/{nonce}"`
    /// ([`Invocation::new`]). Lambda gives two executions the same request id (an asynchronous
    /// invocation retried, an event its queue delivers twice), so the request id alone would let
    /// one execution meet the other's lease and take it for its own; the nonce makes the token
    /// one execution's. Each record handled in the invocation gets its own lease token from it
    /// ([`Invocation::for_record`]), so that two copies of one message in one batch never hold
    /// the same lease, and a write that meets our token is our own.
    pub request_id: String,
    /// The invocation's deadline, epoch milliseconds.
    pub deadline_ms: i64,
}

impl Invocation {
    /// One execution of the Lambda request `request_id` ending at `deadline_ms` (epoch ms), with
    /// a nonce of 64 random bits (16 lowercase hex digits) drawn now: its lease tokens are
    /// `"{request_id}/{nonce}#{n}"`. Lambda retries an asynchronous invocation (a scheduled
    /// reconciler run) with the same request id, and its event queue may deliver one event twice
    /// ("Asynchronous invocation", AWS Lambda developer guide); two such executions never hold
    /// the same lease token, so a fenced write of one never succeeds on the other's lease.
    pub fn new(request_id: &str, deadline_ms: i64) -> Invocation {
        Invocation::with_nonce(
            request_id,
            &format!("{:016x}", rand::random::<u64>()),
            deadline_ms,
        )
    }

    /// [`Invocation::new`] with a given `nonce` (the simulation draws it from its seed). The
    /// nonce must be unique per execution of `request_id`.
    pub fn with_nonce(request_id: &str, nonce: &str, deadline_ms: i64) -> Invocation {
        Invocation {
            request_id: format!("{request_id}/{nonce}"),
            deadline_ms,
        }
    }

    /// The invocation as seen by the `n`-th record handled in it: its `request_id` becomes the
    /// lease token `"{request_id}#{n}"` (the `lease_owner` of what that record reserves or takes
    /// over), unique per acquisition as long as `n` is unique within the invocation.
    pub fn for_record(&self, n: usize) -> Invocation {
        Invocation {
            request_id: format!("{}#{n}", self.request_id),
            deadline_ms: self.deadline_ms,
        }
    }
}

/// One SQS delivery as the steps after the parse see it: the body as received (what the manual
/// queue gets as `original_body`), its message id, and the invocation (with the lease token of
/// this record, [`Invocation::for_record`]) it is handled in.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// The SQS body, verbatim.
    pub body: &'a str,
    /// The SQS message id (unique per delivery, never part of a key).
    pub message_id: &'a str,
    /// The invocation; its `request_id` is the lease token of what this delivery holds.
    pub invocation: &'a Invocation,
}

impl Delivery<'_> {
    /// The lease token of everything this delivery reserves or takes over.
    pub fn owner(&self) -> &str {
        &self.invocation.request_id
    }
}

impl Gate {
    /// Takes over for `invocation` (its request id the new owner, until [`GateConfig::lease_until`])
    /// the expired lease `old_owner` held on `pk`: the one conditional `UpdateItem` the consumer,
    /// the manual routing and the reconciler all resume a record with.
    pub(crate) async fn take_over_for(
        &self,
        pk: &str,
        old_owner: Option<&str>,
        invocation: &Invocation,
        now_ms: i64,
    ) -> Result<TakeOver, StoreError> {
        self.store
            .take_over(
                pk,
                old_owner.unwrap_or_default(),
                &invocation.request_id,
                self.config.lease_until(now_ms),
                now_ms,
            )
            .await
    }

    /// What the integration says about the server of `record` ([`Policy`]): its key support
    /// ([`Integration::supports_idempotency_key`], else
    /// `config.server_supports_idempotency_key`), its lookup support
    /// ([`crate::integration::lookup_for`]), its claim horizon ([`Integration::claim_horizon_ms`],
    /// else `config.claim_horizon_ms`: one horizon for the consumer, the reconciler and
    /// `gatectl`) and the event's end ([`Integration::ends_at_ms`]).
    pub(crate) fn policy(&self, record: &IdempotencyRecord) -> Policy {
        Policy {
            supports_key: self
                .integration
                .supports_idempotency_key(record)
                .unwrap_or(self.config.server_supports_idempotency_key),
            supports_lookup: crate::integration::lookup_for(self.integration.as_ref(), record)
                .is_some(),
            claim_horizon_ms: self
                .integration
                .claim_horizon_ms(record)
                .unwrap_or(self.config.claim_horizon_ms),
            ends_at_ms: self.integration.ends_at_ms(record),
        }
    }

    /// The natural-key item the guard of `record` puts at `now_ms` (epoch ms): the
    /// integration's ([`Integration::natural_key`]), expiring no earlier than `record` (its
    /// `expires_at_s`, from the configured key TTL), whatever the integration's
    /// [`crate::record::NaturalKey::expires_at_s`] says. `None`: the integration has none.
    pub(crate) fn guard_key(&self, record: &IdempotencyRecord, now_ms: i64) -> Option<NaturalKey> {
        let mut natural_key = self.integration.natural_key(record, now_ms)?;
        // The guard outlives the record it guards: the integration counts its TTL from the
        // gate's default key TTL, the record from the configured one (`KeyTtlSeconds`), which
        // may be longer; a guard that expired first would let a second event key claim while
        // the first's record still answers its redeliveries.
        natural_key.expires_at_s = natural_key.expires_at_s.max(record.expires_at_s);
        Some(natural_key)
    }

    /// A transient failure: the record stays `in_flight`, the lease is released so the
    /// redelivery can take over at once, and the record is reported in `batchItemFailures`.
    pub(crate) async fn release(
        &self,
        record: &IdempotencyRecord,
        owner: &str,
        why: String,
    ) -> RecordOutcome {
        if let Err(e) = self
            .store
            .release_lease(&record.pk, owner, self.clock.now_ms())
            .await
        {
            warn!(event_key = %record.event_key, error = %e, "lease not released; it expires on its own");
        }
        RecordOutcome::Retry(why)
    }
}

#[cfg(test)]
mod tests {
    use super::Invocation;

    /// Two executions of one Lambda request id (an asynchronous retry, a twice-delivered event)
    /// get different lease tokens for the same record position; each keeps the request id in
    /// front, so a lease still names the request that holds it.
    #[test]
    fn two_executions_of_one_request_id_never_share_a_lease_token() {
        let first = Invocation::new("8f3c-request", 1_000);
        let second = Invocation::new("8f3c-request", 1_000);
        assert_ne!(first.request_id, second.request_id);
        assert_ne!(
            first.for_record(0).request_id,
            second.for_record(0).request_id
        );
        for inv in [&first, &second] {
            let nonce = inv
                .request_id
                .strip_prefix("8f3c-request/")
                .expect("the request id, then the nonce");
            assert_eq!(nonce.len(), 16, "{nonce}");
            assert!(nonce.bytes().all(|b| b.is_ascii_hexdigit()), "{nonce}");
        }
        assert_eq!(
            Invocation::with_nonce("r", "n1", 5)
                .for_record(3)
                .request_id,
            "r/n1#3"
        );
    }
}
