//! A schedule's fault profile: the probability of each fault while faults are on, how a seed
//! draws it, and the side streams of the seed that later faults draw from (so that a schedule
//! without them draws exactly what it drew without them).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Fault probabilities of one schedule. Each is drawn per opportunity (per port call, per
/// ticket) while faults are on; after the schedule's heal time all are off and the world runs to
/// quiescence.
#[derive(Clone, Default)]
pub struct FaultProfile {
    /// A task dies at a step boundary (per ticket granted).
    pub crash: f64,
    /// A store call fails before it applies (throttled, transaction conflict, unavailable).
    pub store_error: f64,
    /// A store write applies, then the caller gets an error (timeout after the write).
    pub store_ambiguous: f64,
    /// A store write applies, its answer is lost, and the client (the SDK) retries the same
    /// request, which meets the write it repeats; the caller gets the retry's answer. Drawn for
    /// every write kind (reserve, take-over, commit, release, finish, routed, slot id).
    pub store_lost_retried: f64,
    /// The terminal answers 5xx before taking the key (nothing stored).
    pub terminal_5xx: f64,
    /// The terminal made the slot and stored the answer, but the response is lost (504).
    pub terminal_lost: f64,
    /// The client times out; the terminal runs the request later (latency beyond the lease).
    pub terminal_timeout: f64,
    /// The terminal answers 409 "same key still in flight".
    pub terminal_in_flight: f64,
    /// The terminal rejects the claim with a 4xx and stores that answer under the key.
    pub terminal_4xx: f64,
    /// The lookup by key fails (5xx).
    pub lookup_error: f64,
    /// The manual queue refuses a send.
    pub manual_error: f64,
    /// The manual queue takes a send, then the caller gets an error.
    pub manual_ambiguous: f64,
    /// A port call takes 20-200 s of simulated time.
    pub slow: f64,
    /// After a crash, the operator purges the crashed batch's messages (only those whose own
    /// record is already durable, so only the reconciler can finish them).
    pub purge_after_crash: f64,
    /// PostgreSQL's semantics (`pg_faults`): a write statement fails with a serialization
    /// failure or a deadlock before it applied; the adapter retries it, and surfaces
    /// `TransactionConflict` when its retries are spent. Drawn per write statement.
    pub pg_conflict: f64,
    /// PostgreSQL's semantics (`pg_faults`): the connection is lost after a write statement's
    /// `COMMIT` (the write applied, the answer lost); the adapter retries on a new connection and
    /// the retry meets its own write, or surfaces the error when its retries are spent. Drawn
    /// per write statement.
    pub pg_outcome_unknown: f64,
    /// A failover (PostgreSQL schedules, `outages`): from this instant (simulated epoch ms) each
    /// host's pool holds connections still on the demoted writer, which refuse writes with
    /// `25006` until the adapter drops them.
    pub pg_failover_at_ms: Option<i64>,
    /// A store that stops answering (`outages`): every call starting in `[from, until)`
    /// (simulated epoch ms) gets no answer.
    pub store_stall: Option<(i64, i64)>,
}

/// As `#[derive(Debug)]` would print it, with `store_lost_retried` only when it is drawn (so
/// that the description of a schedule without it, which pinned digests cover, does not name
/// it), and without the
/// PostgreSQL semantics (`pg_*`: drawn from their own stream, described on their own line by
/// `Schedule::describe`).
impl std::fmt::Debug for FaultProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("FaultProfile");
        d.field("crash", &self.crash)
            .field("store_error", &self.store_error)
            .field("store_ambiguous", &self.store_ambiguous)
            .field("terminal_5xx", &self.terminal_5xx)
            .field("terminal_lost", &self.terminal_lost)
            .field("terminal_timeout", &self.terminal_timeout)
            .field("terminal_in_flight", &self.terminal_in_flight)
            .field("terminal_4xx", &self.terminal_4xx)
            .field("lookup_error", &self.lookup_error)
            .field("manual_error", &self.manual_error)
            .field("manual_ambiguous", &self.manual_ambiguous)
            .field("slow", &self.slow)
            .field("purge_after_crash", &self.purge_after_crash);
        if self.store_lost_retried > 0.0 {
            d.field("store_lost_retried", &self.store_lost_retried);
        }
        d.finish()
    }
}

/// The RNG stream (ChaCha's stream id) the "answer lost, request retried" fault draws from,
/// apart from the schedule's main stream.
pub(crate) const LOST_ANSWER_STREAM: u64 = 0x4c4f_5354;

/// The RNG stream the "same request id twice" fault draws from (which doubled reconciler runs
/// share one Lambda request id), apart from the schedule's main stream.
pub(crate) const SAME_REQUEST_STREAM: u64 = 0x5351_4944;

/// The RNG stream the failover and the stall draw from (the instants here, each call's draws
/// in `outages`), apart from the schedule's main stream.
pub(crate) const OUTAGE_STREAM: u64 = 0x4f55_5447;

/// The RNG stream the PostgreSQL semantics draw from (the profile's `pg_*` here, each write's
/// draws in `pg_faults`), apart from the schedule's main stream.
pub(crate) const PG_STREAM: u64 = 0x5047_5347;

/// PostgreSQL's semantics in a third of the schedules (the store double behaves as the
/// PostgreSQL adapter does where it differs from DynamoDB): serialization failures and deadlocks
/// on any write, answers lost after `COMMIT`. From their own stream, so that the schedule's other
/// draws do not depend on them.
pub(crate) fn draw_pg_profile(rng: &ChaCha8Rng, profile: &mut FaultProfile) {
    let mut side = rng.clone();
    side.set_stream(PG_STREAM);
    if side.random_range(0..3) == 0 {
        let scale = [1.0, 4.0][side.random_range(0..2)];
        profile.pg_conflict = 0.02 * scale;
        profile.pg_outcome_unknown = 0.01 * scale;
    }
}

pub(crate) fn draw_profile(rng: &mut ChaCha8Rng) -> FaultProfile {
    let scale = match rng.random_range(0..100) {
        0..=9 => 0.0,
        10..=54 => 1.0,
        _ => 4.0,
    };
    let mut p = |base: f64| -> f64 {
        if rng.random_bool(0.75) {
            base * scale
        } else {
            0.0
        }
    };
    FaultProfile {
        crash: p(0.01),
        store_error: p(0.02),
        store_ambiguous: p(0.01),
        terminal_5xx: p(0.03),
        terminal_lost: p(0.03),
        terminal_timeout: p(0.02),
        terminal_in_flight: p(0.01),
        terminal_4xx: p(0.005),
        lookup_error: p(0.05),
        manual_error: p(0.02),
        manual_ambiguous: p(0.01),
        slow: p(0.004),
        purge_after_crash: p(0.08),
        // Drawn from its own stream in `Schedule::draw`, so that the other draws (and every
        // schedule without this fault) do not depend on it.
        store_lost_retried: 0.0,
        // Drawn from their own stream (`draw_pg_profile`).
        pg_conflict: 0.0,
        pg_outcome_unknown: 0.0,
        // Drawn from their own stream (`Schedule::draw_outages`).
        pg_failover_at_ms: None,
        store_stall: None,
    }
}
