//! Conformance cases of the read side: the `InFlight` index's pages.

use super::*;

/// `stale_in_flight` on shard `"07"`: 5 stale `in_flight` records, limit 2, give pages of 2, 2
/// and 1, oldest first, the last without a cursor, each entry exactly the record's
/// [`InFlightEntry`] (so a projection that drops one of its attributes fails here). Absent: a record created at or after the
/// bound, committed and failed records (they left the sparse index), and other shards.
pub async fn stale_in_flight_paginates(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let shard = "07";
    let base = NOW_MS - 10 * 60_000;
    let in_shard = |name: &str, created: i64| IdempotencyRecord {
        inflight_shard: Some(shard.to_string()),
        ..sample_record(prefix, name, "owner-a", created)
    };
    // Reserved newest first, so insertion order is not the answer.
    let mut expected = Vec::new();
    for i in (0..5).rev() {
        let r = in_shard(&format!("stale-{i}"), base + i * 1000);
        must_reserve(store, &r, NOW_MS).await;
        expected.push(InFlightEntry::from(&r));
    }
    expected.reverse();
    let bound = base + 5 * 1000;
    must_reserve(store, &in_shard("stale-too-new", bound), NOW_MS).await;
    let committed = in_shard("stale-committed", base - 500);
    must_reserve(store, &committed, NOW_MS).await;
    let b = BusinessRow::for_record(&committed, "EFFECT-C", NOW_MS);
    let out = store
        .commit(&committed.pk, "owner-a", "EFFECT-C", &b, NOW_MS)
        .await
        .expect("commit");
    assert!(matches!(out, CommitOutcome::Committed));
    let failed = in_shard("stale-failed", base - 400);
    must_reserve(store, &failed, NOW_MS).await;
    let out = store
        .finish(
            &failed.pk,
            "owner-a",
            RecordStatus::Failed,
            "x",
            b"{}",
            FinishGuard::Lease,
            NOW_MS,
        )
        .await
        .expect("finish");
    assert_eq!(out, FinishOutcome::Finished);
    assert!(store
        .routed(&failed.pk, "owner-a", NOW_MS)
        .await
        .expect("routed"));
    let other_shard = IdempotencyRecord {
        inflight_shard: Some("08".into()),
        ..sample_record(prefix, "stale-other-shard", "owner-a", base - 300)
    };
    must_reserve(store, &other_shard, NOW_MS).await;

    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .stale_in_flight(shard, bound, cursor, 2)
            .await
            .expect("stale_in_flight");
        assert!(page.entries.len() <= 2, "page over the limit");
        pages.push(page.entries);
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
        assert!(pages.len() < 10, "pagination does not end");
    }
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![2, 2, 1], "pages");
    let got: Vec<InFlightEntry> = pages.into_iter().flatten().collect();
    assert_eq!(
        got, expected,
        "oldest first, exactly the stale in_flight records"
    );

    let all = store
        .stale_in_flight(shard, bound, None, 100)
        .await
        .expect("stale_in_flight");
    assert_eq!(all.entries, expected);
    assert_eq!(all.cursor, None);
    let none = store
        .stale_in_flight(shard, base, None, 100)
        .await
        .expect("stale_in_flight");
    assert!(none.entries.is_empty(), "created_before is exclusive");
}

/// A cursor is a position in the index, not a record: `stale_in_flight` on shard `"09"`, 5 stale
/// `in_flight` records, limit 2; between the pages the record the cursor names is committed (as
/// the reconciler commits the records of a page before it asks for the next one), and the record
/// before it too. The next pages still give every record after the cursor, oldest first
/// (DynamoDB's `ExclusiveStartKey` is the last evaluated key's attributes, whether or not the
/// item is still in the index; "Paginating table query results", Amazon DynamoDB developer
/// guide). The records are older than any other case's, so the shard holds only these before the
/// bound even on tables the cases share.
pub async fn stale_in_flight_cursor_outlives_its_record(store: Arc<dyn Store>, prefix: &str) {
    let store = store.as_ref();
    let shard = "09";
    let base = NOW_MS - 30 * 86_400_000;
    let mut records = Vec::new();
    for i in 0..5 {
        let r = IdempotencyRecord {
            inflight_shard: Some(shard.to_string()),
            ..sample_record(prefix, &format!("cursor-{i}"), "owner-a", base + i * 1000)
        };
        must_reserve(store, &r, NOW_MS).await;
        records.push(r);
    }
    let bound = base + 5 * 1000;
    let first = store
        .stale_in_flight(shard, bound, None, 2)
        .await
        .expect("stale_in_flight");
    let want = |range: std::ops::Range<usize>| -> Vec<InFlightEntry> {
        records[range].iter().map(InFlightEntry::from).collect()
    };
    assert_eq!(first.entries, want(0..2), "the first page");
    let cursor = first.cursor.expect("more than one page");
    for r in &records[0..2] {
        let b = BusinessRow::for_record(r, "EFFECT-P", NOW_MS);
        let out = store
            .commit(&r.pk, "owner-a", "EFFECT-P", &b, NOW_MS)
            .await
            .expect("commit");
        assert!(matches!(out, CommitOutcome::Committed));
    }
    let mut rest = Vec::new();
    let mut cursor = Some(cursor);
    while let Some(c) = cursor {
        let page = store
            .stale_in_flight(shard, bound, Some(c), 2)
            .await
            .expect("stale_in_flight");
        assert!(page.entries.len() <= 2, "page over the limit");
        rest.extend(page.entries);
        cursor = page.cursor;
        assert!(rest.len() <= 3, "pagination does not end");
    }
    assert_eq!(
        rest,
        want(2..5),
        "every record after the cursor, though the cursor's record left the index"
    );
}
