//! What a store item may hold, written once for every adapter: the store's own attribute names
//! (a label must not take one) and DynamoDB's item size limit, so the memory store refuses what
//! DynamoDB refuses and a memory-store test cannot pass what production breaks.
//!
//! * [`RESERVED_NAMES`]: the attribute names of the store's items (record, natural-key item,
//!   audit history, the business row's legacy names), and on a business row also its
//!   [`RowColumns`] (named by the integration). A label under one of these names would
//!   overwrite the store's own attribute or be dropped, so it is refused.
//! * [`MAX_ITEM_BYTES`]: DynamoDB's item size limit; [`record_item_bytes`],
//!   `row_item_bytes` and `natural_key_item_bytes` size an item the way DynamoDB documents
//!   it (AWS, Amazon DynamoDB Developer Guide, "Item sizes and formats": the UTF-8 length of every
//!   attribute name plus the size of its value; a string its UTF-8 length, a binary its length, a
//!   number about one byte per two significant digits plus one, a set the sum of its elements).
//!
//! Both adapters refuse such a write with [`StoreError::Refused`](super::StoreError::Refused)
//! (permanent: never retried). The consumer checks a new record, its business row and its
//! natural-key item with [`check_new_event`] **before** the reserve, so such an event is rejected
//! with its typed reason ([`ItemRefusal::code`]) and routed to a person once, never retried
//! until it reaches the dead-letter queue.

use crate::manual::MAX_ITEM_JSON_BYTES;
use crate::record::{BusinessRow, IdempotencyRecord, Labels, NaturalKey, RowColumns};

/// DynamoDB's item size limit, **bytes**: "400 KB" (AWS, DynamoDB "Service, account, and table
/// quotas": item size, attribute names and values included), read as 400,000 bytes. The service
/// accepts up to 400 KiB (409,600 bytes); the smaller reading is the safe one, and the emulator
/// the tests use (moto) refuses above 405,000 bytes.
pub const MAX_ITEM_BYTES: usize = 400_000;

/// DynamoDB's partition key limit, **bytes**: a partition key value is at most 2,048 bytes (AWS,
/// DynamoDB "Service, account, and table quotas": partition key length). A longer `pk` (a long
/// natural key, [`crate::store::natural_key_pk`]) is a `ValidationException` every time.
pub(crate) const MAX_PARTITION_KEY_BYTES: usize = 2048;

/// Room, **bytes**, a new record keeps for what the gate may add later besides the manual item:
/// the `error` text of a routing (at most [`MAX_ERROR_BYTES`]), the effect ids (`effect_id` and at
/// most [`MAX_EFFECT_IDS`] in `effect_ids`, each at most [`MAX_EFFECT_ID_BYTES`]), a longer lease
/// token (at most [`MAX_LEASE_OWNER_BYTES`]), the `route_pending` and multi-effect marks and an
/// operator's audit `history` (at most [`MAX_HISTORY_ENTRIES`] bounded lines): about 11.9 KB at
/// their largest together (`crates/gate/tests/largest_record.rs` proves the whole record stays under
/// [`MAX_ITEM_BYTES`]).
pub(crate) const GROWTH_ALLOWANCE_BYTES: usize = 16 * 1024;

/// Room, **bytes**, a business row keeps for its effect id (unknown before the side effect).
pub(crate) const EFFECT_ID_ALLOWANCE_BYTES: usize = 1024;

/// Longest `error` text a record keeps, **bytes** (UTF-8; cut at a character boundary by
/// `bounded_error`). The manual item keeps its own `detail` (`crate::manual::MAX_DETAIL_CHARS`).
pub const MAX_ERROR_BYTES: usize = 2048;

/// Longest effect id the gate records, in characters: the core's
/// [`crate::idempotency_key::MAX_EFFECT_ID_CHARS`] (printable ASCII, so also bytes).
pub const MAX_EFFECT_ID_BYTES: usize = crate::idempotency_key::MAX_EFFECT_ID_CHARS;

/// Most distinct effect ids the gate records on one record (`effect_ids`): two already raise the
/// distinct-effect signal; past this many a further one is logged, not stored (the consumer,
/// `crate::consumer`), so the set cannot outgrow the record's `GROWTH_ALLOWANCE_BYTES`.
pub const MAX_EFFECT_IDS: usize = 16;

/// Most lines a record's audit `history` holds (the audit log's); an append past
/// it is refused ([`ItemRefusal::HistoryFull`]).
pub const MAX_HISTORY_ENTRIES: usize = 20;

/// Longest `who` of an audit line, **bytes** (the audit line cuts it when it is bounded).
pub const MAX_AUDIT_WHO_BYTES: usize = 64;

/// Longest `action` of an audit line, **bytes**.
pub const MAX_AUDIT_ACTION_BYTES: usize = 16;

/// Longest `detail` of an audit line, **bytes**.
pub const MAX_AUDIT_DETAIL_BYTES: usize = 256;

/// Longest lease token the gate writes (`lease_owner`), **bytes**: a Lambda request id (a UUID,
/// 36) or the reconciler's `reconciler:{request id}`, with the record's `#{n}` suffix. Used to
/// size a record's later states; a longer token only costs part of the growth allowance.
pub const MAX_LEASE_OWNER_BYTES: usize = 128;

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn cut_to(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to [`MAX_ERROR_BYTES`]: what a record's `error` attribute keeps.
pub(crate) fn bounded_error(text: &str) -> &str {
    cut_to(text, MAX_ERROR_BYTES)
}

/// The attribute names of the store's own items, which no label may take: the record's
/// (`pk` .. `route_pending`, the multi-effect mark, the audit `history`), the natural-key
/// item's (`pk`, `event_key`, `expires_at`) and the business row's legacy names
/// ([`RowColumns::LEGACY`], read on a row in the legacy layout). A business row's label must
/// not take its [`RowColumns`] either ([`check_row`]). The DynamoDB codec reads every other
/// string attribute of an item as a label.
pub const RESERVED_NAMES: [&str; 22] = [
    "pk",
    "event_key",
    "status",
    "fingerprint",
    "request",
    "op_key",
    "lease_owner",
    "lease_until",
    "created_at",
    "updated_at",
    "expires_at",
    "effect_id",
    "effect_ids",
    // The legacy names: `slot_id`, `slot_ids` (read on items in the legacy layout,
    // `gate_dynamo::LEGACY_EFFECT_ID`, and on its business rows: `RowColumns::LEGACY`); the
    // multi-effect mark keeps its deployed name (`multi_slot`).
    "slot_id",
    "slot_ids",
    "inflight_shard",
    "error",
    "route_pending",
    "multi_slot",
    "history",
    "source_event",
    "booked_at",
];

/// Why a store refuses an item (and the consumer a new event): permanent, the same write can
/// never succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemRefusal {
    /// A label is named like one of the store's own attributes ([`RESERVED_NAMES`]).
    #[error("label {name:?} is named like one of the store's own attributes")]
    ReservedLabel {
        /// The label's name (one of [`RESERVED_NAMES`], so no text of a body).
        name: String,
    },
    /// A label has an empty name (DynamoDB refuses empty attribute names).
    #[error("a label has an empty name")]
    EmptyLabelName,
    /// The record's audit history already holds [`MAX_HISTORY_ENTRIES`] lines.
    #[error("the record's audit history is full ({limit} lines)")]
    HistoryFull {
        /// [`MAX_HISTORY_ENTRIES`].
        limit: usize,
    },
    /// The item's `pk` is longer than `MAX_PARTITION_KEY_BYTES`.
    #[error("a key of the item takes {bytes} bytes, over the store's partition key limit of {limit} bytes")]
    KeyTooLong {
        /// The key's length, bytes.
        bytes: usize,
        /// `MAX_PARTITION_KEY_BYTES`.
        limit: usize,
    },
    /// The item is over [`MAX_ITEM_BYTES`] (for a new event: in the largest state the gate may
    /// write it in, see [`check_new_event`]).
    #[error("the item takes {bytes} bytes, over the store's item limit of {limit} bytes")]
    TooLarge {
        /// Its size as DynamoDB counts it, bytes.
        bytes: usize,
        /// [`MAX_ITEM_BYTES`].
        limit: usize,
    },
}

impl ItemRefusal {
    /// The stable code, as a [`crate::integration::Rejection`] carries it: `label_reserved`,
    /// `label_name_empty`, `history_full`, `key_too_long`, `item_too_large`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::ReservedLabel { .. } => "label_reserved",
            Self::EmptyLabelName => "label_name_empty",
            Self::HistoryFull { .. } => "history_full",
            Self::KeyTooLong { .. } => "key_too_long",
            Self::TooLarge { .. } => "item_too_large",
        }
    }

    /// The rejection a body whose event would make this item gets (routed to a person once).
    pub fn rejection(&self) -> crate::integration::Rejection {
        crate::integration::Rejection {
            code: self.code(),
            detail: self.to_string(),
            ended: false,
        }
    }
}

/// Refuses a label named like a store attribute ([`RESERVED_NAMES`]) or with an empty name.
///
/// # Errors
/// [`ItemRefusal::ReservedLabel`], [`ItemRefusal::EmptyLabelName`].
pub(crate) fn check_label_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), ItemRefusal> {
    check_names(names, &[])
}

/// [`check_label_names`], refusing also the names in `own` (a business row's [`RowColumns`]).
fn check_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
    own: &[&str],
) -> Result<(), ItemRefusal> {
    for name in names {
        if name.is_empty() {
            return Err(ItemRefusal::EmptyLabelName);
        }
        if RESERVED_NAMES.contains(&name) || own.contains(&name) {
            return Err(ItemRefusal::ReservedLabel {
                name: name.to_string(),
            });
        }
    }
    Ok(())
}

/// [`check_label_names`] of `labels`.
///
/// # Errors
/// As [`check_label_names`].
pub(crate) fn check_labels(labels: &Labels) -> Result<(), ItemRefusal> {
    check_label_names(labels.keys().map(String::as_str))
}

/// [`check_labels`] of a business row's `labels`, refusing also its `columns`' names (a label
/// `written_at` would overwrite the row's time).
///
/// # Errors
/// As [`check_label_names`].
pub(crate) fn check_row_labels(labels: &Labels, columns: &RowColumns) -> Result<(), ItemRefusal> {
    check_names(labels.keys().map(String::as_str), &columns.names())
}

/// The size, bytes, DynamoDB counts for a number attribute's value `n`: one byte per two
/// significant digits (trailing zeros trimmed), rounded up, plus one (plus one for a sign).
pub fn number_bytes(n: i64) -> usize {
    let digits = n.unsigned_abs().to_string();
    let significant = digits.trim_end_matches('0').len().max(1);
    significant.div_ceil(2) + 1 + usize::from(n < 0)
}

/// The size, bytes, of a string attribute or map member `name` holding `value`.
pub(crate) fn s(name: &str, value: &str) -> usize {
    name.len() + value.len()
}

/// The size, bytes, of a number attribute or map member `name` holding `value`.
pub(crate) fn n(name: &str, value: i64) -> usize {
    name.len() + number_bytes(value)
}

fn labels_bytes(labels: &Labels) -> usize {
    labels.iter().map(|(k, v)| s(k, v)).sum()
}

/// The size, bytes, of `record` as a DynamoDB item (the codec's layout: every attribute it
/// writes, the optional ones only when present, the request as binary, the effect ids as a
/// string set, each label a string attribute).
pub fn record_item_bytes(record: &IdempotencyRecord) -> usize {
    record_bytes_without_request(record) + request_bytes(record.request.len())
}

fn request_bytes(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        "request".len() + len
    }
}

fn record_bytes_without_request(r: &IdempotencyRecord) -> usize {
    let mut size = s("pk", &r.pk)
        + s("event_key", &r.event_key)
        + s("status", r.status.as_str())
        + s("fingerprint", &r.fingerprint)
        + s("op_key", &r.op_key)
        + n("created_at", r.created_at_ms)
        + n("updated_at", r.updated_at_ms)
        + n("expires_at", r.expires_at_s)
        + labels_bytes(&r.labels);
    size += r.lease_owner.as_deref().map_or(0, |v| s("lease_owner", v));
    size += r.lease_until_ms.map_or(0, |v| n("lease_until", v));
    size += r.effect_id.as_deref().map_or(0, |v| s("effect_id", v));
    size += r
        .inflight_shard
        .as_deref()
        .map_or(0, |v| s("inflight_shard", v));
    size += r.error.as_deref().map_or(0, |v| s("error", v));
    size += if r.route_pending {
        s("route_pending", "1")
    } else {
        0
    };
    if !r.effect_ids.is_empty() {
        size += "effect_ids".len() + r.effect_ids.iter().map(String::len).sum::<usize>();
    }
    size
}

/// The size, bytes, of `row` as a DynamoDB item laid out with `columns`: the event key, the
/// effect id and the time under their names, and each label.
pub(crate) fn row_item_bytes(row: &BusinessRow, columns: &RowColumns) -> usize {
    s(columns.event_key, &row.source_event)
        + s(columns.effect_id, &row.effect_id)
        + n(columns.written_at, row.written_at_ms)
        + labels_bytes(&row.labels)
}

/// The size, bytes, of a natural-key item: `pk` (`item_pk`, see
/// [`crate::store::natural_key_pk`]), `event_key`, `expires_at` and each of the key's labels.
pub(crate) fn natural_key_item_bytes(item_pk: &str, event_key: &str, key: &NaturalKey) -> usize {
    s("pk", item_pk)
        + s("event_key", event_key)
        + n("expires_at", key.expires_at_s)
        + labels_bytes(&key.labels)
}

/// The size, bytes, of the multi-effect mark (legacy stored name `multi_slot`, `"1"`), written
/// once a record holds two effect ids.
pub fn multi_mark_bytes() -> usize {
    s("multi_slot", "1")
}

fn within(bytes: usize) -> Result<(), ItemRefusal> {
    if bytes > MAX_ITEM_BYTES {
        return Err(ItemRefusal::TooLarge {
            bytes,
            limit: MAX_ITEM_BYTES,
        });
    }
    Ok(())
}

/// What a store checks before it writes a record: its labels and its size.
///
/// # Errors
/// A reserved or empty label name; over [`MAX_ITEM_BYTES`].
pub fn check_record(record: &IdempotencyRecord) -> Result<(), ItemRefusal> {
    check_labels(&record.labels)?;
    within(record_item_bytes(record))
}

/// What a store checks before it writes a business row laid out with `columns`: its labels
/// (none named like a store attribute or one of `columns`) and its size.
///
/// # Errors
/// A reserved or empty label name; over [`MAX_ITEM_BYTES`].
pub fn check_row(row: &BusinessRow, columns: &RowColumns) -> Result<(), ItemRefusal> {
    check_row_labels(&row.labels, columns)?;
    within(row_item_bytes(row, columns))
}

/// The `pk` of the natural-key item `key` of `record` ([`crate::store::natural_key_pk`]), once
/// `check_natural_key` accepts it: what every adapter's guard writes first.
///
/// # Errors
/// As `check_natural_key`.
pub fn guard_pk(record: &IdempotencyRecord, key: &NaturalKey) -> Result<String, ItemRefusal> {
    let item_pk = crate::store::natural_key_pk(&record.pk, &record.event_key, key);
    check_natural_key(&item_pk, &record.event_key, key)?;
    Ok(item_pk)
}

/// What a store checks before it writes a natural-key item `item_pk` for `event_key`: the key's
/// labels and the item's size.
///
/// # Errors
/// A reserved or empty label name; a `pk` over [`MAX_PARTITION_KEY_BYTES`]; over [`MAX_ITEM_BYTES`].
pub(crate) fn check_natural_key(
    item_pk: &str,
    event_key: &str,
    key: &NaturalKey,
) -> Result<(), ItemRefusal> {
    check_labels(&key.labels)?;
    if item_pk.len() > MAX_PARTITION_KEY_BYTES {
        return Err(ItemRefusal::KeyTooLong {
            bytes: item_pk.len(),
            limit: MAX_PARTITION_KEY_BYTES,
        });
    }
    within(natural_key_item_bytes(item_pk, event_key, key))
}

/// The most bytes `record` (as reserved) can take in any state the gate writes it in later: its
/// stored request replaced by a manual item of up to [`MAX_ITEM_JSON_BYTES`] when it is routed to
/// a person, plus `GROWTH_ALLOWANCE_BYTES` for the error text, the effect ids, the marks and an
/// operator's audit history.
pub fn record_bytes_at_most(record: &IdempotencyRecord) -> usize {
    record_bytes_without_request(record)
        + request_bytes(record.request.len().max(MAX_ITEM_JSON_BYTES))
        + GROWTH_ALLOWANCE_BYTES
}

/// The consumer's check of a new event before its reserve: the record's labels and its largest
/// later size ([`record_bytes_at_most`]), the business row's labels and size as laid out with
/// the store's `columns` (with
/// `EFFECT_ID_ALLOWANCE_BYTES` for the effect id it does not know yet) and the natural-key
/// item's labels. A refusal is the event's [`ItemRefusal::rejection`]: routed to a person once,
/// never retried (a store would refuse the same write every time).
///
/// # Errors
/// The first [`ItemRefusal`] found.
pub fn check_new_event(
    record: &IdempotencyRecord,
    row: &BusinessRow,
    natural_key: Option<&NaturalKey>,
    columns: &RowColumns,
) -> Result<(), ItemRefusal> {
    check_labels(&record.labels)?;
    within(record_bytes_at_most(record))?;
    check_row_labels(&row.labels, columns)?;
    within(row_item_bytes(row, columns) + EFFECT_ID_ALLOWANCE_BYTES)?;
    if let Some(key) = natural_key {
        let item_pk = crate::store::natural_key_pk(&record.pk, &record.event_key, key);
        check_natural_key(&item_pk, &record.event_key, key)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_take_a_byte_per_two_significant_digits_plus_one() {
        assert_eq!(number_bytes(0), 2);
        assert_eq!(number_bytes(7), 2);
        assert_eq!(number_bytes(42), 2);
        assert_eq!(number_bytes(123), 3);
        // 1,749,441,600,000 ms: significant digits 17494416 (8, trailing zeros trimmed).
        assert_eq!(number_bytes(1_749_441_600_000), 5);
        assert_eq!(number_bytes(-5), 3);
    }

    #[test]
    fn reserved_and_empty_label_names_are_refused() {
        for name in RESERVED_NAMES {
            let labels = Labels::from([(name.to_string(), "x".to_string())]);
            assert_eq!(
                check_labels(&labels),
                Err(ItemRefusal::ReservedLabel {
                    name: name.to_string()
                })
            );
        }
        let empty = Labels::from([(String::new(), "x".to_string())]);
        assert_eq!(check_labels(&empty), Err(ItemRefusal::EmptyLabelName));
        // Names are case-sensitive in DynamoDB: `Status` is not `status`.
        let fine = Labels::from([("Status".to_string(), String::new())]);
        assert_eq!(check_labels(&fine), Ok(()));
        assert_eq!(
            ItemRefusal::EmptyLabelName.rejection().code,
            "label_name_empty"
        );
    }

    #[test]
    fn a_row_label_named_like_one_of_its_columns_is_refused() {
        let custom = RowColumns {
            event_key: "order",
            effect_id: "charge",
            written_at: "charged_at",
        };
        for columns in [RowColumns::NEUTRAL, RowColumns::LEGACY, custom] {
            for name in columns.names() {
                let labels = Labels::from([(name.to_string(), "x".to_string())]);
                assert_eq!(
                    check_row_labels(&labels, &columns),
                    Err(ItemRefusal::ReservedLabel {
                        name: name.to_string()
                    }),
                    "{name} in {columns:?}"
                );
            }
        }
        // A custom layout's names are the integration's own on the record and the natural-key
        // item, and on a row laid out otherwise.
        let labels = Labels::from([("charged_at".to_string(), "x".to_string())]);
        assert_eq!(check_labels(&labels), Ok(()));
        assert_eq!(check_row_labels(&labels, &RowColumns::NEUTRAL), Ok(()));
    }

    #[test]
    fn a_row_is_sized_with_its_column_names() {
        let row = BusinessRow {
            source_event: "ab".into(),
            effect_id: "E-1".into(),
            labels: Labels::from([("who".to_string(), "me".to_string())]),
            written_at_ms: 1_749_441_600_000,
        };
        // source_event(12)+ab(2) + effect_id(9)+E-1(3) + written_at(10)+5 + who(3)+me(2)
        assert_eq!(row_item_bytes(&row, &RowColumns::NEUTRAL), 46);
        // The legacy names (7 and 9 bytes) instead: 3 bytes less.
        assert_eq!(row_item_bytes(&row, &RowColumns::LEGACY), 43);
    }
}
