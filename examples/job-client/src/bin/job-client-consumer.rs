//! The job client's SQS consumer: the gate's Lambda wiring around it.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), gate_lambda::Error> {
    gate_lambda::run_consumer(job_client::lambda::build).await
}
