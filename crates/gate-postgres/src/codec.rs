//! Rows to records and back: the columns of `idempotency`, `business_rows` and the `in_flight`
//! view (`migrations/0001_init.sql`, columns renamed by `0002_neutral_names.sql`) as [`IdempotencyRecord`], [`BusinessRow`] and
//! [`InFlightEntry`].

use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use gate::record::{BusinessRow, IdempotencyRecord, Labels, RecordStatus};
use gate::store::{InFlightEntry, StoreError};

/// The record's columns in the order [`RecordParams::params`] binds them (`$1`..`$17`).
pub(crate) const RECORD_COLUMNS: &str = "pk, event_key, status, fingerprint, request, op_key, \
     lease_owner, lease_until_ms, created_at_ms, updated_at_ms, expires_at_s, effect_id, effect_ids, \
     inflight_shard, error, route_pending, labels";

/// The number of [`RECORD_COLUMNS`].
pub(crate) const RECORD_COLUMN_COUNT: usize = 17;

/// The columns of the `in_flight` view an [`InFlightEntry`] is read from.
pub(crate) const IN_FLIGHT_COLUMNS: &str =
    "pk, event_key, status, lease_owner, lease_until_ms, created_at_ms, expires_at_s";

/// The business row's columns (`$1`..`$4` of its insert).
pub(crate) const BUSINESS_ROW_COLUMNS: &str = "source_event, effect_id, labels, booked_at_ms";

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}").into())
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    column: &str,
) -> Result<T, StoreError> {
    row.try_get(column)
        .map_err(|e| StoreError::corrupt(format!("column {column}: {e}"), e))
}

fn status(row: &Row) -> Result<RecordStatus, StoreError> {
    let s: String = get(row, "status")?;
    RecordStatus::parse(&s).ok_or_else(|| corrupt("column status", format!("unknown {s:?}")))
}

/// A `jsonb` object of strings as [`Labels`].
pub(crate) fn labels_from_json(value: Value) -> Result<Labels, StoreError> {
    let Value::Object(map) = value else {
        return Err(corrupt("column labels", "not a JSON object"));
    };
    map.into_iter()
        .map(|(name, v)| match v {
            Value::String(s) => Ok((name, s)),
            _ => Err(corrupt(
                "column labels",
                format!("label {name} is not a string"),
            )),
        })
        .collect()
}

/// [`Labels`] as a `jsonb` object of strings.
pub(crate) fn labels_to_json(labels: &Labels) -> Value {
    Value::Object(
        labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// Reads a record from a row holding [`RECORD_COLUMNS`] (by name). `None` when `pk` is NULL
/// (the empty side of an outer join: no record).
pub(crate) fn record_from_row(row: &Row) -> Result<Option<IdempotencyRecord>, StoreError> {
    let Some(pk) = get::<Option<String>>(row, "pk")? else {
        return Ok(None);
    };
    let effect_ids: Vec<String> = get(row, "effect_ids")?;
    Ok(Some(IdempotencyRecord {
        pk,
        event_key: get(row, "event_key")?,
        status: status(row)?,
        fingerprint: get(row, "fingerprint")?,
        request: get(row, "request")?,
        op_key: get(row, "op_key")?,
        lease_owner: get(row, "lease_owner")?,
        lease_until_ms: get(row, "lease_until_ms")?,
        created_at_ms: get(row, "created_at_ms")?,
        updated_at_ms: get(row, "updated_at_ms")?,
        expires_at_s: get(row, "expires_at_s")?,
        effect_id: get(row, "effect_id")?,
        effect_ids: effect_ids.into_iter().collect(),
        inflight_shard: get(row, "inflight_shard")?,
        error: get(row, "error")?,
        route_pending: get(row, "route_pending")?,
        labels: labels_from_json(get(row, "labels")?)?,
    }))
}

/// Reads an [`InFlightEntry`] from a row of the `in_flight` view ([`IN_FLIGHT_COLUMNS`]).
pub(crate) fn in_flight_entry_from_row(row: &Row) -> Result<InFlightEntry, StoreError> {
    Ok(InFlightEntry {
        pk: get(row, "pk")?,
        event_key: get(row, "event_key")?,
        status: status(row)?,
        lease_owner: get(row, "lease_owner")?,
        lease_until_ms: get(row, "lease_until_ms")?,
        created_at_ms: get(row, "created_at_ms")?,
        expires_at_s: get(row, "expires_at_s")?,
    })
}

/// Reads a business row ([`BUSINESS_ROW_COLUMNS`]).
pub(crate) fn business_row_from_row(row: &Row) -> Result<BusinessRow, StoreError> {
    Ok(BusinessRow {
        source_event: get(row, "source_event")?,
        effect_id: get(row, "effect_id")?,
        labels: labels_from_json(get(row, "labels")?)?,
        written_at_ms: get(row, "booked_at_ms")?,
    })
}

/// A record's values, owned, to bind as `$1`..`$17` in [`RECORD_COLUMNS`] order.
pub(crate) struct RecordParams {
    status: &'static str,
    effect_ids: Vec<String>,
    labels: Value,
}

impl RecordParams {
    pub(crate) fn new(record: &IdempotencyRecord) -> Self {
        Self {
            status: record.status.as_str(),
            effect_ids: record.effect_ids.iter().cloned().collect(),
            labels: labels_to_json(&record.labels),
        }
    }

    /// The parameters, borrowing the rest from `record`.
    pub(crate) fn params<'a>(
        &'a self,
        record: &'a IdempotencyRecord,
    ) -> [&'a (dyn ToSql + Sync); RECORD_COLUMN_COUNT] {
        [
            &record.pk,
            &record.event_key,
            &self.status,
            &record.fingerprint,
            &record.request,
            &record.op_key,
            &record.lease_owner,
            &record.lease_until_ms,
            &record.created_at_ms,
            &record.updated_at_ms,
            &record.expires_at_s,
            &record.effect_id,
            &self.effect_ids,
            &record.inflight_shard,
            &record.error,
            &record.route_pending,
            &self.labels,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_refuse_non_strings() {
        let labels = Labels::from([("container".to_string(), "CSQU3054383".to_string())]);
        assert_eq!(labels_from_json(labels_to_json(&labels)).unwrap(), labels);
        assert!(labels_from_json(serde_json::json!({"n": 1})).is_err());
        assert!(labels_from_json(serde_json::json!(["x"])).is_err());
    }
}
