//! Drawing a schedule from a seed: the notifications and their bodies (re-serialised copies,
//! mismatched bodies under one event key, poison bodies, windows that end during the run), how
//! SQS delivers them (1-6 copies, same or new message id, a redelivery two days later), the
//! deployment (workers, batch size, timeouts, key support, clock skew per host, a reconciler
//! outage) and the fault profile. Every draw from the seed sits in one order, which the pinned
//! regression seeds depend on.
//!
//! Then, from a second stream of the same seed (so that the part above does not depend on it, see
//! `describe_base`), the lifecycle: how long a record lives (`key_ttl_s`: 21 days, or 1-30 h in
//! some schedules, so that runs outlive records), how long the terminal keeps a key (24 h, or
//! 2-23 h), operator redrives of the dead-letter queue (each copy back as a new message, minutes
//! to days after the faults heal), notifications booked days ahead whose copies come back after a
//! short-lived record has expired, and re-planned notifications: the same `notificationId` and
//! container with the window moved 1-3 days later, sent after the first window ended.

use gate::consumer::DEFAULT_KEY_TTL_S;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::bodies::{container, poison, serialise, Fields};
use super::profile::{
    draw_pg_profile, draw_profile, FaultProfile, LOST_ANSWER_STREAM, OUTAGE_STREAM,
};

/// 2025-06-09T05:00:00Z, the simulated start (the incident's Monday).
pub const START_MS: i64 = 1_749_445_200_000;
/// One hour in ms.
const HOUR: i64 = 3_600_000;
/// One minute in ms.
const MINUTE: i64 = 60_000;
/// Variant numbers from here on are re-planned windows (see [`BodyKind::Event`]).
pub const REPLANNED: usize = 10;

/// What a body is, for traces and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyKind {
    /// A notification: event number, fingerprint variant (0 is the original), serialisation form.
    Event {
        /// Which event.
        event: usize,
        /// 0 for the original business fields, 1.. for a mismatched body under the same key,
        /// [`REPLANNED`].. for the same notification with its window moved days later.
        variant: usize,
    },
    /// A body the strict parser can never accept, and why.
    Poison(&'static str),
}

/// One distinct body text.
#[derive(Debug, Clone)]
pub struct Body {
    /// The SQS body.
    pub text: String,
    /// What it is.
    pub kind: BodyKind,
}

/// One planned copy on the queue.
#[derive(Debug, Clone)]
pub struct PlannedMessage {
    /// Index in [`Schedule::bodies`].
    pub body: usize,
    /// When it is sent, simulated epoch ms.
    pub at_ms: i64,
    /// Another copy of this earlier planned message (same message id).
    pub same_id_as: Option<usize>,
}

/// Everything a seed decides before the run starts.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The seed.
    pub seed: u64,
    /// Distinct bodies.
    pub bodies: Vec<Body>,
    /// Copies to send.
    pub messages: Vec<PlannedMessage>,
    /// Concurrent consumer invocations.
    pub workers: usize,
    /// SQS batch size (records per invocation, at most).
    pub batch_size: usize,
    /// The event source's batching window (`MaximumBatchingWindowInSeconds`), ms: an invocation
    /// starts this long after the first message is visible, with what is visible by then.
    pub batching_window_ms: i64,
    /// Consumer Lambda timeout, ms.
    pub lambda_timeout_ms: i64,
    /// Queue visibility timeout, ms (AWS advises six times the function timeout; some schedules
    /// are misconfigured on purpose).
    pub visibility_timeout_ms: i64,
    /// Receives before the DLQ.
    pub max_receive_count: u32,
    /// Records at once per batch.
    pub max_concurrency: usize,
    /// Whether the terminal honours `Idempotency-Key`.
    pub key_support: bool,
    /// Fault probabilities while faults are on.
    pub profile: FaultProfile,
    /// When faults stop, simulated epoch ms.
    pub heal_at_ms: i64,
    /// Clock offset per consumer host (index `0..workers`), ms.
    pub host_skews_ms: Vec<i64>,
    /// Clock offset of the reconciler's host, ms.
    pub reconciler_skew_ms: i64,
    /// No reconciler runs before this time (an outage), simulated epoch ms.
    pub reconciler_outage_until_ms: Option<i64>,
    /// Records per `InFlight` page in the reconciler.
    pub reconciler_page_size: usize,
    /// Probability that EventBridge invokes the reconciler twice for one tick.
    pub double_reconciler: f64,
    /// Record lifetime, **seconds** (`GateConfig::key_ttl_s`): 21 days ([`DEFAULT_KEY_TTL_S`]), or
    /// 1-30 h in some schedules so that a run outlives its records.
    pub key_ttl_s: i64,
    /// The terminal's key retention, ms (24 h, or 2-23 h in some schedules); the gate's claim
    /// horizon and the reconciler's retention are configured from it, as in a deployment.
    pub key_retention_ms: i64,
    /// When an operator redrives the dead-letter queue (every copy back as a new message),
    /// simulated epoch ms.
    pub redrives_at_ms: Vec<i64>,
    /// How many of `bodies` and of `messages` the first stream drew (the rest is the lifecycle's).
    pub base_len: (usize, usize),
}

impl Schedule {
    /// Draws a schedule from `rng` (seeded with `seed`).
    pub fn draw(seed: u64, rng: &mut ChaCha8Rng) -> Self {
        let mut bodies: Vec<Body> = Vec::new();
        let mut messages: Vec<PlannedMessage> = Vec::new();
        // A forgetting terminal: stranded records, a reconciler down for two days, and every
        // event redelivered two days later, after the terminal forgot its keys (24 h).
        let forgetting = rng.random_bool(0.05);
        let late = forgetting || rng.random_bool(0.2);
        let n_events = rng.random_range(1..=8usize);
        let mut sample: Option<Fields> = None;
        let mut originals: Vec<(Fields, i64)> = Vec::new();
        for event in 0..n_events {
            let notification_id = format!("PCS-{:06}", rng.random_range(0..1_000_000u32));
            let container = container(rng);
            let (start_ms, end_ms) = match rng.random_range(0..100) {
                // The window ends during the run: late copies find it ended.
                0..=14 => {
                    let end = START_MS + rng.random_range(5..=90) * MINUTE;
                    (end - 2 * HOUR, end)
                }
                // Already ended on arrival.
                15..=19 => {
                    let end = START_MS - rng.random_range(1..=5) * HOUR;
                    (end - 2 * HOUR, end)
                }
                _ => {
                    let start = START_MS + rng.random_range(4..=120) * 15 * MINUTE;
                    (start, start + rng.random_range(1..=4) * HOUR)
                }
            };
            let base = Fields {
                notification_id,
                container,
                start_ms,
                end_ms,
                pin: format!("{:04}", rng.random_range(0..10_000)),
                tonnes: rng.random_range(5..=30),
            };
            sample.get_or_insert_with(|| base.clone());
            let mut variants = vec![base.clone()];
            if rng.random_bool(0.2) {
                for _ in 0..rng.random_range(1..=2) {
                    let mut other = base.clone();
                    match rng.random_range(0..3) {
                        0 => other.pin = format!("{:04}", rng.random_range(0..10_000)),
                        1 => other.end_ms += HOUR,
                        _ => other.tonnes += 1,
                    }
                    variants.push(other);
                }
            }
            let first_at = START_MS + rng.random_range(0..=10 * MINUTE);
            originals.push((base.clone(), first_at));
            for (variant, fields) in variants.iter().enumerate() {
                let forms = rng.random_range(1..=3usize);
                let first_body = bodies.len();
                for _ in 0..forms {
                    bodies.push(Body {
                        text: serialise(fields, rng),
                        kind: BodyKind::Event { event, variant },
                    });
                }
                let copies = rng.random_range(1..=6usize);
                let mut last: Option<usize> = None;
                for c in 0..copies {
                    let body = first_body + rng.random_range(0..forms);
                    let at = if c == 0 {
                        first_at + rng.random_range(0..=5 * MINUTE)
                    } else {
                        first_at + rng.random_range(0..=30 * MINUTE)
                    };
                    match last {
                        Some(prev) if rng.random_bool(0.35) => {
                            // SQS's own duplicate: same id, same body, at once or a little later.
                            let prev_msg = &messages[prev];
                            let at = prev_msg.at_ms + rng.random_range(0..=5_000);
                            messages.push(PlannedMessage {
                                body: prev_msg.body,
                                at_ms: at,
                                same_id_as: Some(prev),
                            });
                        }
                        _ => messages.push(PlannedMessage {
                            body,
                            at_ms: at,
                            same_id_as: None,
                        }),
                    }
                    last = Some(messages.len() - 1);
                }
                if late && (forgetting || rng.random_bool(0.5)) {
                    messages.push(PlannedMessage {
                        body: first_body + rng.random_range(0..forms),
                        at_ms: first_at + 48 * HOUR + rng.random_range(-2 * HOUR..=2 * HOUR),
                        same_id_as: None,
                    });
                }
            }
        }
        if let Some(good) = sample {
            for _ in 0..rng.random_range(0..=2) {
                let (text, why) = poison(rng, &good);
                bodies.push(Body {
                    text,
                    kind: BodyKind::Poison(why),
                });
                let body = bodies.len() - 1;
                let at = START_MS + rng.random_range(0..=20 * MINUTE);
                for c in 0..rng.random_range(1..=4) {
                    let same = c > 0 && rng.random_bool(0.3);
                    messages.push(PlannedMessage {
                        body,
                        at_ms: at + rng.random_range(0..=10 * MINUTE),
                        same_id_as: same.then(|| messages.len() - 1),
                    });
                }
            }
        }

        let workers = rng.random_range(1..=4usize);
        let lambda_timeout_ms = [30_000, 60_000, 120_000, 300_000][rng.random_range(0..4)];
        let visibility_timeout_ms = if rng.random_bool(0.85) {
            6 * lambda_timeout_ms
        } else {
            rng.random_range(10_000..=lambda_timeout_ms)
        };
        let skew = |rng: &mut ChaCha8Rng| -> i64 {
            let sign = if rng.random_bool(0.5) { 1 } else { -1 };
            match rng.random_range(0..100) {
                0..=64 => 0,
                65..=84 => sign * rng.random_range(60_000..=600_000),
                _ => sign * rng.random_range(1..=5_000),
            }
        };
        let host_skews_ms = (0..workers).map(|_| skew(rng)).collect();
        let reconciler_skew_ms = skew(rng);
        let reconciler_outage_until_ms = match rng.random_range(0..100) {
            _ if forgetting => Some(START_MS + rng.random_range(47..=50) * HOUR),
            0..=9 => Some(START_MS + rng.random_range(25..=30) * HOUR),
            10..=19 => Some(START_MS + rng.random_range(47..=50) * HOUR),
            _ => None,
        };
        let mut profile = draw_profile(rng);
        profile.store_lost_retried = {
            // Its own stream: the main one draws exactly what it drew before this fault kind.
            let mut side = rng.clone();
            side.set_stream(LOST_ANSWER_STREAM);
            let scale = [0.0, 1.0, 1.0, 4.0][side.random_range(0..4)];
            0.02 * scale
        };
        draw_pg_profile(rng, &mut profile);
        if forgetting {
            profile.crash = profile.crash.max(0.04);
            profile.purge_after_crash = profile.purge_after_crash.max(0.5);
            profile.terminal_timeout = profile.terminal_timeout.max(0.1);
            profile.terminal_lost = profile.terminal_lost.max(0.1);
        }
        let base_len = (bodies.len(), messages.len());
        let mut schedule = Self {
            seed,
            bodies,
            messages,
            workers,
            batch_size: rng.random_range(1..=10),
            batching_window_ms: if rng.random_bool(0.3) {
                0
            } else {
                rng.random_range(1_000..=60_000)
            },
            lambda_timeout_ms,
            visibility_timeout_ms,
            max_receive_count: rng.random_range(2..=6),
            max_concurrency: rng.random_range(1..=10),
            key_support: rng.random_bool(0.92),
            profile,
            heal_at_ms: START_MS + rng.random_range(15..=90) * MINUTE,
            host_skews_ms,
            reconciler_skew_ms,
            reconciler_outage_until_ms,
            reconciler_page_size: rng.random_range(1..=25),
            double_reconciler: if rng.random_bool(0.3) { 0.2 } else { 0.0 },
            key_ttl_s: DEFAULT_KEY_TTL_S,
            key_retention_ms: 24 * HOUR,
            redrives_at_ms: Vec::new(),
            base_len,
        };
        schedule.draw_lifecycle(&originals);
        schedule.draw_outages();
        schedule
    }

    /// The failover's and the stall's instants (`outages`), from their own stream, so that the
    /// seed's other draws do not depend on them. A failover in half of the PostgreSQL
    /// schedules; a stall of 10-90 s in a fifth of all; both start while the faults are on.
    fn draw_outages(&mut self) {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(OUTAGE_STREAM);
        let pg = self.profile.pg_conflict > 0.0 || self.profile.pg_outcome_unknown > 0.0;
        let failover = rng.random_bool(0.5);
        let at = rng.random_range(START_MS..self.heal_at_ms);
        if pg && failover {
            self.profile.pg_failover_at_ms = Some(at);
        }
        if rng.random_bool(0.2) {
            let from = rng.random_range(START_MS..self.heal_at_ms);
            let until = from + rng.random_range(10_000..=90_000);
            self.profile.store_stall = Some((from, until));
        }
    }

    /// The lifecycle part (module docs), from stream 1 of the seed.
    fn draw_lifecycle(&mut self, originals: &[(Fields, i64)]) {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(1);
        let rng = &mut rng;
        if rng.random_bool(0.3) {
            self.key_ttl_s = rng.random_range(1..=30) * 3_600;
        }
        if rng.random_bool(0.2) {
            self.key_retention_ms = rng.random_range(2..=23) * HOUR;
        }
        let ttl_ms = self.key_ttl_s * 1000;
        // Booked days ahead: copies before the window, some after a short-lived record expired.
        if rng.random_bool(0.15) {
            for k in 0..rng.random_range(1..=2) {
                let event = originals.len() + k;
                let start = START_MS + rng.random_range(30..=72) * HOUR;
                let fields = Fields {
                    notification_id: format!("PCS-{:06}", rng.random_range(0..1_000_000u32)),
                    container: container(rng),
                    start_ms: start,
                    end_ms: start + rng.random_range(1..=4) * HOUR,
                    pin: format!("{:04}", rng.random_range(0..10_000)),
                    tonnes: rng.random_range(5..=30),
                };
                let first_at = START_MS + rng.random_range(0..=10 * MINUTE);
                // The last send: an hour before the window starts; the late copies after the
                // record's lifetime when that comes first.
                let last = fields.start_ms - HOUR;
                let later = (first_at + ttl_ms).min(last);
                let mut times = vec![first_at];
                for _ in 0..rng.random_range(0..=2) {
                    times.push(first_at + rng.random_range(0..=30 * MINUTE));
                }
                for _ in 0..rng.random_range(1..=2) {
                    times.push(rng.random_range(later..=last));
                }
                self.add_body(rng, &fields, event, 0, &times);
            }
        }
        // Re-planned: the same notification with its window moved 1-3 days later, sent after the
        // first window ended (a mismatch while the first record lives, a new reservation after).
        for (event, (fields, _)) in originals.iter().enumerate() {
            if !rng.random_bool(0.12) {
                continue;
            }
            let shift = rng.random_range(24..=72) * HOUR;
            let moved = Fields {
                start_ms: fields.start_ms + shift,
                end_ms: fields.end_ms + shift,
                ..fields.clone()
            };
            let from = fields.end_ms.max(START_MS);
            let times: Vec<i64> = (0..rng.random_range(1..=3))
                .map(|_| rng.random_range(from..=(from + 60 * HOUR).min(moved.start_ms)))
                .collect();
            self.add_body(rng, &moved, event, REPLANNED, &times);
        }
        let heal = self.heal_at_ms;
        if rng.random_bool(0.3) {
            let first = heal + rng.random_range(10 * MINUTE..=72 * HOUR);
            self.redrives_at_ms.push(first);
            if rng.random_bool(0.3) {
                self.redrives_at_ms
                    .push(first + rng.random_range(HOUR..=48 * HOUR));
            }
        }
    }

    /// Adds one body for `fields` and one new message per send time.
    fn add_body(
        &mut self,
        rng: &mut ChaCha8Rng,
        fields: &Fields,
        event: usize,
        variant: usize,
        times: &[i64],
    ) {
        self.bodies.push(Body {
            text: serialise(fields, rng),
            kind: BodyKind::Event { event, variant },
        });
        let body = self.bodies.len() - 1;
        for &at_ms in times {
            self.messages.push(PlannedMessage {
                body,
                at_ms,
                same_id_as: None,
            });
        }
    }

    /// The last planned send or redrive, simulated epoch ms.
    pub fn last_arrival_ms(&self) -> i64 {
        self.messages
            .iter()
            .map(|m| m.at_ms)
            .chain(self.redrives_at_ms.iter().copied())
            .max()
            .unwrap_or(START_MS)
    }

    /// A few lines describing the schedule (for traces): [`Schedule::describe_base`], then the
    /// lifecycle (record lifetime, key retention, redrives) and its bodies and messages.
    pub fn describe(&self) -> Vec<String> {
        let mut out = self.describe_base();
        out.push(format!(
            "lifecycle key_ttl {}h retention {}h redrives {:?}",
            self.key_ttl_s / 3_600,
            self.key_retention_ms / HOUR,
            self.redrives_at_ms
                .iter()
                .map(|t| format!("+{}m", (t - START_MS) / MINUTE))
                .collect::<Vec<_>>()
        ));
        if self.profile.pg_conflict > 0.0 || self.profile.pg_outcome_unknown > 0.0 {
            out.push(format!(
                "postgres conflict {} outcome_unknown {}",
                self.profile.pg_conflict, self.profile.pg_outcome_unknown
            ));
        }
        if let Some(at) = self.profile.pg_failover_at_ms {
            out.push(format!(
                "postgres failover at +{}s: pooled connections refuse writes (25006)",
                (at - START_MS) / 1000
            ));
        }
        if let Some((from, until)) = self.profile.store_stall {
            out.push(format!(
                "store stalled +{}s..+{}s",
                (from - START_MS) / 1000,
                (until - START_MS) / 1000
            ));
        }
        for (i, b) in self.bodies.iter().enumerate().skip(self.base_len.0) {
            out.push(format!(
                "body b{i} {:?}: {}",
                b.kind,
                b.text.replace('\n', " ")
            ));
        }
        for (i, m) in self.messages.iter().enumerate().skip(self.base_len.1) {
            out.push(format!(
                "msg m{i} body b{} at +{}s",
                m.body,
                (m.at_ms - START_MS) / 1000
            ));
        }
        out
    }

    /// The description of what the first stream drew (the deployment, the fault profile, the
    /// bodies and messages before the lifecycle's), without the lifecycle: the regression seeds
    /// pin their schedule's digest over it.
    pub fn describe_base(&self) -> Vec<String> {
        let mut out = vec![format!(
            "seed {} workers {} batch {} window {}ms timeout {}s visibility {}s max_receive {} concurrency {} \
             key_support {} heal +{}s skews {:?} reconciler skew {} outage {:?} page {}",
            self.seed,
            self.workers,
            self.batch_size,
            self.batching_window_ms,
            self.lambda_timeout_ms / 1000,
            self.visibility_timeout_ms / 1000,
            self.max_receive_count,
            self.max_concurrency,
            self.key_support,
            (self.heal_at_ms - START_MS) / 1000,
            self.host_skews_ms,
            self.reconciler_skew_ms,
            self.reconciler_outage_until_ms
                .map(|t| format!("+{}h", (t - START_MS) / HOUR)),
            self.reconciler_page_size,
        )];
        out.push(format!("faults {:?}", self.profile));
        for (i, b) in self.bodies.iter().enumerate().take(self.base_len.0) {
            out.push(format!(
                "body b{i} {:?}: {}",
                b.kind,
                b.text.replace('\n', " ")
            ));
        }
        for (i, m) in self.messages.iter().enumerate().take(self.base_len.1) {
            out.push(format!(
                "msg m{i} body b{} at +{}s{}",
                m.body,
                (m.at_ms - START_MS) / 1000,
                m.same_id_as
                    .map(|p| format!(" (same id as m{p})"))
                    .unwrap_or_default()
            ));
        }
        out
    }
}
