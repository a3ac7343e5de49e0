//! `PostgresStore` over TLS against the real test server: `scripts/with-postgres.sh`
//! starts it with `ssl=on`, a throwaway CA and a server certificate for the name `localhost`
//! only, and a role `gate_tls` (SCRAM password) that `pg_hba.conf` admits over TLS only. It
//! exports `GATE_TEST_DATABASE_TLS_URL` (that role, host `localhost`, no `sslmode`),
//! `GATE_TEST_DATABASE_CA` (the CA's PEM) and `GATE_TEST_DATABASE_OTHER_CA` (a CA that signed
//! nothing). Without them the tests fail.
//!
//! What is shown: `verify-full` with the right CA connects, the session is encrypted
//! (`pg_stat_ssl`) and a reserve and a commit pass; a wrong CA, a host name the certificate does
//! not name (under `verify-full`) and `sslmode=disable` are refused with errors that say why;
//! `verify-ca` skips only the name; no `sslmode` means `verify-full`; the password is in no
//! error, no log line and no `Debug`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use gate::record::{BusinessRow, RecordStatus};
use gate::store::{CommitOutcome, IdempotencyStore, Reservation, StoreError};
use gate_postgres::{PostgresConfig, PostgresStore, SslMode};
use gate_testkit::conformance::{sample_record, NOW_MS};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("set {name} (scripts/with-postgres.sh starts a server with TLS and sets it)")
    })
}

/// `postgresql://gate_tls:PASSWORD@localhost:PORT/gate`.
fn tls_url() -> String {
    var("GATE_TEST_DATABASE_TLS_URL")
}

/// The role's password, to look for where it must not be.
fn password() -> String {
    let url = tls_url();
    let userinfo = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(userinfo, _)| userinfo.to_string())
        .expect("user:password@ in GATE_TEST_DATABASE_TLS_URL");
    let (_, password) = userinfo.split_once(':').expect("a password");
    assert!(
        password.len() >= 16,
        "the script's password is 32 hex digits"
    );
    password.to_string()
}

fn ca() -> PathBuf {
    PathBuf::from(var("GATE_TEST_DATABASE_CA"))
}

fn other_ca() -> PathBuf {
    PathBuf::from(var("GATE_TEST_DATABASE_OTHER_CA"))
}

/// A schema unique to this process and `case`.
fn schema(case: &str) -> String {
    format!("tls_{}_{case}", std::process::id())
}

/// A store on `url` (with `query`, e.g. `sslmode=verify-full`, appended) and `ca_bundle`.
fn tls_store(
    query: &str,
    ca_bundle: Option<PathBuf>,
    case: &str,
) -> (PostgresConfig, PostgresStore) {
    store_on(&tls_url(), query, ca_bundle, case)
}

fn store_on(
    url: &str,
    query: &str,
    ca_bundle: Option<PathBuf>,
    case: &str,
) -> (PostgresConfig, PostgresStore) {
    let url = if query.is_empty() {
        url.to_string()
    } else {
        format!("{url}?{query}")
    };
    let mut config = PostgresConfig::new(url, 2).with_schema(schema(case));
    config.ca_bundle = ca_bundle;
    let store = PostgresStore::with_config(&config).expect("store");
    (config, store)
}

/// Whether the pool's session is encrypted, and with which protocol (`pg_stat_ssl`).
async fn session_tls(store: &PostgresStore) -> (bool, Option<String>) {
    let client = store.pool().get().await.expect("connection");
    let row = client
        .query_one(
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("pg_stat_ssl");
    (row.get(0), row.get(1))
}

/// Migrates, reserves and commits one record: the store works end to end on this connection.
async fn reserve_and_commit(store: &PostgresStore, case: &str) {
    store.migrate().await.expect("migrate");
    let r = sample_record(case, "over-tls", "owner-tls", NOW_MS);
    assert_eq!(
        store.reserve(&r, NOW_MS).await.expect("reserve"),
        Reservation::Reserved
    );
    let booking = BusinessRow::for_record(&r, "EFFECT-TLS", NOW_MS + 5);
    assert_eq!(
        store
            .commit(&r.pk, "owner-tls", "EFFECT-TLS", &booking, NOW_MS + 5)
            .await
            .expect("commit"),
        CommitOutcome::Committed
    );
    let stored = store.get(&r.pk).await.expect("get").expect("record");
    assert_eq!(stored.status, RecordStatus::Committed);
}

/// The error of a reserve on `store` (which must fail to connect), with every log line written
/// meanwhile.
async fn refused(store: &PostgresStore, case: &str) -> (StoreError, String) {
    let lines = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = {
        let lines = lines.clone();
        move || Capture(lines.clone())
    };
    let subscriber = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let r = sample_record(case, "refused", "owner-refused", NOW_MS);
    let error = store
        .reserve(&r, NOW_MS)
        .await
        .expect_err("the connection must be refused");
    let logs = String::from_utf8_lossy(&lines.lock().expect("lines")).into_owned();
    (error, logs)
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lines").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Neither the error, nor the log lines, nor the configuration's or the store's `Debug` hold
/// the password; the log lines show the retries (so they were captured).
fn assert_no_password(
    error: &StoreError,
    logs: &str,
    config: &PostgresConfig,
    store: &PostgresStore,
) {
    let password = password();
    for (what, text) in [
        ("error", error.to_string()),
        ("error Debug", format!("{error:?}")),
        ("logs", logs.to_string()),
        ("config Debug", format!("{config:?}")),
        ("store Debug", format!("{store:?}")),
    ] {
        assert!(
            !text.contains(&password),
            "{what} holds the password: {text}"
        );
    }
    assert!(logs.contains("PostgreSQL statement retried"), "{logs}");
}

#[tokio::test]
async fn verify_full_with_the_right_ca_connects_encrypted_and_a_reserve_commits() {
    let (config, store) = tls_store("sslmode=verify-full", Some(ca()), "full");
    assert_eq!(config.ssl_mode().expect("mode"), SslMode::VerifyFull);
    reserve_and_commit(&store, "full").await;
    let (ssl, version) = session_tls(&store).await;
    assert!(ssl, "the session is not encrypted");
    assert!(version.is_some_and(|v| v.starts_with("TLSv1.")));

    // The same with the bundle named by the URL (libpq's sslrootcert, percent-encoded).
    let path = ca().display().to_string().replace('/', "%2F");
    let (_, store) = tls_store(
        &format!("sslmode=verify-full&sslrootcert={path}"),
        None,
        "full_rootcert",
    );
    reserve_and_commit(&store, "full_rootcert").await;
    assert!(session_tls(&store).await.0);
}

#[tokio::test]
async fn no_sslmode_means_verify_full() {
    let (config, store) = tls_store("", Some(ca()), "default");
    assert_eq!(config.ssl_mode().expect("mode"), SslMode::VerifyFull);
    reserve_and_commit(&store, "default").await;
    assert!(session_tls(&store).await.0);
    // Without the bundle, the system's roots do not know the throwaway CA.
    let (_, store) = tls_store("", None, "default_system");
    let (error, _) = refused(&store, "default_system").await;
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");
}

#[tokio::test]
async fn a_wrong_ca_is_refused_with_a_clear_error() {
    let (config, store) = tls_store("sslmode=verify-full", Some(other_ca()), "wrong_ca");
    let (error, logs) = refused(&store, "wrong_ca").await;
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("TLS handshake"), "{text}");
    assert!(
        text.contains("invalid peer certificate: UnknownIssuer"),
        "{text}"
    );
    assert!(
        text.contains("DATABASE_CA_BUNDLE"),
        "the error says what to do: {text}"
    );
    assert_no_password(&error, &logs, &config, &store);
    // `verify-ca` checks the chain as well.
    let (_, store) = tls_store("sslmode=verify-ca", Some(other_ca()), "wrong_ca_chain");
    let (error, _) = refused(&store, "wrong_ca_chain").await;
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");
    // `require` with a bundle checks the chain (libpq's rule for a root file).
    let (_, store) = tls_store("sslmode=require", Some(other_ca()), "wrong_ca_require");
    let (error, _) = refused(&store, "wrong_ca_require").await;
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");
}

/// The certificate names `localhost`, not `127.0.0.1`: `verify-full` to the address is refused,
/// `verify-ca` (the chain only) connects.
#[tokio::test]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let by_address = tls_url().replacen("@localhost:", "@127.0.0.1:", 1);
    assert_ne!(by_address, tls_url());
    let (_, store) = store_on(&by_address, "sslmode=verify-full", Some(ca()), "name");
    let (error, _) = refused(&store, "name").await;
    assert!(
        error
            .to_string()
            .contains("certificate not valid for name \"127.0.0.1\""),
        "{error}"
    );

    let (_, store) = store_on(&by_address, "sslmode=verify-ca", Some(ca()), "name_ca");
    reserve_and_commit(&store, "name_ca").await;
    assert!(session_tls(&store).await.0);
}

/// `require` without a bundle: encrypted, the certificate unchecked (libpq's meaning).
#[tokio::test]
async fn require_without_a_bundle_encrypts_without_checking() {
    let (_, store) = tls_store("sslmode=require", None, "require");
    reserve_and_commit(&store, "require").await;
    assert!(session_tls(&store).await.0);
}

/// The role is admitted over TLS only (`hostnossl ... reject`): without TLS the server refuses,
/// and the error quotes the server's reason.
#[tokio::test]
async fn sslmode_disable_is_refused_by_a_tls_only_server() {
    let (config, store) = tls_store("sslmode=disable", None, "disable");
    assert_eq!(config.ssl_mode().expect("mode"), SslMode::Disable);
    let (error, logs) = refused(&store, "disable").await;
    let text = error.to_string();
    assert!(text.contains("pg_hba.conf rejects connection"), "{text}");
    assert!(text.contains("no encryption"), "{text}");
    assert_no_password(&error, &logs, &config, &store);
}

/// The Lambda wiring end to end: `STORE=postgres`, a connection string without `sslmode` (so
/// `verify-full`) and `DATABASE_CA_BUNDLE` build a store that migrates, reserves and commits
/// over TLS; a `DATABASE_CA_BUNDLE` naming the wrong CA fails the first operation with the
/// reason, not the start.
#[tokio::test]
async fn the_wiring_connects_with_database_ca_bundle() {
    use gate_lambda::{build_store, fixed_env, StoreConfig};

    let url = tls_url();
    let schema = schema("wiring");
    for (bundle, works) in [(ca(), true), (other_ca(), false)] {
        let bundle_text = bundle.display().to_string();
        let lookup = fixed_env(&[
            ("STORE", "postgres"),
            ("DATABASE_URL", url.as_str()),
            ("DATABASE_CA_BUNDLE", bundle_text.as_str()),
            ("DATABASE_SCHEMA", schema.as_str()),
            ("DATABASE_RUN_MIGRATIONS", "false"),
        ]);
        let env = gate_lambda::Env::new(&lookup);
        let config = StoreConfig::read(&env);
        env.finish(|| ()).expect("configuration");
        let StoreConfig::Postgres(settings) = &config else {
            panic!("STORE=postgres selects PostgreSQL");
        };
        assert_eq!(settings.ca_bundle.as_deref(), Some(bundle.as_path()));
        let aws = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let (store, _index, _purge) =
            build_store(&config, &aws, gate::record::RowColumns::NEUTRAL, &[])
                .await
                .expect("store built");
        let r = sample_record(
            "wiring",
            if works { "right-ca" } else { "wrong-ca" },
            "owner-w",
            NOW_MS,
        );
        if works {
            // Migrate through a store on the same schema (the wiring was told not to).
            let (_, migrating) = tls_store("", Some(ca()), "wiring");
            migrating.migrate().await.expect("migrate");
            assert_eq!(
                store.reserve(&r, NOW_MS).await.expect("reserve"),
                Reservation::Reserved
            );
        } else {
            let error = store.reserve(&r, NOW_MS).await.expect_err("wrong CA");
            assert!(error.to_string().contains("UnknownIssuer"), "{error}");
            assert!(!error.to_string().contains(&password()), "{error}");
        }
    }
}
