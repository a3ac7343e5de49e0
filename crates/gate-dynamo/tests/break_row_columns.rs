//! Hostile-review regression tests of the business row's columns named by the integration
//! (`RowColumns`, `row_to_item`/`row_from_item`, the stores' refusal
//! of a row label named like a column). Each test names the attack; all pass on a right codec.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use gate::record::{BusinessRow, Labels, RowColumns};
use gate::store::limits::{check_row, ItemRefusal};
use gate::store::memory::MemoryStore;
use gate::store::{IdempotencyStore, StoreError};
use gate_dynamo::{row_from_item, row_to_item};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

const CUSTOM: RowColumns = RowColumns {
    event_key: "source_event",
    effect_id: "charge_id",
    written_at: "charged_at",
};

/// A row in the legacy layout ( `slot_id`, `booked_at`) with a label named
/// `written_at`: the previous release reserved `source_event`, `effect_id` and `booked_at` only,
/// so an integration could label its rows `written_at` (a human-readable time, a string). Under
/// the neutral layout that string is not the row's time: the row reads with the legacy time
/// and keeps its label, as DEPLOYING's "Stored names" promises ("a row written before still
/// reads"), never `Corrupt`.
#[test]
fn an_older_row_with_a_label_named_like_a_new_column_still_reads() {
    let item = HashMap::from([
        ("source_event".to_string(), s("ev-1")),
        ("slot_id".to_string(), s("E-1")),
        ("booked_at".to_string(), n(1_749_441_600_000)),
        ("written_at".to_string(), s("2025-06-09T04:00:00Z")),
        ("job".to_string(), s("j-1")),
    ]);
    let row = row_from_item(&item, &RowColumns::NEUTRAL).expect("an older row reads");
    assert_eq!(row.source_event, "ev-1");
    assert_eq!(row.effect_id, "E-1");
    assert_eq!(row.written_at_ms, 1_749_441_600_000);
    assert_eq!(
        row.labels,
        Labels::from([
            ("job".to_string(), "j-1".to_string()),
            ("written_at".to_string(), "2025-06-09T04:00:00Z".to_string()),
        ])
    );

    // The same under an integration's own names: an older label `charged_at` (a string).
    let mut custom_item = item.clone();
    custom_item.remove("written_at");
    custom_item.insert("charged_at".to_string(), s("yesterday"));
    let row = row_from_item(&custom_item, &CUSTOM).expect("an older row reads");
    assert_eq!(
        (row.effect_id.as_str(), row.written_at_ms),
        ("E-1", 1_749_441_600_000)
    );
    assert_eq!(
        row.labels.get("charged_at").map(String::as_str),
        Some("yesterday")
    );
}

/// The review of the recovered change: an older row (legacy `slot_id`, `booked_at`) with a label
/// named like the integration's own effect-id column. The layout is decided once for the item,
/// from its time: the row is the older gate's, so its effect id is `slot_id` and `charge_id`
/// stays a label (read per attribute, a string `charge_id` passed for the effect id and the real
/// one was dropped). The commit's cancellation reason reads the same id (`row_effect_id`, through
/// the same decision).
#[test]
fn an_older_rows_label_named_like_the_effect_id_column_stays_a_label() {
    let item = HashMap::from([
        ("source_event".to_string(), s("ev-1")),
        ("slot_id".to_string(), s("E-1")),
        ("booked_at".to_string(), n(1_749_441_600_000)),
        ("charge_id".to_string(), s("x")),
    ]);
    let row = row_from_item(&item, &CUSTOM).expect("an older row reads");
    assert_eq!(row.effect_id, "E-1");
    assert_eq!(row.written_at_ms, 1_749_441_600_000);
    assert_eq!(
        row.labels,
        Labels::from([("charge_id".to_string(), "x".to_string())])
    );
    // A row of the configured layout is read under it, a legacy-named label kept out.
    let item = HashMap::from([
        ("source_event".to_string(), s("ev-2")),
        ("charge_id".to_string(), s("ch_2")),
        ("charged_at".to_string(), n(1_749_441_600_001)),
    ]);
    let row = row_from_item(&item, &CUSTOM).expect("a row reads");
    assert_eq!(
        (row.effect_id.as_str(), row.written_at_ms),
        ("ch_2", 1_749_441_600_001)
    );
    assert!(row.labels.is_empty(), "{row:?}");
}

/// The second review: an integration that keeps one legacy name (`{charge_id, booked_at}`).
/// Its older rows (`slot_id`, `booked_at`) have the configured time but not the configured
/// effect id: the layout looks at both columns, so they still read under the legacy names (from
/// the time alone they read as corrupt, "charge_id missing").
#[test]
fn an_integration_keeping_one_legacy_name_reads_its_older_rows() {
    const HALF: RowColumns = RowColumns {
        event_key: "source_event",
        effect_id: "charge_id",
        written_at: "booked_at",
    };
    HALF.validate().expect("distinct and non-empty");
    let older = HashMap::from([
        ("source_event".to_string(), s("ev-1")),
        ("slot_id".to_string(), s("E-1")),
        ("booked_at".to_string(), n(1_749_441_600_000)),
    ]);
    let row = row_from_item(&older, &HALF).expect("an older row reads");
    assert_eq!(
        (row.effect_id.as_str(), row.written_at_ms),
        ("E-1", 1_749_441_600_000)
    );
    assert!(row.labels.is_empty(), "{row:?}");
    let new = HashMap::from([
        ("source_event".to_string(), s("ev-2")),
        ("charge_id".to_string(), s("ch_2")),
        ("booked_at".to_string(), n(1_749_441_600_001)),
    ]);
    let row = row_from_item(&new, &HALF).expect("a row reads");
    assert_eq!(
        (row.effect_id.as_str(), row.written_at_ms),
        ("ch_2", 1_749_441_600_001)
    );
}

/// A configured column of the wrong type with no legacy column to fall back on is corrupt,
/// never a guess.
#[test]
fn a_column_of_the_wrong_type_without_a_legacy_one_is_corrupt() {
    let item = HashMap::from([
        ("source_event".to_string(), s("ev-1")),
        ("effect_id".to_string(), s("E-1")),
        ("written_at".to_string(), s("noon")),
    ]);
    assert!(matches!(
        row_from_item(&item, &RowColumns::NEUTRAL),
        Err(StoreError::Corrupt(_))
    ));
    let item = HashMap::from([
        ("source_event".to_string(), s("ev-1")),
        ("effect_id".to_string(), n(7)),
        ("written_at".to_string(), n(1)),
    ]);
    assert!(matches!(
        row_from_item(&item, &RowColumns::NEUTRAL),
        Err(StoreError::Corrupt(_))
    ));
}

/// Column names that are DynamoDB reserved words or hold `#`/`.`: the item is a plain map (no
/// expression), so they round-trip unchanged.
#[test]
fn reserved_words_and_punctuation_as_column_names_round_trip() {
    let columns = RowColumns {
        event_key: "name",
        effect_id: "status.id",
        written_at: "#size",
    };
    columns.validate().expect("distinct and non-empty");
    let row = BusinessRow {
        source_event: "ev-2".into(),
        effect_id: "E-2".into(),
        labels: Labels::from([("size".to_string(), "XL".to_string())]),
        written_at_ms: 1_749_441_600_001,
    };
    let item = row_to_item(&row, &columns);
    assert_eq!(item["name"], s("ev-2"));
    assert_eq!(item["status.id"], s("E-2"));
    assert_eq!(item["#size"], n(1_749_441_600_001));
    assert_eq!(row_from_item(&item, &columns).expect("round trip"), row);
}

/// Two names for one column are refused before any store is built; an empty one too.
#[test]
fn colliding_or_empty_column_names_are_refused() {
    for bad in [
        RowColumns {
            event_key: "k",
            effect_id: "k",
            written_at: "t",
        },
        RowColumns {
            event_key: "k",
            effect_id: "id",
            written_at: "id",
        },
        RowColumns {
            event_key: "k",
            effect_id: "",
            written_at: "t",
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

/// A row label named like a column of the store's layout: refused by the memory store's commit
/// as by the shared check the DynamoDB store runs ([`check_row`]), for each layout; a label
/// named like a column of another layout is the integration's own.
#[tokio::test]
async fn a_label_named_like_a_column_is_refused_the_same_by_both_checks() {
    for columns in [RowColumns::NEUTRAL, RowColumns::LEGACY, CUSTOM] {
        for name in columns.names() {
            let row = BusinessRow {
                source_event: "ev-3".into(),
                effect_id: "E-3".into(),
                labels: Labels::from([(name.to_string(), "x".to_string())]),
                written_at_ms: 1,
            };
            let want = ItemRefusal::ReservedLabel {
                name: name.to_string(),
            };
            assert_eq!(check_row(&row, &columns), Err(want.clone()), "{columns:?}");
            let store = MemoryStore::new().with_row_columns(columns);
            match store.commit("pk-none", "owner", "E-3", &row, 1).await {
                Err(StoreError::Refused(refusal)) => assert_eq!(refusal, want, "{columns:?}"),
                other => panic!("{columns:?}: {name} not refused: {other:?}"),
            }
        }
    }
    let row = BusinessRow {
        source_event: "ev-3".into(),
        effect_id: "E-3".into(),
        labels: Labels::from([("charged_at".to_string(), "x".to_string())]),
        written_at_ms: 1,
    };
    assert_eq!(check_row(&row, &RowColumns::NEUTRAL), Ok(()));
}
