//! Which store the functions use, read at cold start ([`StoreConfig::read`]): DynamoDB (the
//! default) or PostgreSQL (`STORE=postgres`, the gate's feature `postgres`).
//!
//! | variable | meaning | unit | default |
//! | --- | --- | --- | --- |
//! | `STORE` | `dynamodb` or `postgres` | | `dynamodb` |
//! | `VERIFY_CONDITIONAL_WRITES` | DynamoDB: `true` runs the cold-start checks that both tables live in one Region, not a global table ([`crate::store::verify_single_region`]), and that conditional writes are refused ([`crate::store::verify_conditional_writes`]); `false` skips both | | `true` |
//! | `IDEMPOTENCY_TABLE` | DynamoDB: idempotency table name | | required with `dynamodb`, not read with `postgres` |
//! | `BOOKINGS_TABLE` | DynamoDB: business table name | | required with `dynamodb`, not read with `postgres` |
//! | `DATABASE_URL_SECRET_ARN` | PostgreSQL: ARN of the Secrets Manager secret whose `SecretString` is the connection string, read once per cold start | | required with `postgres` unless `DATABASE_URL` |
//! | `DATABASE_URL` | PostgreSQL: the connection string, **local runs only**; refused together with the ARN | | none |
//! | `DATABASE_POOL_SIZE` | PostgreSQL: connections per execution environment | connections | `1` |
//! | `DATABASE_RUN_MIGRATIONS` | PostgreSQL: apply the shipped migrations at cold start | | `false` |
//! | `DATABASE_CA_BUNDLE` | PostgreSQL: path of a PEM file of the CA certificates that sign the server's certificate (RDS/Aurora: AWS's `global-bundle.pem`, shipped in the deployment package, e.g. `/var/task/global-bundle.pem`, or a layer, `/opt/...`); unset: the connection string's `sslrootcert`, else the system's roots (enough for RDS Proxy). The connection string's `sslmode` (default `verify-full`) says what is checked: `gate_postgres::tls` | | none |
//! | `DATABASE_SCHEMA` | PostgreSQL: the schema of the gate's tables (1 to 63 of `a-z`, `0-9`, `_`) | | `gate` |
//! | `DATABASE_SESSION_TIMEOUTS` | PostgreSQL: `SET LOCAL statement_timeout` (5 s) and `lock_timeout` (2 s) in each statement's own transaction, never on the session; `false` behind RDS Proxy (a `SET` may pin the proxy's session: set them on the role instead) | | `true` |

use super::env::{secret_arn_valid, Env};
use super::secrets::SecretString;

/// Where the records and the business rows live, selected by `STORE` and built in one place
/// ([`crate::store::build_store`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// DynamoDB (`gate_dynamo`): `IDEMPOTENCY_TABLE` and `BOOKINGS_TABLE`.
    DynamoDb {
        /// The idempotency table's name.
        idempotency_table: String,
        /// The business table's name.
        business_table: String,
        /// `VERIFY_CONDITIONAL_WRITES`: run the cold-start checks that neither table is a global
        /// table and that the second of two conditional writes on a canary key is refused.
        verify_conditional_writes: bool,
    },
    /// PostgreSQL (`gate_postgres`, feature `postgres`), tables in the schema `gate`.
    Postgres(PostgresSettings),
}

/// The PostgreSQL store's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresSettings {
    /// Where the connection string comes from.
    pub url: DatabaseUrl,
    /// `DATABASE_POOL_SIZE`: connections per execution environment, shared by its records and,
    /// in a Lambda Managed Instances environment, by its concurrent invocations
    /// (`AWS_LAMBDA_MAX_CONCURRENCY`); each statement holds a connection only while it runs.
    pub pool_size: usize,
    /// `DATABASE_RUN_MIGRATIONS`: apply the migrations at cold start.
    pub run_migrations: bool,
    /// `DATABASE_SESSION_TIMEOUTS`: set the statement and lock timeouts in each statement's
    /// transaction (`SET LOCAL`).
    pub session_timeouts: bool,
    /// `DATABASE_SCHEMA`: the schema of the gate's tables.
    pub schema: String,
    /// `DATABASE_CA_BUNDLE`: the PEM file of CA certificates for TLS (`None`: the connection
    /// string's `sslrootcert`, else the system's roots). Checked to be a file at start.
    pub ca_bundle: Option<std::path::PathBuf>,
}

/// The source of the connection string (it holds the password: `Debug` redacts it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `DATABASE_URL_SECRET_ARN`: read from Secrets Manager once per cold start.
    SecretArn(String),
    /// `DATABASE_URL`: local runs only.
    Local(SecretString),
}

/// Whether `url` parses as a libpq connection string or `postgresql://` URL. The answer never
/// quotes it.
pub fn database_url_parses(url: &str) -> bool {
    #[cfg(feature = "postgres")]
    {
        gate_postgres::connection_string_parses(url)
    }
    #[cfg(not(feature = "postgres"))]
    {
        !url.trim().is_empty()
    }
}

/// Whether `schema` is a schema name the PostgreSQL store takes (its rule:
/// `check_schema_name` of `gate_postgres`).
fn schema_name_valid(schema: &str) -> Result<(), String> {
    #[cfg(feature = "postgres")]
    {
        gate_postgres::check_schema_name(schema).map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = schema;
        Ok(())
    }
}

impl StoreConfig {
    /// Reads `STORE` and the selected store's variables, recording every problem on `env`, each
    /// naming its variable; never quotes a connection string or what may be one.
    pub fn read(env: &Env<'_>) -> Self {
        let verify_conditional_writes = env.boolean("VERIFY_CONDITIONAL_WRITES", true);
        match PostgresSettings::select(env) {
            Selected::Postgres(settings) => Self::Postgres(settings),
            Selected::DynamoDb => Self::DynamoDb {
                idempotency_table: env.required("IDEMPOTENCY_TABLE").unwrap_or_default(),
                business_table: env.required("BOOKINGS_TABLE").unwrap_or_default(),
                verify_conditional_writes,
            },
            Selected::Unknown => Self::DynamoDb {
                idempotency_table: String::new(),
                business_table: String::new(),
                verify_conditional_writes,
            },
        }
    }
}

/// What `STORE` selects.
enum Selected {
    DynamoDb,
    Postgres(PostgresSettings),
    /// An unknown value (a problem recorded): no store's variables are read.
    Unknown,
}

impl PostgresSettings {
    /// Reads `STORE` and, when it is `postgres`, the `DATABASE_*` variables (the module's
    /// table). `None` for DynamoDB (unset or `dynamodb`) and for an unknown value (a problem
    /// recorded on `env`, naming `STORE`). Used by every function: the metrics function reads
    /// `IDEMPOTENCY_TABLE` alone for DynamoDB.
    pub fn read_if_selected(env: &Env<'_>) -> Option<Self> {
        match Self::select(env) {
            Selected::Postgres(settings) => Some(settings),
            Selected::DynamoDb | Selected::Unknown => None,
        }
    }

    fn select(env: &Env<'_>) -> Selected {
        let store = env.optional("STORE");
        match store.as_deref().map(str::trim) {
            None | Some("dynamodb") => Selected::DynamoDb,
            Some("postgres") => {
                if !cfg!(feature = "postgres") {
                    env.problem(
                        "STORE",
                        "`postgres` is not built into this function (the gate's feature \
                         `postgres`)",
                    );
                }
                Selected::Postgres(Self::read(env))
            }
            Some(other) => {
                env.problem(
                    "STORE",
                    format!("{other:?} is not `dynamodb` or `postgres`"),
                );
                Selected::Unknown
            }
        }
    }

    /// Reads the `DATABASE_*` variables (the module's table).
    fn read(env: &Env<'_>) -> Self {
        let arn = env.optional("DATABASE_URL_SECRET_ARN");
        let local = env.optional("DATABASE_URL");
        let url = match (arn, local) {
            (Some(_), Some(_)) => {
                env.problem(
                    "DATABASE_URL",
                    "set together with DATABASE_URL_SECRET_ARN; DATABASE_URL is for local runs \
                     only, unset one of them",
                );
                None
            }
            (Some(arn), None) if !secret_arn_valid(arn.trim()) => {
                // Not quoted: a value that is no ARN may be the connection string itself.
                env.problem(
                    "DATABASE_URL_SECRET_ARN",
                    format!(
                        "not a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:\
                         secret:NAME; {} characters, not quoted: it may be the connection string \
                         itself)",
                        arn.chars().count()
                    ),
                );
                None
            }
            (Some(arn), None) => Some(DatabaseUrl::SecretArn(arn.trim().to_string())),
            (None, Some(url)) if !database_url_parses(url.trim()) => {
                env.problem(
                    "DATABASE_URL",
                    "not a libpq connection string or postgresql:// URL (not quoted: it holds \
                     the password)",
                );
                None
            }
            (None, Some(url)) => Some(DatabaseUrl::Local(SecretString::new(url.trim()))),
            (None, None) => {
                env.problem(
                    "DATABASE_URL_SECRET_ARN",
                    "missing (required with STORE=postgres; DATABASE_URL for local runs)",
                );
                None
            }
        };
        let pool_size = env.number("DATABASE_POOL_SIZE", 1, 1, 100).unwrap_or(1) as usize;
        let run_migrations = env.boolean("DATABASE_RUN_MIGRATIONS", false);
        let session_timeouts = env.boolean("DATABASE_SESSION_TIMEOUTS", true);
        let schema = env
            .optional("DATABASE_SCHEMA")
            .map_or_else(|| "gate".to_string(), |s| s.trim().to_string());
        if let Err(e) = schema_name_valid(&schema) {
            env.problem("DATABASE_SCHEMA", e);
        }
        let ca_bundle = env
            .optional("DATABASE_CA_BUNDLE")
            .map(|p| std::path::PathBuf::from(p.trim()));
        if let Some(path) = &ca_bundle {
            if !path.is_file() {
                env.problem(
                    "DATABASE_CA_BUNDLE",
                    format!(
                        "no file at {} (the PEM bundle of CA certificates, shipped in the \
                         deployment package or a layer)",
                        path.display()
                    ),
                );
            }
        }
        Self {
            url: url.unwrap_or(DatabaseUrl::Local(SecretString::new(""))),
            pool_size,
            run_migrations,
            session_timeouts,
            schema,
            ca_bundle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::fixed_env;

    #[cfg(feature = "postgres")]
    const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:gate/db-AbCdEf";
    #[cfg(feature = "postgres")]
    const URL: &str = "postgresql://gate:XYZZY-PW@db.internal:5432/gate";

    /// The store read from `pairs`, or the variables named by its problems.
    fn read(pairs: &[(&str, &str)]) -> Result<StoreConfig, Vec<&'static str>> {
        let lookup = fixed_env(pairs);
        let env = Env::new(&lookup);
        let store = StoreConfig::read(&env);
        env.finish(|| store).map_err(|e| e.variables())
    }

    #[test]
    fn dynamodb_is_the_default_and_checks_conditions() {
        assert_eq!(
            read(&[("IDEMPOTENCY_TABLE", "i"), ("BOOKINGS_TABLE", "b")]),
            Ok(StoreConfig::DynamoDb {
                idempotency_table: "i".into(),
                business_table: "b".into(),
                verify_conditional_writes: true,
            })
        );
        assert_eq!(
            read(&[
                ("STORE", "dynamodb"),
                ("IDEMPOTENCY_TABLE", "i"),
                ("BOOKINGS_TABLE", "b"),
                ("VERIFY_CONDITIONAL_WRITES", "false"),
            ]),
            Ok(StoreConfig::DynamoDb {
                idempotency_table: "i".into(),
                business_table: "b".into(),
                verify_conditional_writes: false,
            })
        );
        assert_eq!(
            read(&[("VERIFY_CONDITIONAL_WRITES", "no")]),
            Err(vec![
                "VERIFY_CONDITIONAL_WRITES",
                "IDEMPOTENCY_TABLE",
                "BOOKINGS_TABLE"
            ])
        );
        assert_eq!(read(&[("STORE", "mysql")]), Err(vec!["STORE"]));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_needs_no_tables_and_takes_its_defaults() {
        assert_eq!(
            read(&[("STORE", "postgres"), ("DATABASE_URL_SECRET_ARN", ARN)]),
            Ok(StoreConfig::Postgres(PostgresSettings {
                url: DatabaseUrl::SecretArn(ARN.into()),
                pool_size: 1,
                run_migrations: false,
                session_timeouts: true,
                schema: "gate".into(),
                ca_bundle: None,
            }))
        );
        assert_eq!(
            read(&[
                ("STORE", "postgres"),
                ("DATABASE_URL", URL),
                ("DATABASE_POOL_SIZE", "4"),
                ("DATABASE_RUN_MIGRATIONS", "true"),
                ("DATABASE_SESSION_TIMEOUTS", "false"),
            ]),
            Ok(StoreConfig::Postgres(PostgresSettings {
                url: DatabaseUrl::Local(SecretString::new(URL)),
                pool_size: 4,
                run_migrations: true,
                session_timeouts: false,
                schema: "gate".into(),
                ca_bundle: None,
            }))
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn every_postgres_problem_names_its_variable() {
        assert_eq!(
            read(&[("STORE", "postgres")]),
            Err(vec!["DATABASE_URL_SECRET_ARN"])
        );
        assert_eq!(
            read(&[
                ("STORE", "postgres"),
                ("DATABASE_URL_SECRET_ARN", ARN),
                ("DATABASE_URL", URL)
            ]),
            Err(vec!["DATABASE_URL"])
        );
        assert_eq!(
            read(&[("STORE", "postgres"), ("DATABASE_URL_SECRET_ARN", URL)]),
            Err(vec!["DATABASE_URL_SECRET_ARN"])
        );
        assert_eq!(
            read(&[
                ("STORE", "postgres"),
                ("DATABASE_URL", "host=db port=seventy")
            ]),
            Err(vec!["DATABASE_URL"])
        );
        assert_eq!(
            read(&[
                ("STORE", "postgres"),
                ("DATABASE_URL", URL),
                ("DATABASE_CA_BUNDLE", "/nonexistent/global-bundle.pem"),
                ("DATABASE_SCHEMA", "Gate; DROP"),
            ]),
            Err(vec!["DATABASE_SCHEMA", "DATABASE_CA_BUNDLE"])
        );
        assert_eq!(
            read(&[
                ("STORE", "postgres"),
                ("DATABASE_URL", URL),
                ("DATABASE_POOL_SIZE", "0"),
                ("DATABASE_RUN_MIGRATIONS", "yes"),
                ("DATABASE_SESSION_TIMEOUTS", "off"),
            ]),
            Err(vec![
                "DATABASE_POOL_SIZE",
                "DATABASE_RUN_MIGRATIONS",
                "DATABASE_SESSION_TIMEOUTS"
            ])
        );
    }

    /// Neither the configuration's `Debug` nor a problem's message holds the connection string
    /// or its password, even when it is pasted where the ARN goes.
    #[cfg(feature = "postgres")]
    #[test]
    fn the_connection_string_never_shows() {
        let config = read(&[("STORE", "postgres"), ("DATABASE_URL", URL)]).unwrap();
        assert!(!format!("{config:?}").contains("XYZZY-PW"), "{config:?}");
        let lookup = fixed_env(&[("STORE", "postgres"), ("DATABASE_URL_SECRET_ARN", URL)]);
        let env = Env::new(&lookup);
        StoreConfig::read(&env);
        let message = env.finish(|| ()).unwrap_err().to_string();
        assert!(!message.contains("XYZZY-PW"), "{message}");
        assert!(!message.contains("db.internal"), "{message}");
    }
}
