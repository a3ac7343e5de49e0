//! The floor: the DynamoDB requests and the terminal call the gate sends per delivery (reserve,
//! the natural key's guard, claim, commit), through the gate's own store and integration, in a
//! bare loop.

use std::time::Instant;

use gate::clock::{Clock, SystemClock};
use gate::consumer::Gate;

use super::common::{invocation, own, Env, Kind, Phase};
use super::gated::build_gate_with;
use crate::counter::{dynamo_client_with, CallRecorder, ClientSettings};
use crate::stats;
use crate::workload::Delivery;

/// The floor's warm-up (each of `warmup` run through [`floor_one`]) and the records of
/// `deliveries` it will run, measured, afterwards.
///
/// # Errors
/// When a delivery does not parse as an event of the gate's integration.
pub(crate) async fn prepare_floor(
    gate: &Gate,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Vec<gate::record::IdempotencyRecord>, String> {
    for r in floor_records(gate, warmup)? {
        floor_one(gate, &r).await;
    }
    floor_records(gate, deliveries)
}

/// The floor's inputs of one delivery: its record (built as the gate builds it), prepared
/// outside the measured loop.
fn floor_records(
    gate: &Gate,
    deliveries: &[Delivery],
) -> Result<Vec<gate::record::IdempotencyRecord>, String> {
    let now = SystemClock.now_ms();
    let terminals = vec!["ECT-DELTA".to_string()];
    deliveries
        .iter()
        .map(|d| {
            let n = truck_slot::notification::parse_notification(&d.body, now, &terminals)
                .map_err(|e| format!("floor: {e:?}"))?;
            let event = truck_slot::integration::event(&n).map_err(|e| e.to_string())?;
            let keys = truck_slot::derive_keys(&n).map_err(|e| e.to_string())?;
            Ok(gate
                .config
                .new_record(&event, &keys, &invocation(&d.message_id), now))
        })
        .collect()
}

/// One delivery of the floor: reserve, the natural key's guard, claim, commit through the gate's
/// own store and integration, nothing else.
pub(crate) async fn floor_one(
    gate: &Gate,
    record: &gate::record::IdempotencyRecord,
) -> &'static str {
    use gate::effect::CallOutcome;
    use gate::store::Reservation;
    let now = SystemClock.now_ms();
    match gate.store.reserve(record, now).await {
        Ok(Reservation::Reserved) => {}
        Ok(Reservation::Conflict(_)) => return "duplicate",
        Err(_) => return "failed",
    }
    if let Some(key) = gate.integration.natural_key(record, now) {
        match gate.store.guard(record, &key, now).await {
            Ok(gate::store::GuardOutcome::Held) => {}
            Ok(gate::store::GuardOutcome::Collision { .. }) => return "collision",
            Err(_) => return "failed",
        }
    }
    let slot = match gate.integration.call(&gate::Held::for_tests(record)).await {
        CallOutcome::Done(c) => c.effect_id,
        _ => return "failed",
    };
    let owner = record.lease_owner.as_deref().unwrap_or_default();
    let row = gate.integration.business_row(record, &slot, now);
    match gate.store.commit(&record.pk, owner, &slot, &row, now).await {
        Ok(_) => "committed",
        Err(_) => "failed",
    }
}

pub(super) async fn run_floor(
    kind: Kind,
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let counter = CallRecorder::default();
    let settings = match kind {
        Kind::FloorNoStall => ClientSettings::NoStalledStreamProtection,
        Kind::FloorNoReuse => ClientSettings::NoIdleConnections,
        _ => ClientSettings::AsTheFunctions,
    };
    let client = dynamo_client_with(&env.moto, &counter, settings).await;
    let tag = format!("{tag}-{}", kind.name());
    let gate = build_gate_with(client, env, &tag, 1).await?;
    // Its own notification ids, one prefix per variant: the gate's run of the same workload
    // (and each other floor variant's) would otherwise send the same operation keys, and the
    // terminal would answer the claims as replays (without its latency, and no slot issued).
    let prefix = match kind {
        Kind::FloorNoStall => "\"PCN-",
        Kind::FloorNoReuse => "\"PCR-",
        Kind::FloorCurrentThread => "\"PCT-",
        _ => "\"PCF-",
    };
    let (warmup, deliveries) = (own(warmup, prefix), own(deliveries, prefix));
    let records = prepare_floor(&gate, &warmup, &deliveries).await?;
    counter.clear();
    let mut phase = Phase {
        events: deliveries.len(),
        ..Phase::default()
    };
    let (cpu0, wall0) = (stats::cpu_time(), Instant::now());
    for r in &records {
        let t = Instant::now();
        let outcome = floor_one(&gate, r).await;
        phase.latencies_us.push(t.elapsed().as_micros() as u64);
        *phase.outcomes.entry(outcome.to_string()).or_default() += 1;
    }
    phase.wall_s = wall0.elapsed().as_secs_f64();
    phase.cpu_s = (stats::cpu_time() - cpu0).as_secs_f64();
    phase.calls = counter.counts();
    Ok(phase)
}
