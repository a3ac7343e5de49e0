//! The connection settings of a [`super::PostgresStore`] and the pool built from them.

use std::path::PathBuf;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::TargetSessionAttrs;

use super::tls::{connector, split_connection_string, Roots, SslMode};
use gate::store::StoreError;

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
    /// `SET LOCAL statement_timeout` in the transaction of each statement, never on the session
    /// (a session `SET` would hold on one server connection of a pooler and reach other
    /// clients). `None`: the server's or role's setting, and each statement is sent alone (behind
    /// RDS Proxy, where any `SET` may pin the session, set it on the role instead, `ALTER ROLE ..
    /// SET`). Each attempt also gives up on the client side after this plus 2 s (a half-open
    /// connection after a failover answers nothing), and never later than the invocation's
    /// store budget ([`gate::store::budget`]).
    pub statement_timeout: Option<Duration>,
    /// `SET LOCAL lock_timeout` beside the statement timeout: the longest a statement waits for
    /// a row another transaction holds (`None`: the server's setting).
    pub lock_timeout: Option<Duration>,
    /// Connect timeout of a new connection (its start-up and the writability check included),
    /// and the longest wait for a free one from the pool.
    pub connect_timeout: Duration,
    /// A pooled connection older than this is closed instead of reused (HikariCP's and sqlx's
    /// `max_lifetime`): a connection a failover left on a server that still accepts it is
    /// replaced within this time even if no error ever names it.
    pub max_lifetime: Duration,
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
            .field("max_lifetime", &self.max_lifetime)
            .finish()
    }
}

impl PostgresConfig {
    /// `url` with `pool_size` connections and the defaults: schema `gate`, statement timeout
    /// 5 s, lock timeout 2 s, connect timeout 5 s, maximum lifetime 10 minutes.
    pub fn new(url: impl Into<String>, pool_size: usize) -> Self {
        Self {
            url: url.into(),
            ca_bundle: None,
            schema: "gate".to_string(),
            pool_size,
            statement_timeout: Some(Duration::from_secs(5)),
            lock_timeout: Some(Duration::from_secs(2)),
            connect_timeout: Duration::from_secs(5),
            max_lifetime: Duration::from_secs(600),
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

    /// What opens each statement's transaction: `BEGIN` and the `SET LOCAL` of the timeouts, or
    /// `None` when neither is set (the statement is then its own transaction).
    pub(crate) fn transaction_settings(&self) -> Option<String> {
        let mut settings = String::new();
        if let Some(t) = self.statement_timeout {
            settings.push_str(&format!(
                "; SET LOCAL statement_timeout = {}",
                t.as_millis()
            ));
        }
        if let Some(t) = self.lock_timeout {
            settings.push_str(&format!("; SET LOCAL lock_timeout = {}", t.as_millis()));
        }
        (!settings.is_empty()).then(|| format!("BEGIN{settings}"))
    }

    /// The pool: `pool_size` connections with the TLS of `sslmode` ([`super::tls`]), each
    /// checked writable once when opened (libpq's `target_session_attrs=read-write`: a standby
    /// or a demoted writer is refused and the next host tried), TCP keepalives and a TCP user
    /// timeout (a black-holed network fails the socket instead of hanging it), recycled when
    /// closed or older than `max_lifetime`.
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
                        .to_string()
                        .into(),
                ))
            }
            (Some(roots), None) => Some(roots),
            (None, bundle) => bundle.clone().map(Roots::Bundle),
        };
        let tls = connector(tls.mode, roots.as_ref())?;
        pg.connect_timeout(self.connect_timeout);
        pg.keepalives(true);
        pg.keepalives_idle(Duration::from_secs(15));
        pg.keepalives_interval(Duration::from_secs(5));
        pg.keepalives_retries(3);
        pg.tcp_user_timeout(
            self.statement_timeout.unwrap_or(Duration::from_secs(5)) + Duration::from_secs(2),
        );
        pg.target_session_attrs(TargetSessionAttrs::ReadWrite);
        pg.application_name("gate");
        let max_lifetime = self.max_lifetime;
        let manager = Manager::from_config(
            pg,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(self.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(self.connect_timeout))
            .create_timeout(Some(self.connect_timeout))
            .pre_recycle(Hook::sync_fn(move |_, metrics| {
                if metrics.age() > max_lifetime {
                    Err(HookError::message("older than the pool's maximum lifetime"))
                } else {
                    Ok(())
                }
            }))
            .build()
            .map_err(|e| StoreError::corrupt(format!("PostgreSQL pool: {e}"), e))
    }
}

fn unparsable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("the PostgreSQL connection string does not parse: {e}").into())
}

/// Whether `url` parses as a connection string of the store (libpq `key=value` or
/// `postgresql://` URL, with the `sslmode` and `sslrootcert` of [`super::tls`]). The answer
/// never quotes it.
pub fn connection_string_parses(url: &str) -> bool {
    split_connection_string(url).is_ok_and(|(url, _)| url.parse::<tokio_postgres::Config>().is_ok())
}

/// Whether the server's rendering of a timeout (`SHOW statement_timeout`: `5s`, `5000ms`,
/// `1min`) is `expected_ms` (`NNNms`).
pub(crate) fn same_timeout(seen: &str, expected: &str) -> bool {
    let ms = |t: &str| -> Option<u128> {
        let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
        let n: u128 = digits.parse().ok()?;
        match &t[digits.len()..] {
            "" | "ms" => Some(n),
            "s" => Some(n * 1_000),
            "min" => Some(n * 60_000),
            "h" => Some(n * 3_600_000),
            "d" => Some(n * 86_400_000),
            _ => None,
        }
    };
    ms(seen).is_some() && ms(seen) == ms(expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeouts_open_each_statements_transaction_and_none_sends_it_alone() {
        let config = PostgresConfig::new("postgresql://gate@127.0.0.1/gate", 1);
        assert_eq!(
            config.transaction_settings().as_deref(),
            Some("BEGIN; SET LOCAL statement_timeout = 5000; SET LOCAL lock_timeout = 2000")
        );
        let mut bare = config.clone();
        bare.statement_timeout = None;
        bare.lock_timeout = None;
        assert_eq!(bare.transaction_settings(), None);
    }

    #[test]
    fn the_servers_renderings_of_a_timeout_compare_in_milliseconds() {
        for seen in ["5s", "5000ms", "5000"] {
            assert!(same_timeout(seen, "5000ms"), "{seen}");
        }
        assert!(same_timeout("1min", "60000ms"));
        assert!(!same_timeout("0", "5000ms"));
        assert!(!same_timeout("5s", "2000ms"));
        assert!(!same_timeout("soon", "5000ms"));
    }
}
