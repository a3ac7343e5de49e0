//! The job client's scheduled reconciler: the gate's Lambda wiring around it.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), gate_lambda::Error> {
    gate_lambda::run_reconciler(job_client::lambda::build).await
}
