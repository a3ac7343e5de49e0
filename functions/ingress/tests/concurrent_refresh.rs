//! Several requests at once in one environment (Lambda Managed Instances run several invocations
//! in one process): a burst of requests no known secret verifies reads the secrets again once,
//! not once per request in flight. The read is claimed before it is sent
//! (`ingress::handler::Secrets`), so the others answer with the set they have.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use gate::clock::ManualClock;
use ingress::event::SignedWebhook;
use ingress::handler::{
    Ingress, NotificationQueue, QueueError, SecretSource, SecretSourceError, Secrets,
    SECRETS_REFRESH_INTERVAL_MS,
};
use ingress::signature::{SecretSet, WebhookSecret};

/// 2027-01-15T08:00:00Z.
const NOW_S: i64 = 1_800_000_000;

const BODY: &str = r#"{"notificationId":"PCS-CIS-20270114-000042","equipment_number":"CSQU3054383","preferred_window":{"start":"2027-01-16T08:00:00Z","end":"2027-01-16T10:00:00Z"},"terminal":"ECT-DELTA","pin":"RLS-104233"}"#;

/// A queue that takes everything.
struct Accepting;

#[async_trait]
impl NotificationQueue for Accepting {
    async fn send(&self, _body: &str, _webhook_id: &str) -> Result<String, QueueError> {
        Ok("m-1".into())
    }
}

/// A source that counts its reads and yields while it reads (as a call over the network does).
struct SlowSource {
    set: SecretSet,
    reads: AtomicUsize,
}

#[async_trait]
impl SecretSource for SlowSource {
    async fn fetch(&self) -> Result<SecretSet, SecretSourceError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        Ok(self.set.clone())
    }
}

fn secret(byte: u8) -> WebhookSecret {
    WebhookSecret::from_bytes(vec![byte; 32]).unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_unverified_requests_reads_the_secrets_once() {
    let known = secret(1);
    let source = Arc::new(SlowSource {
        set: SecretSet::new(vec![known.clone()]).unwrap(),
        reads: AtomicUsize::new(0),
    });
    // Read long enough ago that a failed verification reads again.
    let now_ms = NOW_S * 1000 + 500;
    let ingress = Arc::new(Ingress {
        secrets: Secrets::refreshable(
            SecretSet::new(vec![known]).unwrap(),
            now_ms - SECRETS_REFRESH_INTERVAL_MS,
            source.clone(),
        ),
        queue: Arc::new(Accepting),
        clock: Arc::new(ManualClock::new(now_ms)),
    });
    let mut requests = tokio::task::JoinSet::new();
    for n in 0..8 {
        let ingress = ingress.clone();
        let event = SignedWebhook::sign(&[secret(9)], &format!("msg_{n}"), NOW_S, BODY)
            .http_api_event(NOW_S * 1000, &format!("req-{n}"));
        requests.spawn(async move { ingress.respond_event(event).await.status_code });
    }
    let statuses = requests.join_all().await;
    assert_eq!(statuses, [401; 8]);
    assert_eq!(
        source.reads.load(Ordering::SeqCst),
        1,
        "one read for the burst"
    );
}
