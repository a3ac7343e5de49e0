//! The item codec: an [`IdempotencyRecord`], an [`InFlightEntry`] and a [`BusinessRow`] as
//! DynamoDB items and back, a line of a record's audit history ([`AuditEntry`], the list
//! attribute `history`), and the `InFlight` query's opaque cursor.
//!
//! Units, never mixed: `expires_at` is **epoch seconds**; `lease_until`, `created_at`,
//! `updated_at` and the business row's time ([`RowColumns::written_at`]) are **epoch
//! milliseconds**.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};

use super::schema::{
    EFFECT_ID, EFFECT_IDS, LEGACY_EFFECT_ID, LEGACY_EFFECT_IDS, ROUTE_PENDING_MARK,
};
use gate::record::{BusinessRow, IdempotencyRecord, Labels, RecordStatus, RowColumns};
use gate::store::audit::AuditEntry;
use gate::store::{InFlightEntry, StoreError};

/// The `ExclusiveStartKey` of the `InFlight` GSI (table key + index key), as the opaque cursor.
#[derive(Serialize, Deserialize)]
pub(crate) struct Cursor {
    pk: String,
    inflight_shard: String,
    /// Epoch ms, as DynamoDB's number string.
    created_at: String,
}

pub(crate) fn encode_cursor(key: &HashMap<String, AttributeValue>) -> Result<String, StoreError> {
    let cursor = Cursor {
        pk: req_s(key, "pk")?,
        inflight_shard: req_s(key, "inflight_shard")?,
        created_at: req_n(key, "created_at")?.to_string(),
    };
    serde_json::to_string(&cursor).map_err(|e| StoreError::corrupt(format!("cursor: {e}"), e))
}

pub(crate) fn decode_cursor(cursor: &str) -> Result<HashMap<String, AttributeValue>, StoreError> {
    let c: Cursor = serde_json::from_str(cursor)
        .map_err(|e| StoreError::corrupt(format!("invalid stale_in_flight cursor: {e}"), e))?;
    Ok(HashMap::from([
        ("pk".to_string(), s(&c.pk)),
        ("inflight_shard".to_string(), s(&c.inflight_shard)),
        ("created_at".to_string(), AttributeValue::N(c.created_at)),
    ]))
}

/// An idempotency record as a DynamoDB item. Optional fields that are `None` (and an empty
/// `effect_ids`: DynamoDB has no empty sets) are left out. `expires_at` is epoch **seconds**;
/// `lease_until`, `created_at`, `updated_at` are epoch **milliseconds**; `request` is binary.
pub fn record_to_item(record: &IdempotencyRecord) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        ("pk".to_string(), s(&record.pk)),
        ("event_key".to_string(), s(&record.event_key)),
        ("status".to_string(), s(record.status.as_str())),
        ("fingerprint".to_string(), s(&record.fingerprint)),
        ("op_key".to_string(), s(&record.op_key)),
        ("created_at".to_string(), num(record.created_at_ms)),
        ("updated_at".to_string(), num(record.updated_at_ms)),
        ("expires_at".to_string(), num(record.expires_at_s)),
    ]);
    insert_labels(&mut item, &record.labels);
    let optional = [
        ("lease_owner", record.lease_owner.as_deref().map(s)),
        ("lease_until", record.lease_until_ms.map(num)),
        (EFFECT_ID, record.effect_id.as_deref().map(s)),
        ("inflight_shard", record.inflight_shard.as_deref().map(s)),
        ("error", record.error.as_deref().map(s)),
        (
            "request",
            (!record.request.is_empty())
                .then(|| AttributeValue::B(Blob::new(record.request.clone()))),
        ),
        (
            "route_pending",
            record.route_pending.then(|| s(ROUTE_PENDING_MARK)),
        ),
        (
            EFFECT_IDS,
            (!record.effect_ids.is_empty())
                .then(|| AttributeValue::Ss(record.effect_ids.iter().cloned().collect())),
        ),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            item.insert(name.to_string(), value);
        }
    }
    item
}

/// Reads an idempotency record from a DynamoDB item (the inverse of [`record_to_item`]).
///
/// # Errors
/// [`StoreError::Corrupt`] when a required attribute is missing, an attribute has the wrong type,
/// a number is not an `i64`, or `status` is not one of `in_flight|committed|failed|manual`.
pub fn record_from_item(
    item: &HashMap<String, AttributeValue>,
) -> Result<IdempotencyRecord, StoreError> {
    let pk = req_s(item, "pk")?;
    let status_raw = req_s(item, "status")?;
    let status = RecordStatus::parse(&status_raw).ok_or_else(|| {
        StoreError::Corrupt(format!("{pk}: unknown status {status_raw:?}").into())
    })?;
    let request = match item.get("request") {
        Some(AttributeValue::B(blob)) => blob.as_ref().to_vec(),
        Some(_) => return Err(corrupt_type(item, "request", "B")),
        // Removed once the record leaves `in_flight` (data minimisation: it holds the PIN).
        None => Vec::new(),
    };
    // The ids under both names, the union is the record's ids:
    // an item in the legacy layout holds `slot_ids`,
    // and a later write may have added to `effect_ids` beside the legacy set.
    let mut effect_ids = BTreeSet::new();
    for name in [EFFECT_IDS, LEGACY_EFFECT_IDS] {
        match item.get(name) {
            Some(AttributeValue::Ss(ids)) => effect_ids.extend(ids.iter().cloned()),
            Some(_) => return Err(corrupt_type(item, name, "SS")),
            None => {}
        }
    }
    Ok(IdempotencyRecord {
        event_key: req_s(item, "event_key")?,
        status,
        fingerprint: req_s(item, "fingerprint")?,
        request,
        op_key: req_s(item, "op_key")?,
        lease_owner: opt_s(item, "lease_owner")?,
        lease_until_ms: opt_n(item, "lease_until")?,
        created_at_ms: req_n(item, "created_at")?,
        updated_at_ms: req_n(item, "updated_at")?,
        expires_at_s: req_n(item, "expires_at")?,
        effect_id: match opt_s(item, EFFECT_ID)? {
            Some(id) => Some(id),
            None => opt_s(item, LEGACY_EFFECT_ID)?,
        },
        effect_ids,
        inflight_shard: opt_s(item, "inflight_shard")?,
        error: opt_s(item, "error")?,
        route_pending: match item.get("route_pending") {
            None => false,
            Some(AttributeValue::S(_)) => true,
            Some(_) => return Err(corrupt_type(item, "route_pending", "S")),
        },
        labels: labels_of(item, &[]),
        pk,
    })
}

/// An item of the `InFlight` index (its keys plus [`INFLIGHT_PROJECTED_ATTRIBUTES`]) as an
/// [`InFlightEntry`]. A full table item reads as well.
///
/// # Errors
/// [`StoreError::Corrupt`] when an attribute is missing or of the wrong type.
pub(crate) fn in_flight_entry_from_item(
    item: &HashMap<String, AttributeValue>,
) -> Result<InFlightEntry, StoreError> {
    let pk = req_s(item, "pk")?;
    let status_raw = req_s(item, "status")?;
    let status = RecordStatus::parse(&status_raw).ok_or_else(|| {
        StoreError::Corrupt(format!("{pk}: unknown status {status_raw:?}").into())
    })?;
    Ok(InFlightEntry {
        event_key: req_s(item, "event_key")?,
        status,
        lease_owner: opt_s(item, "lease_owner")?,
        lease_until_ms: opt_n(item, "lease_until")?,
        created_at_ms: req_n(item, "created_at")?,
        expires_at_s: req_n(item, "expires_at")?,
        pk,
    })
}

/// A business row as a DynamoDB item laid out with `columns` (the integration's names): the
/// event key (S) under [`RowColumns::event_key`], the effect id (S) under
/// [`RowColumns::effect_id`], the time (N, epoch **milliseconds**) under
/// [`RowColumns::written_at`], and one string attribute per label.
pub fn row_to_item(row: &BusinessRow, columns: &RowColumns) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        (columns.event_key.to_string(), s(&row.source_event)),
        (columns.effect_id.to_string(), s(&row.effect_id)),
        (columns.written_at.to_string(), num(row.written_at_ms)),
    ]);
    insert_labels(&mut item, &row.labels);
    item
}

/// Reads a business row from a DynamoDB item laid out with `columns` (the inverse of
/// [`row_to_item`]). A row in the legacy layout ([`RowColumns::LEGACY`]: the effect id under
/// `slot_id`, the time under `booked_at`) reads the same: when the item lacks the configured
/// effect id (a string) or time (a number) while it has the legacy ones, the whole row is read
/// under the legacy names, and an attribute of a configured name is one of its labels. One
/// decision for the item, from both columns (`row_layout`): a label of the legacy row named like
/// the configured effect id stays a label. Every other string attribute (none of the columns
/// read nor of [`RECORD_ATTRIBUTES`], which hold the legacy names) is a label.
///
/// # Errors
/// [`StoreError::Corrupt`] when an attribute is missing or has the wrong type.
pub fn row_from_item(
    item: &HashMap<String, AttributeValue>,
    columns: &RowColumns,
) -> Result<BusinessRow, StoreError> {
    let layout = row_layout(item, columns);
    Ok(BusinessRow {
        source_event: req_s(item, layout.event_key)?,
        effect_id: req_s(item, layout.effect_id)?,
        written_at_ms: req_n(item, layout.written_at)?,
        labels: labels_of(item, &layout.names()),
    })
}

/// The names a business row's `item` is laid out with: `columns`, or, for a row in the legacy
/// layout (not both a string under `columns.effect_id` and a number under `columns.written_at`,
/// but a string under the legacy effect id and a number under the legacy time),
/// [`RowColumns::LEGACY`] with `columns`' key (the table's key is never renamed). Both columns
/// are looked at, so an integration that keeps one legacy name (`{charge_id, booked_at}`) still
/// reads its older rows.
fn row_layout(item: &HashMap<String, AttributeValue>, columns: &RowColumns) -> RowColumns {
    let legacy = RowColumns::LEGACY;
    let laid_out = |c: &RowColumns| {
        matches!(item.get(c.effect_id), Some(AttributeValue::S(_)))
            && matches!(item.get(c.written_at), Some(AttributeValue::N(_)))
    };
    let older = !laid_out(columns) && laid_out(&legacy);
    if older {
        RowColumns {
            event_key: columns.event_key,
            ..legacy
        }
    } else {
        *columns
    }
}

/// The effect id of a business row's item laid out with `columns` (or, for a row in the legacy
/// layout, the legacy names: [`row_layout`]), if it holds one as a string.
pub(crate) fn row_effect_id(
    item: &HashMap<String, AttributeValue>,
    columns: &RowColumns,
) -> Option<String> {
    item.get(row_layout(item, columns).effect_id)
        .and_then(|v| v.as_s().ok())
        .cloned()
}

/// The attributes of the store's own items; every other string attribute is a label
/// ([`gate::record::Labels`]). One list for every adapter: [`gate::store::limits::RESERVED_NAMES`].
pub use gate::store::limits::RESERVED_NAMES as RECORD_ATTRIBUTES;

/// [`record_to_item`] of a record the store may write: refused ([`StoreError::Refused`]) when a
/// label is named like a store attribute or the item is over DynamoDB's item limit, before any
/// request (never a label silently dropped).
///
/// # Errors
/// [`StoreError::Refused`].
pub(crate) fn checked_record_item(
    record: &IdempotencyRecord,
) -> Result<HashMap<String, AttributeValue>, StoreError> {
    gate::store::limits::check_record(record).map_err(StoreError::Refused)?;
    Ok(record_to_item(record))
}

/// Writes each label as a string attribute of its name, never over one of the item's own (the
/// checked writes refuse such a label first: [`checked_record_item`], `gate::store::limits::check_row`).
fn insert_labels(item: &mut HashMap<String, AttributeValue>, labels: &Labels) {
    for (name, value) in labels {
        if !RECORD_ATTRIBUTES.contains(&name.as_str()) {
            item.entry(name.clone()).or_insert_with(|| s(value));
        }
    }
}

/// The labels of an item: its string attributes but the `own` ones and [`RECORD_ATTRIBUTES`].
fn labels_of(item: &HashMap<String, AttributeValue>, own: &[&str]) -> Labels {
    item.iter()
        .filter(|(name, _)| {
            !own.contains(&name.as_str()) && !RECORD_ATTRIBUTES.contains(&name.as_str())
        })
        .filter_map(|(name, value)| value.as_s().ok().map(|v| (name.clone(), v.clone())))
        .collect()
}

/// One line of a record's audit history (the list attribute `history`) as a DynamoDB map
/// `{at: N (epoch ms), who: S, action: S, detail: S}`.
pub(crate) fn audit_entry_to_value(entry: &AuditEntry) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        ("at".to_string(), AttributeValue::N(entry.at_ms.to_string())),
        ("who".to_string(), AttributeValue::S(entry.who.clone())),
        (
            "action".to_string(),
            AttributeValue::S(entry.action.clone()),
        ),
        (
            "detail".to_string(),
            AttributeValue::S(entry.detail.clone()),
        ),
    ]))
}

/// A line of the `history` list read back.
///
/// # Errors
/// [`StoreError::Corrupt`] when it is not such a map.
pub(crate) fn audit_entry_from_value(value: &AttributeValue) -> Result<AuditEntry, StoreError> {
    let bad = || StoreError::Corrupt("history: an entry is not {at, who, action, detail}".into());
    let m = value.as_m().map_err(|_| bad())?;
    let text = |k: &str| {
        m.get(k)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .ok_or_else(bad)
    };
    Ok(AuditEntry {
        at_ms: m
            .get("at")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?,
        who: text("who")?,
        action: text("action")?,
        detail: text("detail")?,
    })
}

pub(crate) fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

pub(crate) fn num(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn item_name(item: &HashMap<String, AttributeValue>) -> String {
    ["pk", "source_event"]
        .iter()
        .find_map(|k| item.get(*k).and_then(|v| v.as_s().ok()).cloned())
        .unwrap_or_else(|| "item".to_string())
}

pub(crate) fn missing(item: &HashMap<String, AttributeValue>, name: &str) -> StoreError {
    StoreError::Corrupt(format!("{}: attribute {name} missing", item_name(item)).into())
}

pub(crate) fn corrupt_type(
    item: &HashMap<String, AttributeValue>,
    name: &str,
    want: &str,
) -> StoreError {
    StoreError::Corrupt(
        format!(
            "{}: attribute {name} is not of type {want}",
            item_name(item)
        )
        .into(),
    )
}

pub(crate) fn opt_s(
    item: &HashMap<String, AttributeValue>,
    name: &str,
) -> Result<Option<String>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
        Some(_) => Err(corrupt_type(item, name, "S")),
    }
}

pub(crate) fn req_s(
    item: &HashMap<String, AttributeValue>,
    name: &str,
) -> Result<String, StoreError> {
    opt_s(item, name)?.ok_or_else(|| missing(item, name))
}

pub(crate) fn opt_n(
    item: &HashMap<String, AttributeValue>,
    name: &str,
) -> Result<Option<i64>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(v)) => v.parse::<i64>().map(Some).map_err(|_| {
            StoreError::Corrupt(
                format!(
                    "{}: attribute {name} = {v:?} is not an integer",
                    item_name(item)
                )
                .into(),
            )
        }),
        Some(_) => Err(corrupt_type(item, name, "N")),
    }
}

pub(crate) fn req_n(item: &HashMap<String, AttributeValue>, name: &str) -> Result<i64, StoreError> {
    opt_n(item, name)?.ok_or_else(|| missing(item, name))
}

#[cfg(test)]
mod tests;
