//! The `InFlight` index's cursor for the stores that write their own
//! ([`InFlightIndex::stale_in_flight`](crate::store::InFlightIndex)): a position in the index's
//! order, the last entry's `created_at` (epoch ms) and `pk`, as `"{created_at_ms}:{pk}"`. A
//! position, not a record: the next page starts after it whether or not that record is still in
//! the index (the reconciler commits a page's records before it asks for the next), as DynamoDB's
//! `ExclusiveStartKey` does. DynamoDB's own cursor is its `LastEvaluatedKey` (`dynamo::codec`).

use crate::store::StoreError;

/// The cursor after the entry created at `created_at_ms` (epoch ms) with key `pk`.
pub fn encode_cursor(created_at_ms: i64, pk: &str) -> String {
    format!("{created_at_ms}:{pk}")
}

/// Reads a cursor of [`encode_cursor`] as `(created_at_ms, pk)`; [`StoreError::Corrupt`] for
/// anything else.
pub fn decode_cursor(cursor: &str) -> Result<(i64, String), StoreError> {
    let (created, pk) = cursor
        .split_once(':')
        .ok_or_else(|| StoreError::Corrupt("cursor: no ':'".into()))?;
    let created = created
        .parse::<i64>()
        .map_err(|e| StoreError::corrupt(format!("cursor: {e}"), e))?;
    Ok((created, pk.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_with_colons_in_the_key() {
        let c = encode_cursor(1_749_441_600_000, "ect#ab:cd");
        assert_eq!(
            decode_cursor(&c).unwrap(),
            (1_749_441_600_000, "ect#ab:cd".to_string())
        );
        assert!(matches!(decode_cursor("nope"), Err(StoreError::Corrupt(_))));
        assert!(matches!(decode_cursor("x:pk"), Err(StoreError::Corrupt(_))));
    }
}
