//! The SQS consumer: the gate's Lambda wiring around the payments integration.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), gate::lambda::Error> {
    gate::lambda::run_consumer(payments::lambda::build).await
}
