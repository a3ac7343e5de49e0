//! The handlers, each run over the same deliveries as one phase so that what each measures stays
//! comparable: the naive handler and the gate in this process (CPU from `getrusage`), the floor
//! (the gate's requests in a bare loop), and Powertools in a Python child process.

mod common;
mod floor;
mod gated;
mod naive;
mod powertools;

pub use common::{create_table, invocation, slots_issued, sqs_event, Env, Kind, Phase};
pub(crate) use common::{outcome_name, own};
pub(crate) use floor::{floor_one, prepare_floor};
pub use gated::build_gate;
pub(crate) use gated::warm_gate;
pub use naive::Naive;

use floor::run_floor;
use gated::run_gate;
use naive::run_naive;
use powertools::run_powertools;

use crate::workload::Delivery;

/// Runs one handler over `warmup` (not measured) and then `deliveries`, one delivery per batch.
///
/// # Errors
/// When the handler's tables cannot be created or the Python side fails.
pub async fn run_phase(
    kind: Kind,
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let http = reqwest::Client::new();
    let slots_before = slots_issued(&http, &env.terminal).await;
    let mut phase = match kind {
        Kind::Naive => run_naive(env, tag, warmup, deliveries).await?,
        Kind::Gate => run_gate(env, tag, warmup, deliveries).await?,
        Kind::Powertools => run_powertools(env, tag, warmup, deliveries).await?,
        Kind::Floor | Kind::FloorNoStall | Kind::FloorNoReuse => {
            run_floor(kind, env, tag, warmup, deliveries).await?
        }
        Kind::GateCurrentThread | Kind::FloorCurrentThread => {
            on_current_thread(kind, env, tag, warmup, deliveries).await?
        }
    };
    // Every warm-up delivery is a new event: one slot each, whichever the handler.
    phase.slots_issued = slots_issued(&http, &env.terminal)
        .await
        .saturating_sub(slots_before + warmup.len());
    Ok(phase)
}

/// Runs the phase of `kind` ([`Kind::GateCurrentThread`] or [`Kind::FloorCurrentThread`]) on a
/// current-thread runtime of its own, on a thread of its own, as the functions run: its clients
/// are built in that runtime (their connections' tasks live there), and the harness's
/// multi-thread runtime has no work while it waits. The process's CPU (`getrusage`) still counts
/// every thread, so the two runtimes are measured alike.
///
/// # Errors
/// When the runtime cannot be built, or the phase's own errors.
async fn on_current_thread(
    kind: Kind,
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let (env, tag) = (env.clone(), tag.to_string());
    // The gate's own notification ids, as the floor's (`run_floor`): the multi-thread gate's
    // phase sent the same operation keys, and the terminal would answer them as replays.
    let (warmup, deliveries) = if kind == Kind::GateCurrentThread {
        (own(warmup, "\"PCG-"), own(deliveries, "\"PCG-"))
    } else {
        (warmup.to_vec(), deliveries.to_vec())
    };
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("current-thread runtime: {e}"))?;
        runtime.block_on(async {
            if kind == Kind::GateCurrentThread {
                run_gate(&env, &tag, &warmup, &deliveries).await
            } else {
                run_floor(kind, &env, &tag, &warmup, &deliveries).await
            }
        })
    })
    .await
    .map_err(|e| e.to_string())?
}
