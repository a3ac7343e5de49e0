//! The notifications all three handlers process: `n` SQS deliveries of which a share are
//! redeliveries (another message id, the same body) of an earlier event, placed after it.

use serde::Serialize;
use std::sync::atomic::{AtomicU32, Ordering};

/// One SQS delivery.
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    /// The SQS message id (unique per delivery).
    #[serde(rename = "messageId")]
    pub message_id: String,
    /// The notification body.
    pub body: String,
    /// Whether this delivery repeats an earlier one's body.
    #[serde(skip)]
    pub duplicate: bool,
}

/// SplitMix64: a small seeded generator, so every run and handler sees the same workload.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// A valid ISO 6346 container number from a serial.
pub fn container(serial: u32) -> String {
    let first_ten = format!("BNCU{:06}", serial % 1_000_000);
    let check = truck_slot::iso6346::check_digit(&first_ten).unwrap_or(0);
    format!("{first_ten}{check}")
}

/// The first container serial ISO 6346's six digits leave us (100000..=999999).
const FIRST_SERIAL: u32 = 100_000;
/// How many serials there are before they repeat.
const SERIALS: u32 = 900_000;
/// The next serial no `deliveries` call of this process has handed out.
static NEXT_SERIAL: AtomicU32 = AtomicU32::new(0);

/// `n` serials no other `deliveries` call of this process holds (until 900,000 have been handed
/// out), so that two runs sharing a store, say the warm-up and the measured events, never share a
/// container and a window: the gate's natural key (signal 4) would send the second to a person.
/// A hash of the tag chose among 90 blocks before, and two tags of one run met in the same block
/// about once in fifteen processes.
fn serials(n: usize) -> u32 {
    NEXT_SERIAL.fetch_add(n as u32, Ordering::Relaxed) % SERIALS
}

/// A notification body for event `i` of run `tag`, its container from `serial` (counted from
/// 100000, wrapping at 999999), window `window` (RFC 3339 start, end).
pub fn body(tag: &str, i: usize, serial: u32, window: &(String, String)) -> String {
    serde_json::json!({
        "notificationId": format!("PCS-{tag}-{i:06}"),
        "equipment_number": container(FIRST_SERIAL + serial % SERIALS),
        "preferred_window": {"start": window.0, "end": window.1},
        "terminal": "ECT-DELTA",
        "pin": format!("{:04}-{:04}", i % 9973, (i * 7919) % 10_000),
        "gross_mass_kg": 12_000 + (i % 19) * 1000,
        "carrier": "Van Dam Transport",
    })
    .to_string()
}

/// `n` deliveries, `round(n * duplicate_rate)` of them redeliveries of an earlier event, each
/// placed after its original; event ids carry `tag` so runs never share keys.
pub fn deliveries(
    tag: &str,
    n: usize,
    duplicate_rate: f64,
    window: &(String, String),
    seed: u64,
) -> Vec<Delivery> {
    let duplicates = ((n as f64) * duplicate_rate).round() as usize;
    let unique = n.saturating_sub(duplicates).max(1);
    let first = serials(unique);
    let mut rng = Rng::new(seed);
    // Event indices in delivery order.
    let mut order: Vec<(usize, bool)> = (0..unique).map(|i| (i, false)).collect();
    for _ in 0..duplicates {
        let original = rng.below(unique);
        let at = order
            .iter()
            .position(|(e, dup)| *e == original && !dup)
            .unwrap_or(0);
        let insert = at + 1 + rng.below(order.len() - at);
        order.insert(insert, (original, true));
    }
    order
        .into_iter()
        .enumerate()
        .map(|(m, (e, duplicate))| Delivery {
            message_id: format!("{tag}-msg-{m:06}"),
            body: body(tag, e, first + e as u32, window),
            duplicate,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_follow_their_original_and_count_right() {
        let w = (
            "2030-01-01T08:00:00Z".to_string(),
            "2030-01-01T10:00:00Z".to_string(),
        );
        let d = deliveries("t", 1000, 0.03, &w, 7);
        assert_eq!(d.len(), 1000);
        assert_eq!(d.iter().filter(|d| d.duplicate).count(), 30);
        for (i, x) in d.iter().enumerate() {
            if x.duplicate {
                assert!(d[..i].iter().any(|y| !y.duplicate && y.body == x.body));
            }
        }
        assert!(truck_slot::iso6346::EquipmentNumber::parse(&container(42)).is_ok());
    }

    /// The warm-up and the measured events of one run share a store: no container of one may
    /// be a container of the other, whatever the tags (the natural key would collide).
    #[test]
    fn two_calls_never_share_a_container() {
        let w = (
            "2030-01-01T08:00:00Z".to_string(),
            "2030-01-01T10:00:00Z".to_string(),
        );
        let containers = |d: &[Delivery]| -> std::collections::BTreeSet<String> {
            d.iter()
                .map(|x| {
                    let v: serde_json::Value = serde_json::from_str(&x.body).unwrap();
                    v["equipment_number"].as_str().unwrap().to_string()
                })
                .collect()
        };
        // These two tags hashed to the same block of serials before.
        let a = containers(&deliveries("smoke29092-s0-po-counted", 50, 0.0, &w, 1));
        let b = containers(&deliveries("smoke29092-s0-po-counted-warm", 50, 0.0, &w, 1));
        let again = containers(&deliveries("smoke29092-s0-po-counted", 50, 0.0, &w, 1));
        assert_eq!((a.len(), b.len(), again.len()), (50, 50, 50));
        assert!(a.is_disjoint(&b));
        assert!(a.is_disjoint(&again));
        assert!(b.is_disjoint(&again));
    }
}
