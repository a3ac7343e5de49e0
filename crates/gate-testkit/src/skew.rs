//! [`SkewedClock`]: one host's clock in a simulation, shared by the deterministic simulation
//! (`sim/src/dst`) and the [`Harness`](super::Harness).

use std::sync::Arc;

use gate::clock::{Clock, ManualClock};

/// A host's clock: true simulated time plus a fixed offset (clock skew). A worker's invocation
/// deadline is given on its own clock (`now + remaining time`, as a runtime that reports the
/// remaining time would), so a skew shifts its leases as other hosts see them, not its own
/// notion of how much time is left.
#[derive(Debug, Clone)]
pub struct SkewedClock {
    /// True simulated time.
    pub base: Arc<ManualClock>,
    /// This host's offset from true time, **milliseconds** (negative: behind).
    pub offset_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.base.now_ms() + self.offset_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_reads_true_time_plus_its_offset() {
        let base = Arc::new(ManualClock::new(10_000));
        let ahead = SkewedClock {
            base: Arc::clone(&base),
            offset_ms: 1_500,
        };
        let behind = SkewedClock {
            base: Arc::clone(&base),
            offset_ms: -2_000,
        };
        assert_eq!(ahead.now_ms(), 11_500);
        assert_eq!(behind.now_ms(), 8_000);
        base.advance_ms(500);
        assert_eq!(ahead.now_ms(), 12_000);
    }
}
