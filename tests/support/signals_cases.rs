//! The metrics function's case, on any store (DynamoDB in `tests/signals.rs`, PostgreSQL in the
//! same file): stranded records and a key with two effect ids written through the store's write
//! path, the store signals read through the metrics function's read side and published to
//! CloudWatch (moto), and read back.

use std::sync::Arc;

use aws_sdk_cloudwatch::types::{Dimension, Statistic};
use gate::clock::ManualClock;
use gate::signals::{collect_store_signals, metric, StoreSignals, DIMENSION, NAMESPACE};
use gate::store::{InFlightIndex, Store};

use crate::reconciler_cases::{World, T0};
use crate::sdk_config;

/// Three stranded records (20, 12 and 1 min old) and one key with two effect ids, written to
/// `store`; the signals read through `index` (the metrics function's read side of the same
/// tables) are 1200 s, 2 and 1, and published under `Integration = integration`.
pub async fn store_signals_are_read_and_published(
    store: Arc<dyn Store>,
    index: &dyn InFlightIndex,
    integration: &str,
) {
    let w = World::new(store.clone(), integration).await;
    // Three stranded records: 20 min, 12 min and 1 min old; one key with two slot ids.
    let old = w
        .strand(&World::body("S-1", "CSQU3054383"), "inv-a", T0 + 30_000)
        .await;
    w.clock.advance_ms(8 * 60_000);
    w.strand(&World::body("S-2", "MWCU6059784"), "inv-b", T0 + 30_000)
        .await;
    w.clock.advance_ms(11 * 60_000);
    w.strand(&World::body("S-3", "ABCD1234560"), "inv-c", T0 + 30_000)
        .await;
    w.clock.advance_ms(60_000);
    assert_eq!(
        store
            .record_effect_id(
                &old.pk,
                "SLOT-A",
                gate::clock::Clock::now_ms(w.clock.as_ref())
            )
            .await
            .unwrap()
            .map(|r| r.effect_ids.len()),
        Some(1)
    );
    assert_eq!(
        store
            .record_effect_id(
                &old.pk,
                "SLOT-B",
                gate::clock::Clock::now_ms(w.clock.as_ref())
            )
            .await
            .unwrap()
            .map(|r| r.effect_ids.len()),
        Some(2)
    );

    let now = T0 + 20 * 60_000;
    let expected = StoreSignals {
        oldest_in_flight_age_s: 20 * 60,
        in_flight_older_than_10m: 2,
        multi_effect_keys: 1,
    };
    assert_eq!(collect_store_signals(index, now).await.unwrap(), expected);

    let config = sdk_config().await;
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&config);
    let clock = ManualClock::new(now);
    let published = gate_lambda::handle_metrics(index, &cloudwatch, integration, &clock)
        .await
        .unwrap();
    assert_eq!(published, expected);

    let dimension = Dimension::builder()
        .name(DIMENSION)
        .value(integration)
        .build();
    for (name, value) in [
        (metric::OLDEST_IN_FLIGHT_AGE, 1200.0),
        (metric::IN_FLIGHT_OLDER_THAN_10M, 2.0),
        (metric::MULTI_EFFECT_KEYS, 1.0),
    ] {
        let stats = cloudwatch
            .get_metric_statistics()
            .namespace(NAMESPACE)
            .metric_name(name)
            .dimensions(dimension.clone())
            .start_time(aws_sdk_cloudwatch::primitives::DateTime::from_millis(
                now - 60_000,
            ))
            .end_time(aws_sdk_cloudwatch::primitives::DateTime::from_millis(
                now + 60_000,
            ))
            .period(60)
            .statistics(Statistic::Maximum)
            .send()
            .await
            .unwrap();
        let points = stats.datapoints();
        assert_eq!(points.len(), 1, "{name}: {points:?}");
        assert_eq!(points[0].maximum(), Some(value), "{name}");
    }
}
