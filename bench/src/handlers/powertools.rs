//! Powertools for AWS Lambda (Python) as a phase: `idempotent_function` with
//! `DynamoDBPersistenceLayer` in a Python child process, which reports its own
//! `time.process_time`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::common::{create_table, Env, Phase};
use crate::counter::{dynamo_client, CallRecorder};
use crate::workload::Delivery;

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// What the Python side prints.
#[derive(Debug, Deserialize)]
struct PythonOut {
    events: usize,
    wall_s: f64,
    cpu_s: f64,
    latencies_us: Vec<u64>,
    calls: BTreeMap<String, u64>,
    outcomes: BTreeMap<String, u64>,
}

pub(super) async fn run_powertools(
    env: &Env,
    tag: &str,
    warmup: &[Delivery],
    deliveries: &[Delivery],
) -> Result<Phase, String> {
    let client = dynamo_client(&env.moto, &CallRecorder::default()).await;
    let (table, bookings) = (format!("{tag}-pt-idem"), format!("{tag}-pt-book"));
    create_table(&client, &table, "id").await?;
    create_table(&client, &bookings, "source_event").await?;
    let warm_path = env.work_dir.join(format!("{tag}-warmup.json"));
    let path = env.work_dir.join(format!("{tag}-deliveries.json"));
    write_json(&warm_path, &warmup)?;
    write_json(&path, &deliveries)?;
    let python = env.python.clone();
    let mut cmd = Command::new(&python);
    cmd.arg(&env.handler_py)
        .args(["--endpoint", &env.moto, "--table", &table])
        .args(["--bookings", &bookings, "--terminal", &env.terminal])
        .arg("--deliveries")
        .arg(&path)
        .arg("--warmup")
        .arg(&warm_path)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "eu-west-1")
        .env("AWS_LAMBDA_FUNCTION_NAME", "powertools-bench");
    let output = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let _ = std::fs::remove_file(&warm_path);
    let _ = std::fs::remove_file(&path);
    if !output.status.success() {
        return Err(format!(
            "powertools handler failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let out: PythonOut = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "powertools handler output: {e}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok(Phase {
        events: out.events,
        wall_s: out.wall_s,
        cpu_s: out.cpu_s,
        latencies_us: out.latencies_us,
        calls: out.calls,
        outcomes: out.outcomes,
        slots_issued: 0,
    })
}
