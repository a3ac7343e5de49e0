//! The signature check's CPU per request (`cargo bench -p ingress --bench verify`): a body of the
//! gate's sample size signed with one secret, verified against one and against two active
//! secrets (a rotation, the match on the second).

use criterion::{criterion_group, criterion_main, Criterion};
use ingress::signature::{verify, SecretSet, SignatureHeaders, WebhookSecret};

const BODY: &str = r#"{"notificationId":"PCS-CIS-20261201-000007","equipment_number":"TGHU9876542","preferred_window":{"start":"2027-06-02T14:00:00Z","end":"2027-06-02T16:00:00Z"},"terminal":"ECT-DELTA","pin":"RLS-220871","gross_mass_kg":21800}"#;

fn bench(c: &mut Criterion) {
    let (old, new) = (
        WebhookSecret::from_bytes(vec![1; 32]).unwrap(),
        WebhookSecret::from_bytes(vec![2; 32]).unwrap(),
    );
    let now = 1_800_000_000;
    let ts = now.to_string();
    let signature = new.sign("msg_2ZqK8vXbT4nLw9JcRfA1yHuE3sD", now, BODY.as_bytes());
    let headers = SignatureHeaders {
        id: Some("msg_2ZqK8vXbT4nLw9JcRfA1yHuE3sD"),
        timestamp: Some(&ts),
        signature: Some(&signature),
    };
    let one = SecretSet::new(vec![new.clone()]).unwrap();
    let two = SecretSet::new(vec![old, new]).unwrap();
    c.bench_function("verify, one active secret", |b| {
        b.iter(|| verify(&one, &headers, BODY.as_bytes(), now).unwrap())
    });
    c.bench_function("verify, two active secrets (matches the second)", |b| {
        b.iter(|| verify(&two, &headers, BODY.as_bytes(), now).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
