//! Two event keys guarding one natural key at once, at the store: exactly one holds it.

use super::*;

// ---- Two guards at once, at the store -----------------------------------------------------

/// Eight natural keys, each guarded at once by two event keys: exactly one holds each, and the
/// other is told that one (never both `Held`, never a collision with itself).
async fn two_guards_at_once(store: Arc<dyn IdempotencyStore>, prefix: &str) {
    let pairs: Vec<(IdempotencyRecord, IdempotencyRecord)> = (0..8)
        .map(|i| {
            let window = (
                format!("2025-06-09T0{i}:00:00Z"),
                format!("2025-06-09T0{i}:30:00Z"),
            );
            let mut x = sample_record(prefix, &format!("race-x-{i}"), "owner-x", NOW_MS);
            let mut y = sample_record(prefix, &format!("race-y-{i}"), "owner-y", NOW_MS);
            x.labels = gate_testkit::conformance::sample_labels(&window.0, &window.1);
            y.labels = x.labels.clone();
            (x, y)
        })
        .collect();
    for (x, y) in &pairs {
        for r in [x, y] {
            assert_eq!(
                store.reserve(r, NOW_MS).await.expect("reserve"),
                Reservation::Reserved
            );
        }
    }
    let guard = |r: &IdempotencyRecord| {
        let store = store.clone();
        let r = r.clone();
        async move {
            store
                .guard(&r, &sample_natural_key(&r, NOW_MS), NOW_MS)
                .await
                .expect("guard")
        }
    };
    let results = futures::future::join_all(
        pairs
            .iter()
            .map(|(x, y)| futures::future::join(guard(x), guard(y))),
    )
    .await;
    for ((x, y), (gx, gy)) in pairs.iter().zip(results) {
        let held_by_x = GuardOutcome::Collision {
            other_event_key: x.event_key.clone(),
        };
        let held_by_y = GuardOutcome::Collision {
            other_event_key: y.event_key.clone(),
        };
        assert!(
            (gx == GuardOutcome::Held && gy == held_by_x)
                || (gy == GuardOutcome::Held && gx == held_by_y),
            "{gx:?} {gy:?}"
        );
    }
}

#[tokio::test]
async fn two_guards_at_once_on_dynamodb() {
    let (_proxy, endpoint) = FaultProxy::plain(&moto_endpoint()).await;
    let store = store_via(&endpoint, "bg-race-ddb").await;
    two_guards_at_once(Arc::new(store), &unique("bgrace")).await;
}

#[tokio::test]
async fn two_guards_at_once_on_postgres() {
    let (_proxy, store) = proxied_postgres("race").await;
    two_guards_at_once(Arc::new(store), "bgrace").await;
}
