//! The memory store's indexes, kept as DynamoDB keeps the table's sparse GSIs:
//!
//! * `InFlight`: the records that carry an `inflight_shard`, per shard, ordered by `created_at`
//!   then `pk` (the order [`InFlightIndex::stale_in_flight`](crate::store::InFlightIndex) pages
//!   in);
//! * `MultiEffect`: the records with two or more distinct effect ids.
//!
//! [`Indexes::reindex`] runs after every write of a record, so an index read costs O(answer)
//! (plus O(log n) to find its start), not O(table): a replay of months of traffic reads the index
//! every simulated minute, and its cost must grow with the events, not events times duration.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use crate::record::IdempotencyRecord;
use crate::store::cursor::{decode_cursor, encode_cursor};
use crate::store::{InFlightEntry, InFlightPage, StoreError};

/// What the indexes hold of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IndexKeys {
    /// `InFlight`: the shard and `created_at` (epoch ms), when the record has a shard.
    in_flight: Option<(String, i64)>,
    /// `MultiEffect`: two or more distinct effect ids.
    multi_effect: bool,
}

impl IndexKeys {
    fn of(record: &IdempotencyRecord) -> Self {
        Self {
            in_flight: record
                .inflight_shard
                .as_ref()
                .map(|shard| (shard.clone(), record.created_at_ms)),
            multi_effect: record.effect_ids.len() > 1,
        }
    }

    fn is_empty(&self) -> bool {
        self.in_flight.is_none() && !self.multi_effect
    }
}

/// The `InFlight` and `MultiEffect` indexes of the memory store's records.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Indexes {
    /// `InFlight`: shard (`"00"`..`"15"`) to `(created_at epoch ms, pk)`; no empty shard kept.
    in_flight: BTreeMap<String, BTreeSet<(i64, String)>>,
    /// `MultiEffect`: the `pk`s.
    multi_effect: BTreeSet<String>,
    /// What each indexed `pk` is indexed under (records in neither index are absent).
    by_pk: HashMap<String, IndexKeys>,
}

impl Indexes {
    /// The indexes computed by a full scan of `records`: what [`Indexes::reindex`] must keep.
    #[cfg(test)]
    pub(super) fn scan<'a>(records: impl IntoIterator<Item = &'a IdempotencyRecord>) -> Self {
        let mut index = Self::default();
        for r in records {
            index.reindex(&r.pk, Some(r));
        }
        index
    }

    /// Brings the indexes up to date with record `pk` as it is now (`None`: no record).
    pub(super) fn reindex(&mut self, pk: &str, record: Option<&IdempotencyRecord>) {
        let new = record.map(IndexKeys::of).filter(|k| !k.is_empty());
        if self.by_pk.get(pk) == new.as_ref() {
            return;
        }
        if let Some(old) = self.by_pk.remove(pk) {
            if let Some((shard, created_at_ms)) = old.in_flight {
                if let Some(set) = self.in_flight.get_mut(&shard) {
                    set.remove(&(created_at_ms, pk.to_string()));
                    if set.is_empty() {
                        self.in_flight.remove(&shard);
                    }
                }
            }
            if old.multi_effect {
                self.multi_effect.remove(pk);
            }
        }
        if let Some(new) = new {
            if let Some((shard, created_at_ms)) = &new.in_flight {
                self.in_flight
                    .entry(shard.clone())
                    .or_default()
                    .insert((*created_at_ms, pk.to_string()));
            }
            if new.multi_effect {
                self.multi_effect.insert(pk.to_string());
            }
            self.by_pk.insert(pk.to_string(), new);
        }
    }

    /// How many records hold two or more distinct effect ids.
    pub(super) fn multi_effect_count(&self) -> usize {
        self.multi_effect.len()
    }

    /// The `pk`s of the records holding two or more distinct effect ids, in order.
    pub(super) fn multi_effect_pks(&self) -> Vec<String> {
        self.multi_effect.iter().cloned().collect()
    }

    /// One page of shard `shard`'s records created before `created_before_ms` (epoch ms), oldest
    /// first (`created_at`, then `pk`), starting after `cursor` (the position that ended the
    /// previous page, `store::cursor`: the next page starts there whether or not that
    /// record is still in the shard), at most `limit` (at least 1). `records` are the store's
    /// records, by `pk`.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a cursor this store did not write.
    pub(super) fn stale_in_flight(
        &self,
        records: &BTreeMap<String, IdempotencyRecord>,
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<InFlightPage, StoreError> {
        let start = match cursor.as_deref().map(decode_cursor).transpose()? {
            None => Bound::Unbounded,
            Some(after) => Bound::Excluded(after),
        };
        let Some(set) = self.in_flight.get(shard) else {
            return Ok(InFlightPage::default());
        };
        let mut matching = set
            .range((start, Bound::Unbounded))
            .take_while(|(created_at_ms, _)| *created_at_ms < created_before_ms);
        let page: Vec<&(i64, String)> = matching.by_ref().take(limit.max(1)).collect();
        let more = matching.next().is_some();
        Ok(InFlightPage {
            entries: page
                .iter()
                .filter_map(|(_, pk)| records.get(pk))
                .map(InFlightEntry::from)
                .collect(),
            unreadable: Vec::new(),
            cursor: more
                .then(|| {
                    page.last()
                        .map(|(created_at_ms, pk)| encode_cursor(*created_at_ms, pk))
                })
                .flatten(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use futures::executor::block_on;
    use proptest::prelude::*;

    use super::Indexes;
    use crate::record::{BusinessRow, IdempotencyRecord, RecordStatus};
    use crate::store::cursor::{decode_cursor, encode_cursor};
    use crate::store::memory::MemoryStore;
    use crate::store::{FinishGuard, IdempotencyStore, InFlightEntry, InFlightIndex, InFlightPage};

    /// One write of the store (every kind there is), on a handful of keys, owners and effect ids so
    /// that sequences collide, take over, commit and re-reserve the same records.
    #[derive(Debug, Clone)]
    enum Op {
        Reserve {
            key: u8,
            owner: u8,
            created_s: u8,
            short_ttl: bool,
            routing: bool,
        },
        TakeOver {
            key: u8,
            old: u8,
            new: u8,
        },
        Commit {
            key: u8,
            owner: u8,
            effect: u8,
        },
        Release {
            key: u8,
            owner: u8,
        },
        Finish {
            key: u8,
            owner: u8,
            no_effect_guard: bool,
        },
        Routed {
            key: u8,
            owner: u8,
        },
        RecordEffectId {
            key: u8,
            effect: u8,
        },
        PutRaw {
            key: u8,
            shard: Option<u8>,
            created_s: u8,
            effects: u8,
        },
        Wait {
            seconds: u16,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u8..6;
        let owner = 0u8..3;
        prop_oneof![
            (
                key.clone(),
                owner.clone(),
                0u8..4,
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(key, owner, created_s, short_ttl, routing)| Op::Reserve {
                    key,
                    owner,
                    created_s,
                    short_ttl,
                    routing
                }),
            (key.clone(), owner.clone(), owner.clone()).prop_map(|(key, old, new)| Op::TakeOver {
                key,
                old,
                new
            }),
            (key.clone(), owner.clone(), 0u8..3).prop_map(|(key, owner, effect)| Op::Commit {
                key,
                owner,
                effect
            }),
            (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Release { key, owner }),
            (key.clone(), owner.clone(), any::<bool>()).prop_map(
                |(key, owner, no_effect_guard)| {
                    Op::Finish {
                        key,
                        owner,
                        no_effect_guard,
                    }
                }
            ),
            (key.clone(), owner.clone()).prop_map(|(key, owner)| Op::Routed { key, owner }),
            (key.clone(), 0u8..3).prop_map(|(key, effect)| Op::RecordEffectId { key, effect }),
            (key, proptest::option::of(0u8..3), 0u8..4, 0u8..3).prop_map(
                |(key, shard, created_s, effects)| Op::PutRaw {
                    key,
                    shard,
                    created_s,
                    effects
                }
            ),
            (1u16..400).prop_map(|seconds| Op::Wait { seconds }),
        ]
    }

    const START_MS: i64 = 1_749_445_200_000;

    fn pk(key: u8) -> String {
        format!("it#{}", event_key(key))
    }

    fn event_key(key: u8) -> String {
        format!("{key:064x}")
    }

    /// Shards of three only, so that several records share one.
    fn shard(key: u8) -> String {
        format!("{:02}", key % 3)
    }

    fn owner(n: u8) -> String {
        format!("owner-{n}")
    }

    fn record(key: u8, created_ms: i64, now_ms: i64) -> IdempotencyRecord {
        IdempotencyRecord {
            pk: pk(key),
            event_key: event_key(key),
            status: RecordStatus::InFlight,
            fingerprint: "f".repeat(64),
            request: b"{}".to_vec(),
            op_key: format!("{}:op", event_key(key)),
            lease_owner: None,
            lease_until_ms: None,
            created_at_ms: created_ms,
            updated_at_ms: now_ms,
            expires_at_s: now_ms / 1000 + 3_600,
            effect_id: None,
            effect_ids: BTreeSet::new(),
            inflight_shard: Some(shard(key)),
            error: None,
            route_pending: false,
            labels: Default::default(),
        }
    }

    async fn apply(store: &MemoryStore, op: &Op, now_ms: &mut i64) {
        let now = *now_ms;
        // Answers do not matter here (refusals and errors included): only what was written.
        match *op {
            Op::Reserve {
                key,
                owner: o,
                created_s,
                short_ttl,
                routing,
            } => {
                let mut r = record(key, now - i64::from(created_s) * 1000, now);
                r.lease_owner = Some(owner(o));
                r.lease_until_ms = Some(now + 60_000);
                if short_ttl {
                    r.expires_at_s = now / 1000 + 1;
                }
                if routing {
                    r.status = RecordStatus::Manual;
                    r.route_pending = true;
                }
                let _ = store.reserve(&r, now).await;
            }
            Op::TakeOver { key, old, new } => {
                let _ = store
                    .take_over(&pk(key), &owner(old), &owner(new), now + 60_000, now)
                    .await;
            }
            Op::Commit {
                key,
                owner: o,
                effect,
            } => {
                let booking = BusinessRow {
                    source_event: event_key(key),
                    effect_id: format!("S-{effect}"),
                    labels: Default::default(),
                    written_at_ms: now,
                };
                let _ = store
                    .commit(&pk(key), &owner(o), &format!("S-{effect}"), &booking, now)
                    .await;
            }
            Op::Release { key, owner: o } => {
                let _ = store.release_lease(&pk(key), &owner(o), now).await;
            }
            Op::Finish {
                key,
                owner: o,
                no_effect_guard,
            } => {
                let guard = if no_effect_guard {
                    FinishGuard::LeaseAndNoEffect
                } else {
                    FinishGuard::Lease
                };
                let _ = store
                    .finish(
                        &pk(key),
                        &owner(o),
                        RecordStatus::Manual,
                        "e",
                        b"{}",
                        guard,
                        now,
                    )
                    .await;
            }
            Op::Routed { key, owner: o } => {
                let _ = store.routed(&pk(key), &owner(o), now).await;
            }
            Op::RecordEffectId { key, effect } => {
                let _ = store
                    .record_effect_id(&pk(key), &format!("S-{effect}"), now)
                    .await;
            }
            Op::PutRaw {
                key,
                shard: s,
                created_s,
                effects,
            } => {
                let mut r = record(key, now - i64::from(created_s) * 1000, now);
                r.inflight_shard = s.map(|s| format!("{s:02}"));
                r.effect_ids = (0..effects).map(|n| format!("S-{n}")).collect();
                store.put_raw(r);
            }
            Op::Wait { seconds } => *now_ms += i64::from(seconds) * 1000,
        }
    }

    /// The index read as the memory store answered it before it kept indexes: a scan of every
    /// record (the reference the indexed answer must equal).
    fn scanned_page(
        records: &[IdempotencyRecord],
        shard: &str,
        created_before_ms: i64,
        cursor: Option<String>,
        limit: usize,
    ) -> InFlightPage {
        let mut matching: Vec<&IdempotencyRecord> = records
            .iter()
            .filter(|r| r.inflight_shard.as_deref() == Some(shard))
            .filter(|r| r.created_at_ms < created_before_ms)
            .collect();
        matching.sort_by(|a, b| (a.created_at_ms, &a.pk).cmp(&(b.created_at_ms, &b.pk)));
        // The cursor is a position: the first record after it, whether or not it names one.
        let start = match cursor.as_deref().map(decode_cursor) {
            Some(Ok(after)) => matching
                .iter()
                .position(|r| (r.created_at_ms, r.pk.clone()) > after)
                .unwrap_or(matching.len()),
            Some(Err(e)) => panic!("a cursor the store wrote: {e}"),
            None => 0,
        };
        let page: Vec<InFlightEntry> = matching
            .iter()
            .skip(start)
            .take(limit.max(1))
            .map(|r| InFlightEntry::from(*r))
            .collect();
        let cursor = if start + page.len() < matching.len() {
            page.last().map(|r| encode_cursor(r.created_at_ms, &r.pk))
        } else {
            None
        };
        InFlightPage {
            entries: page,
            unreadable: Vec::new(),
            cursor,
        }
    }

    /// Every page of every shard, for a few bounds and page sizes, against the scan; cursors at
    /// positions of no record in the shard (the page starts after them); a cursor the store did
    /// not write (refused as corrupt).
    async fn assert_reads_match_a_scan(store: &MemoryStore, now_ms: i64) {
        let records = store.records();
        let multi = records.iter().filter(|r| r.effect_ids.len() > 1).count();
        assert_eq!(store.multi_effect_keys().await.unwrap(), multi);
        for shard in ["00", "01", "02", "03"] {
            for bound in [i64::MAX, now_ms, now_ms - 1_000, now_ms - 3_000] {
                for limit in [0, 1, 2, 10] {
                    let mut cursor = None;
                    loop {
                        let got = store
                            .stale_in_flight(shard, bound, cursor.clone(), limit)
                            .await
                            .unwrap();
                        let want = scanned_page(&records, shard, bound, cursor, limit);
                        assert_eq!(got.entries, want.entries);
                        assert_eq!(got.cursor, want.cursor);
                        match got.cursor {
                            Some(c) => cursor = Some(c),
                            None => break,
                        }
                    }
                }
                // Positions whose record may be anywhere or nowhere: the page starts after them.
                for stray_pk in [pk(0), pk(1), "it#absent".to_string()] {
                    for created in [now_ms - 4_000, now_ms - 2_000, now_ms] {
                        let stray = encode_cursor(created, &stray_pk);
                        let got = store
                            .stale_in_flight(shard, bound, Some(stray.clone()), 1)
                            .await
                            .unwrap();
                        let want = scanned_page(&records, shard, bound, Some(stray), 1);
                        assert_eq!((got.entries, got.cursor), (want.entries, want.cursor));
                    }
                }
                let refused = store.stale_in_flight(shard, bound, Some(pk(0)), 1).await;
                assert!(
                    matches!(refused, Err(crate::store::StoreError::Corrupt(_))),
                    "a cursor the store did not write: {refused:?}"
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// After any sequence of writes, the indexes are what a full scan of the records
        /// computes, and every index read answers as the scan did.
        #[test]
        fn the_indexes_equal_a_full_scan_after_any_writes(ops in prop::collection::vec(op(), 1..60)) {
            block_on(async {
                let store = MemoryStore::new();
                let mut now_ms = START_MS;
                for op in &ops {
                    apply(&store, op, &mut now_ms).await;
                    {
                        let t = store.tables.lock().unwrap();
                        assert_eq!(t.index, Indexes::scan(t.records.values()), "after {op:?}");
                    }
                    assert_reads_match_a_scan(&store, now_ms).await;
                }
            });
        }
    }

    #[test]
    fn a_commit_takes_the_record_out_of_in_flight_and_a_second_effect_id_into_multi_effect() {
        block_on(async {
            let store = MemoryStore::new();
            let now = START_MS;
            let mut r = record(1, now, now);
            r.lease_owner = Some(owner(0));
            r.lease_until_ms = Some(now + 60_000);
            store.reserve(&r, now).await.unwrap();
            let page = store
                .stale_in_flight("01", i64::MAX, None, 10)
                .await
                .unwrap();
            assert_eq!(page.entries.len(), 1);
            let booking = BusinessRow::for_record(&r, "S-1", now);
            store
                .commit(&r.pk, &owner(0), "S-1", &booking, now)
                .await
                .unwrap();
            let page = store
                .stale_in_flight("01", i64::MAX, None, 10)
                .await
                .unwrap();
            assert!(page.entries.is_empty());
            assert_eq!(store.multi_effect_keys().await.unwrap(), 0);
            store.record_effect_id(&r.pk, "S-2", now).await.unwrap();
            assert_eq!(store.multi_effect_keys().await.unwrap(), 1);
        });
    }
}
