//! The `Clock` port: every time the gate reads comes through it, so tests and the simulator can
//! run on simulated time.
//!
//! Units: the port speaks **epoch milliseconds** (`i64`). Callers that need epoch seconds (the
//! DynamoDB TTL attribute `expires_at`) convert with [`ms_to_s`], never by hand.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in epoch milliseconds.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since the Unix epoch (UTC).
    fn now_ms(&self) -> i64;
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: for tests and the simulator.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `now_ms` (epoch milliseconds).
    pub fn new(now_ms: i64) -> Self {
        Self {
            now_ms: AtomicI64::new(now_ms),
        }
    }

    /// Sets the time to `now_ms` (epoch milliseconds). Going backwards is allowed (clock skew).
    pub fn set_ms(&self, now_ms: i64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `delta_ms` milliseconds.
    pub fn advance_ms(&self, delta_ms: i64) {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Epoch milliseconds to epoch seconds, rounding down.
pub fn ms_to_s(ms: i64) -> i64 {
    ms.div_euclid(1000)
}
