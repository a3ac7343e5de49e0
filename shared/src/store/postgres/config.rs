//! The connection settings of a [`super::PostgresStore`] and the pool built from them.

use std::path::PathBuf;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use super::tls::{connector, split_connection_string, Roots, SslMode};
use crate::store::StoreError;

/// The connection settings of a [`super::PostgresStore`]. `Debug` redacts the connection string (it
/// holds the password).
#[derive(Clone)]
pub struct PostgresConfig {
    /// A libpq connection string or URL (`postgresql://user:password@host:5432/db`, or
    /// `host=.. user=.. password=..`). Secret. Its `sslmode` (default `verify-full`) and
    /// `sslrootcert` are libpq's: see [`super::tls`].
    pub url: String,
    /// A PEM file of the CA certificates that sign the server's certificate (the RDS
    /// `global-bundle.pem`), for `verify-ca`/`verify-full` (and `prefer`/`require`, which then
    /// check the chain as libpq does with a root file); `None`: the connection string's
    /// `sslrootcert`, else the system's roots. Set together with `sslrootcert`: refused.
    pub ca_bundle: Option<PathBuf>,
    /// The schema holding the store's tables ([`super::check_schema_name`]); default `gate`.
    pub schema: String,
    /// Connections per pool (one pool per process: per Lambda execution environment, the
    /// consumer's record concurrency is enough).
    pub pool_size: usize,
    /// `SET statement_timeout` on each new connection (`None`: the server's or role's setting;
    /// behind RDS Proxy set it on the role instead, `ALTER ROLE .. SET`, as a `SET` pins the
    /// session). Each attempt also gives up on the client side after this plus 2 s (a half-open
    /// connection after a failover answers nothing).
    pub statement_timeout: Option<Duration>,
    /// `SET lock_timeout` on each new connection: the longest a statement waits for a row
    /// another transaction holds (`None`: the server's setting).
    pub lock_timeout: Option<Duration>,
    /// Connect timeout of a new connection, and the longest wait for a free one from the pool.
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &"[redacted]")
            .field("ca_bundle", &self.ca_bundle)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("lock_timeout", &self.lock_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl PostgresConfig {
    /// `url` with `pool_size` connections and the defaults: schema `gate`, statement timeout
    /// 5 s, lock timeout 2 s, connect timeout 5 s.
    pub fn new(url: impl Into<String>, pool_size: usize) -> Self {
        Self {
            url: url.into(),
            ca_bundle: None,
            schema: "gate".to_string(),
            pool_size,
            statement_timeout: Some(Duration::from_secs(5)),
            lock_timeout: Some(Duration::from_secs(2)),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The same settings on another schema.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The connection string's `sslmode` (default `verify-full`).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a connection string that does not parse (the message never
    /// holds the string).
    pub fn ssl_mode(&self) -> Result<SslMode, StoreError> {
        Ok(split_connection_string(&self.url)
            .map_err(unparsable)?
            .1
            .mode)
    }

    /// The pool: `pool_size` connections with the TLS of `sslmode` ([`super::tls`]), recycled
    /// when closed, each set up with the timeouts.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a connection string that does not parse (the message never
    /// holds the string), a CA bundle that cannot be read, or a CA bundle named twice.
    pub(crate) fn pool(&self) -> Result<Pool, StoreError> {
        let (url, tls) = split_connection_string(&self.url).map_err(unparsable)?;
        let mut pg: tokio_postgres::Config = url.parse().map_err(|e| unparsable(format!("{e}")))?;
        let roots = match (tls.roots, &self.ca_bundle) {
            (Some(_), Some(_)) => {
                return Err(StoreError::Corrupt(
                    "TLS: a CA bundle is named both by sslrootcert in the connection string \
                     and by the configuration (DATABASE_CA_BUNDLE): keep one"
                        .to_string(),
                ))
            }
            (Some(roots), None) => Some(roots),
            (None, bundle) => bundle.clone().map(Roots::Bundle),
        };
        let tls = connector(tls.mode, roots.as_ref())?;
        pg.connect_timeout(self.connect_timeout);
        pg.keepalives(true);
        pg.application_name("gate");
        let mut settings = String::new();
        if let Some(t) = self.statement_timeout {
            settings.push_str(&format!("SET statement_timeout = {};", t.as_millis()));
        }
        if let Some(t) = self.lock_timeout {
            settings.push_str(&format!("SET lock_timeout = {};", t.as_millis()));
        }
        let manager = Manager::from_config(
            pg,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let mut builder = Pool::builder(manager)
            .max_size(self.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.connect_timeout))
            .create_timeout(Some(self.connect_timeout));
        if !settings.is_empty() {
            builder = builder.post_create(Hook::async_fn(move |client, _| {
                let settings = settings.clone();
                Box::pin(async move {
                    client
                        .batch_execute(&settings)
                        .await
                        .map_err(HookError::Backend)
                })
            }));
        }
        builder
            .build()
            .map_err(|e| StoreError::Corrupt(format!("PostgreSQL pool: {e}")))
    }
}

fn unparsable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!(
        "the PostgreSQL connection string does not parse: {e}"
    ))
}

/// Whether `url` parses as a connection string of the store (libpq `key=value` or
/// `postgresql://` URL, with the `sslmode` and `sslrootcert` of [`super::tls`]). The answer
/// never quotes it.
pub fn connection_string_parses(url: &str) -> bool {
    split_connection_string(url).is_ok_and(|(url, _)| url.parse::<tokio_postgres::Config>().is_ok())
}
