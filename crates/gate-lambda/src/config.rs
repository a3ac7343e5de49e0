//! The functions' configuration, read and validated once at cold start from environment
//! variables: the gate's generic variables ([`LambdaConfig`]) and the integration's own
//! ([`IntegrationConfig`]), every problem of both reported in one message ([`ConfigErrors`]).
//!
//! | variable | meaning | unit | default |
//! | --- | --- | --- | --- |
//! | `INTEGRATION_NAME` | record key prefix, the metrics' `Integration` dimension | | the integration's ([`IntegrationConfig::DEFAULT_NAME`]), else required |
//! | `STORE`, `IDEMPOTENCY_TABLE`, `BOOKINGS_TABLE`, `VERIFY_CONDITIONAL_WRITES`, `DATABASE_*` | the store ([`StoreConfig`], `super::store_config`; the business table's name is the first integration's) | | DynamoDB; its tables required |
//! | `MANUAL_QUEUE_URL` | manual queue URL | | required |
//! | `KEY_TTL_SECONDS` | record lifetime | seconds | `1814400` (21 days) |
//! | `LEASE_FLOOR_MS` | the lease from a reserve or take-over (at least the deadline margin: one record's work; raised to the integration's request timeout + 5 s, a call, the commit and an extension, if less) | milliseconds | `15000` |
//! | `MAX_CONCURRENCY` | records at once per batch (the reconciler: per run) | | `10` |
//! | `DEADLINE_MARGIN_MS` | no new record this close to the deadline; raised to at least one server call ([`IntegrationConfig::call_timeout_ms`]) + [`COMMIT_ALLOWANCE_MS`] (the reconciler: two calls + the allowance) | milliseconds | `12000` |
//! | `RECONCILE_MIN_AGE_SECONDS` | reconciler: minimum record age by `created_at` (the lease end selects) | seconds | `0` |
//! | `RECONCILE_SWEEP_INTERVAL_SECONDS` | reconciler: time between the sweeps of one scheduled (one-minute) run | seconds | `15` |
//! | `SERVER_KEY_RETENTION_SECONDS` | how long the side effect's server keeps an `Idempotency-Key`; read from [`LEGACY_KEY_RETENTION_VARIABLE`] when unset (a stack deployed before the neutral names) | seconds | `86400` |
//! | `RETENTION_MARGIN_SECONDS` | never call the server this close to the retention's end | seconds | `3600` |
//! | `RECONCILE_PAGE_SIZE` | reconciler: records per `InFlight` page | | `25` |
//! | `LOG_SENSITIVE_BODIES` | refused unless `false`: the AWS SDK would log request bodies | | unset |

use gate::reconciler::ReconcilerConfig;
use gate::record::DEFAULT_KEY_TTL_S;
use gate::GateConfig;

use super::env::{ConfigErrors, Env};
/// The legacy name of `SERVER_KEY_RETENTION_SECONDS`: read as a fallback when that name is
/// unset, so a stack deployed with a template that sets only the legacy name keeps its setting (docs/DEPLOYING.md, "Stored names").
pub const LEGACY_KEY_RETENTION_VARIABLE: &str = "TERMINAL_KEY_RETENTION_SECONDS";

pub use super::store_config::StoreConfig;

pub use gate::{min_deadline_margin_ms, COMMIT_ALLOWANCE_MS};

/// The gate's generic configuration, shared by the consumer and the reconciler.
#[derive(Debug, Clone)]
pub struct LambdaConfig {
    /// The gate's settings (`INTEGRATION_NAME`, `KEY_TTL_SECONDS`, `LEASE_FLOOR_MS`,
    /// `MAX_CONCURRENCY`, `DEADLINE_MARGIN_MS`; the claim horizon from the reconciler's retention
    /// and margin).
    pub gate: GateConfig,
    /// The reconciler's settings (unused by the consumer but for the claim horizon).
    pub reconciler: ReconcilerConfig,
    /// Where the records and the business rows live (`STORE`: the DynamoDB tables, or PostgreSQL
    /// with its `DATABASE_*` settings).
    pub store: StoreConfig,
    /// The manual queue's URL (`MANUAL_QUEUE_URL`).
    pub manual_queue_url: String,
}

impl LambdaConfig {
    /// Reads the generic variables, in the order of the module's table but the store and the
    /// queue last; every problem is recorded on `env`, and a refused value is replaced by its
    /// default so that the integration's variables can still be read against it.
    pub fn read(env: &Env<'_>, default_name: Option<&str>) -> Self {
        let integration = match default_name {
            Some(default) => env
                .optional("INTEGRATION_NAME")
                .unwrap_or_else(|| default.to_string()),
            None => env.required("INTEGRATION_NAME").unwrap_or_default(),
        };
        let mut gate = GateConfig::new(integration);
        // The default (21 days) outlives every redelivery horizon; 1 hour is the floor for tests
        // and local runs (`DEFAULT_KEY_TTL_S`; the template refuses less than 19 days).
        gate.key_ttl_s = env
            .number("KEY_TTL_SECONDS", DEFAULT_KEY_TTL_S, 3_600, 366 * 86_400)
            .unwrap_or(DEFAULT_KEY_TTL_S);
        gate.lease_floor_ms = env
            .number("LEASE_FLOOR_MS", 15_000, 1_000, 900_000)
            .unwrap_or(15_000);
        gate.max_concurrency = env.number("MAX_CONCURRENCY", 10, 1, 10_000).unwrap_or(10) as usize;
        gate.deadline_margin_ms = env
            .number("DEADLINE_MARGIN_MS", 12_000, 0, 900_000)
            .unwrap_or(12_000);
        // The AWS SDK logs request and response bodies at TRACE when this is set; the stored
        // requests and the manual queue's messages (the original body) may hold secrets.
        if env
            .optional("LOG_SENSITIVE_BODIES")
            .is_some_and(|v| !v.trim().eq_ignore_ascii_case("false"))
        {
            env.problem(
                "LOG_SENSITIVE_BODIES",
                "would let the AWS SDK log request bodies, which may hold secrets (the stored \
                 requests, the manual queue's original bodies); unset it",
            );
        }
        let min_age_s = env.number("RECONCILE_MIN_AGE_SECONDS", 0, 0, 86_400);
        let sweep_s = env.number("RECONCILE_SWEEP_INTERVAL_SECONDS", 15, 1, 60);
        // The name before the neutral vocabulary, read when the new one is unset (a stack
        // deployed with the previous template).
        let retention_variable = if env.optional("SERVER_KEY_RETENTION_SECONDS").is_none()
            && env.optional(LEGACY_KEY_RETENTION_VARIABLE).is_some()
        {
            LEGACY_KEY_RETENTION_VARIABLE
        } else {
            "SERVER_KEY_RETENTION_SECONDS"
        };
        let retention_s = env.number(retention_variable, 86_400, 60, 366 * 86_400);
        let margin_s = env.number("RETENTION_MARGIN_SECONDS", 3_600, 0, 366 * 86_400);
        let page_size = env.number("RECONCILE_PAGE_SIZE", 25, 1, 1_000);
        if let (Some(retention), Some(margin)) = (retention_s, margin_s) {
            if margin >= retention {
                env.problem(
                    "RETENTION_MARGIN_SECONDS",
                    format!(
                        "{margin} must be less than SERVER_KEY_RETENTION_SECONDS ({retention})"
                    ),
                );
            }
        }
        let reconciler = ReconcilerConfig {
            min_age_ms: min_age_s.unwrap_or(0) * 1000,
            key_retention_ms: retention_s.unwrap_or(86_400) * 1000,
            retention_margin_ms: margin_s.unwrap_or(3_600) * 1000,
            page_size: page_size.unwrap_or(25) as usize,
            sweep_interval_ms: sweep_s.unwrap_or(15) * 1000,
            ..ReconcilerConfig::default()
        };
        let store = StoreConfig::read(env);
        let manual_queue_url = env.required("MANUAL_QUEUE_URL").unwrap_or_default();
        Self {
            gate,
            reconciler,
            store,
            manual_queue_url,
        }
    }
}

/// An integration's own configuration, read at cold start after the gate's
/// ([`Config::from_env`]) and handed to its build function (`crate::run_consumer`).
pub trait IntegrationConfig: Sized + std::fmt::Debug + Send + Sync + 'static {
    /// `INTEGRATION_NAME` when unset (a stack deployed before the variable keeps its record
    /// keys); `None`: the variable is required.
    const DEFAULT_NAME: Option<&'static str> = None;

    /// Reads the integration's variables through `env`, recording every problem there (they are
    /// reported before the gate's, in one message). `lambda` is the gate's configuration as read
    /// (a refused value replaced by its default); the integration may adjust it, e.g. its
    /// servers' key support (`gate.server_supports_idempotency_key`) or key retention
    /// (`reconciler.key_retention_ms`; the claim horizon is derived after this call). The value
    /// returned when a problem was recorded is never used.
    fn from_env(env: &Env<'_>, lambda: &mut LambdaConfig) -> Self;

    /// The longest one call to the side effect's server may take, **milliseconds** (its request
    /// timeout); `DEADLINE_MARGIN_MS` is raised to fit one call and the commit (the reconciler:
    /// a lookup, a call and the commit), [`min_deadline_margin_ms`], and the gate's
    /// `GateConfig::call_timeout_ms` (the lease a holder needs left before it calls) is set to
    /// it. Default 0 (no raise beyond the commit allowance; the lease check keeps the gate's
    /// 10 s).
    fn call_timeout_ms(&self) -> i64 {
        0
    }
}

/// An integration without variables of its own.
impl IntegrationConfig for () {
    fn from_env(_env: &Env<'_>, _lambda: &mut LambdaConfig) -> Self {}
}

/// A function's whole configuration: the gate's and the integration's.
#[derive(Debug, Clone)]
pub struct Config<C> {
    /// The gate's generic configuration.
    pub lambda: LambdaConfig,
    /// The integration's own variables, read by its [`IntegrationConfig::from_env`].
    pub integration: C,
}

impl<C: IntegrationConfig> Config<C> {
    /// Reads the configuration through `lookup` (e.g. `|k| std::env::var(k).ok()`): the gate's
    /// variables ([`LambdaConfig::read`]), then the integration's ([`IntegrationConfig::from_env`]),
    /// then what follows from both: the claim horizon (the retention minus the margin; the
    /// consumer resumes stale records too and never calls past it) and the deadline margin
    /// raised to fit one server call and the commit. A margin set lower is raised, not refused:
    /// a function that cannot start would send every event to the dead-letter queue.
    ///
    /// # Errors
    /// [`ConfigErrors`]: every missing or invalid variable, each named, the integration's first.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigErrors> {
        let generic = Env::new(&lookup);
        let mut lambda = LambdaConfig::read(&generic, C::DEFAULT_NAME);
        let own = Env::new(&lookup);
        let integration = C::from_env(&own, &mut lambda);
        lambda.gate.claim_horizon_ms = lambda.reconciler.claim_horizon_ms();
        let call_timeout_ms = integration.call_timeout_ms();
        lambda.gate.deadline_margin_ms = lambda
            .gate
            .deadline_margin_ms
            .max(min_deadline_margin_ms(call_timeout_ms, 1));
        // The lease a call needs left (the held record's `lease_for_call`): the integration's
        // request timeout; the gate's default (10 s) when the integration names none.
        if call_timeout_ms > 0 {
            lambda.gate.call_timeout_ms = call_timeout_ms;
        }
        // A lease shorter than a call, the commit and an extension's round trip would be
        // extended before every call (one more write per event, and the extension's own round
        // trip eating the headroom): the floor is raised to cover them, as the deadline margin is.
        lambda.gate.lease_floor_ms = lambda.gate.lease_floor_ms.max(
            lambda
                .gate
                .call_lease_ms()
                .saturating_add(gate::EXTENSION_HEADROOM_MS),
        );
        let mut problems = own.into_problems();
        problems.extend(generic.into_problems());
        if problems.is_empty() {
            Ok(Self {
                lambda,
                integration,
            })
        } else {
            Err(ConfigErrors(problems))
        }
    }

    /// The reconciler's configuration: as read, with the deadline margin raised to fit a lookup
    /// and a call (two server calls) and the commit of one record, since the reconciler may make
    /// both before committing.
    #[must_use]
    pub fn for_reconciler(mut self) -> Self {
        self.lambda.gate.deadline_margin_ms =
            self.lambda
                .gate
                .deadline_margin_ms
                .max(min_deadline_margin_ms(
                    self.integration.call_timeout_ms(),
                    2,
                ));
        self
    }
}

/// The metrics function's configuration: `IDEMPOTENCY_TABLE` (required with DynamoDB), or
/// `STORE=postgres` and the `DATABASE_*` variables ([`super::store_config`]), and `INTEGRATION_NAME`
/// (the metrics' `Integration` dimension; the integration's default, else required).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// The idempotency table's name (its GSIs `InFlight` and the multi-effect index
    /// (`store::dynamo::MULTI_EFFECT_INDEX`) are read); empty with `STORE=postgres`.
    pub idempotency_table: String,
    /// `STORE=postgres`: the PostgreSQL store's settings (`DATABASE_*`, as the consumer's; its
    /// views `in_flight` and `multi_effect` are read). `None`: DynamoDB.
    pub postgres: Option<super::store_config::PostgresSettings>,
    /// The integration's name (`INTEGRATION_NAME`, else the default given): the metrics'
    /// `Integration` dimension.
    pub integration: String,
}

impl MetricsConfig {
    /// Reads the configuration through `lookup`; `default_name` as
    /// [`IntegrationConfig::DEFAULT_NAME`].
    ///
    /// # Errors
    /// [`ConfigErrors`] naming each missing variable.
    pub fn from_env(
        lookup: impl Fn(&str) -> Option<String>,
        default_name: Option<&str>,
    ) -> Result<Self, ConfigErrors> {
        let env = Env::new(&lookup);
        let postgres = super::store_config::PostgresSettings::read_if_selected(&env);
        let idempotency_table = match postgres {
            Some(_) => Some(String::new()),
            None => env.required("IDEMPOTENCY_TABLE"),
        };
        let integration = match default_name {
            Some(default) => Some(
                env.optional("INTEGRATION_NAME")
                    .unwrap_or_else(|| default.to_string()),
            ),
            None => env.required("INTEGRATION_NAME"),
        };
        env.finish(|| Self {
            idempotency_table: idempotency_table.unwrap_or_default(),
            postgres,
            integration: integration.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::fixed_env as env;

    const BASE: &[(&str, &str)] = &[
        ("INTEGRATION_NAME", "jobs"),
        ("IDEMPOTENCY_TABLE", "idem"),
        ("BOOKINGS_TABLE", "book"),
        (
            "MANUAL_QUEUE_URL",
            "https://sqs.eu-west-1.amazonaws.com/1/manual",
        ),
    ];

    /// An integration with one required variable and a 5 s server call.
    #[derive(Debug)]
    struct Jobs {
        url: String,
    }

    impl IntegrationConfig for Jobs {
        fn from_env(env: &Env<'_>, lambda: &mut LambdaConfig) -> Self {
            // Adjusts the gate's configuration: the claim horizon follows.
            lambda.reconciler.key_retention_ms = 7_200_000;
            Self {
                url: env.required("JOB_SERVER_URL").unwrap_or_default(),
            }
        }

        fn call_timeout_ms(&self) -> i64 {
            5_000
        }
    }

    #[test]
    fn defaults_apply() {
        let c = Config::<()>::from_env(env(BASE)).unwrap();
        let g = &c.lambda.gate;
        assert_eq!(g.integration, "jobs");
        assert_eq!(g.key_ttl_s, 1_814_400);
        assert_eq!(g.lease_floor_ms, 15_000);
        assert_eq!(g.max_concurrency, 10);
        assert_eq!(g.deadline_margin_ms, 12_000);
        assert_eq!(g.claim_horizon_ms, 23 * 3_600_000);
        assert_eq!(c.lambda.reconciler.min_age_ms, 0);
        assert_eq!(c.lambda.reconciler.sweep_interval_ms, 15_000);
        assert_eq!(c.lambda.reconciler.sweeps_per_run(), 4);
        assert_eq!(c.lambda.reconciler.key_retention_ms, 86_400_000);
        assert_eq!(c.lambda.reconciler.retention_margin_ms, 3_600_000);
        assert_eq!(c.lambda.reconciler.page_size, 25);
        assert_eq!(
            c.lambda.store,
            StoreConfig::DynamoDb {
                idempotency_table: "idem".into(),
                business_table: "book".into(),
                verify_conditional_writes: true,
            }
        );
        assert_eq!(
            c.lambda.manual_queue_url,
            "https://sqs.eu-west-1.amazonaws.com/1/manual"
        );
    }

    /// A stack deployed with the previous template sets the retention under its old name: read
    /// when the new name is unset; the new name wins when both are set.
    #[test]
    fn the_key_retention_is_read_under_its_old_name_when_the_new_is_unset() {
        let mut old = BASE.to_vec();
        old.push((LEGACY_KEY_RETENTION_VARIABLE, "7200"));
        let c = Config::<()>::from_env(env(&old)).unwrap();
        assert_eq!(c.lambda.reconciler.key_retention_ms, 7_200_000);
        old.push(("SERVER_KEY_RETENTION_SECONDS", "10800"));
        let c = Config::<()>::from_env(env(&old)).unwrap();
        assert_eq!(c.lambda.reconciler.key_retention_ms, 10_800_000);
        let mut bad = BASE.to_vec();
        bad.push((LEGACY_KEY_RETENTION_VARIABLE, "soon"));
        let err = Config::<()>::from_env(env(&bad)).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{LEGACY_KEY_RETENTION_VARIABLE}: \"soon\"")),
            "{err}"
        );
    }

    /// The integration's problems come first, then the gate's in reading order; all at once.
    #[test]
    fn every_problem_of_both_is_named_at_once() {
        let err = Config::<Jobs>::from_env(env(&[
            ("KEY_TTL_SECONDS", "14d"),
            ("MAX_CONCURRENCY", "0"),
            ("SERVER_KEY_RETENTION_SECONDS", "600"),
            ("RETENTION_MARGIN_SECONDS", "600"),
            ("LOG_SENSITIVE_BODIES", "true"),
        ]))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: 9 problems: JOB_SERVER_URL: missing (required); \
             INTEGRATION_NAME: missing (required); KEY_TTL_SECONDS: \"14d\" is not an integer; \
             MAX_CONCURRENCY: 0 is outside 1..=10000; LOG_SENSITIVE_BODIES: would let the AWS SDK \
             log request bodies, which may hold secrets (the stored requests, the manual queue's \
             original bodies); unset it; RETENTION_MARGIN_SECONDS: 600 must be less than \
             SERVER_KEY_RETENTION_SECONDS (600); IDEMPOTENCY_TABLE: missing (required); \
             BOOKINGS_TABLE: missing (required); MANUAL_QUEUE_URL: missing (required)"
        );
        // A default name: INTEGRATION_NAME is no longer required.
        struct Named;
        impl std::fmt::Debug for Named {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Named")
            }
        }
        impl IntegrationConfig for Named {
            const DEFAULT_NAME: Option<&'static str> = Some("named");
            fn from_env(_: &Env<'_>, _: &mut LambdaConfig) -> Self {
                Named
            }
        }
        let unnamed: Vec<_> = BASE.iter().copied().skip(1).collect();
        let c = Config::<Named>::from_env(env(&unnamed)).unwrap();
        assert_eq!(c.lambda.gate.integration, "named");
        assert_eq!(
            Config::<()>::from_env(env(&unnamed))
                .unwrap_err()
                .variables(),
            ["INTEGRATION_NAME"]
        );
    }

    /// The integration's adjustment is seen by the claim horizon; the deadline margin fits one
    /// server call and the commit (the reconciler: two calls), a longer one is kept.
    #[test]
    fn the_integration_adjusts_the_horizon_and_the_margin() {
        let mut vars = BASE.to_vec();
        vars.push(("JOB_SERVER_URL", "https://jobs.example"));
        let c = Config::<Jobs>::from_env(env(&vars)).unwrap();
        assert_eq!(c.integration.url, "https://jobs.example");
        assert_eq!(c.lambda.gate.claim_horizon_ms, 7_200_000 - 3_600_000);
        assert_eq!(c.lambda.gate.deadline_margin_ms, 12_000);
        // The lease a call needs left: the integration's 5 s call and the commit.
        assert_eq!(c.lambda.gate.call_timeout_ms, 5_000);
        assert_eq!(c.lambda.gate.call_lease_ms(), 5_000 + COMMIT_ALLOWANCE_MS);
        // The default floor covers that call, the commit and an extension's round trip.
        assert_eq!(c.lambda.gate.lease_floor_ms, 15_000);
        vars.push(("DEADLINE_MARGIN_MS", "1000"));
        let c = Config::<Jobs>::from_env(env(&vars)).unwrap();
        assert_eq!(c.lambda.gate.deadline_margin_ms, 7_000);
        assert_eq!(c.for_reconciler().lambda.gate.deadline_margin_ms, 12_000);
        assert_eq!(min_deadline_margin_ms(30_000, 2), 62_000);
        let none = Config::<()>::from_env(env(&[
            ("INTEGRATION_NAME", "x"),
            ("IDEMPOTENCY_TABLE", "i"),
            ("BOOKINGS_TABLE", "b"),
            ("MANUAL_QUEUE_URL", "q"),
            ("DEADLINE_MARGIN_MS", "0"),
        ]))
        .unwrap();
        assert_eq!(none.lambda.gate.deadline_margin_ms, COMMIT_ALLOWANCE_MS);
        // No call timeout named: the gate's default server timeout (10 s) for the lease check.
        assert_eq!(none.lambda.gate.call_timeout_ms, 10_000);
    }

    /// A lease floor set below what a call needs (the call, the commit, an extension's round
    /// trip) is raised to it: otherwise every record would be extended before its call.
    #[test]
    fn a_lease_floor_below_a_call_is_raised_to_cover_it() {
        let mut vars = BASE.to_vec();
        vars.push(("JOB_SERVER_URL", "https://jobs.example"));
        vars.push(("LEASE_FLOOR_MS", "1000"));
        let c = Config::<Jobs>::from_env(env(&vars)).unwrap();
        // 5 s call + 2 s commit + 3 s extension headroom.
        assert_eq!(c.lambda.gate.lease_floor_ms, 10_000);
        assert_eq!(
            c.lambda.gate.lease_ms(),
            12_000,
            "the deadline margin is longer"
        );
        vars.pop();
        vars.push(("LEASE_FLOOR_MS", "40000"));
        let c = Config::<Jobs>::from_env(env(&vars)).unwrap();
        assert_eq!(
            c.lambda.gate.lease_floor_ms, 40_000,
            "a longer floor is kept"
        );
    }

    #[test]
    fn sensitive_sdk_body_logging_is_refused() {
        let mut logging = BASE.to_vec();
        logging.push(("LOG_SENSITIVE_BODIES", "true"));
        assert_eq!(
            Config::<()>::from_env(env(&logging))
                .unwrap_err()
                .variables(),
            ["LOG_SENSITIVE_BODIES"]
        );
        let mut off = BASE.to_vec();
        off.push(("LOG_SENSITIVE_BODIES", "false"));
        assert!(Config::<()>::from_env(env(&off)).is_ok());
    }

    /// With `STORE=postgres` the metrics function needs the `DATABASE_*` variables, not
    /// `IDEMPOTENCY_TABLE`.
    #[cfg(feature = "postgres")]
    #[test]
    fn the_metrics_configuration_reads_postgres() {
        let config = MetricsConfig::from_env(
            env(&[
                ("STORE", "postgres"),
                ("DATABASE_URL", "postgresql://m@db/gate?sslmode=verify-full"),
                ("DATABASE_SCHEMA", "gate_jobs"),
            ]),
            Some("d"),
        )
        .unwrap();
        assert_eq!(config.idempotency_table, "");
        assert_eq!(
            config.postgres.map(|p| p.schema),
            Some("gate_jobs".to_string())
        );
        assert_eq!(
            MetricsConfig::from_env(env(&[("STORE", "postgres")]), Some("d"))
                .unwrap_err()
                .variables(),
            ["DATABASE_URL_SECRET_ARN"]
        );
    }

    #[test]
    fn the_metrics_configuration_names_what_is_missing() {
        assert_eq!(
            MetricsConfig::from_env(env(&[]), Some("d"))
                .unwrap_err()
                .to_string(),
            "invalid configuration: 1 problem: IDEMPOTENCY_TABLE: missing (required)"
        );
        assert_eq!(
            MetricsConfig::from_env(env(&[]), None)
                .unwrap_err()
                .variables(),
            ["IDEMPOTENCY_TABLE", "INTEGRATION_NAME"]
        );
        assert_eq!(
            MetricsConfig::from_env(env(&[("IDEMPOTENCY_TABLE", "t")]), Some("d")).unwrap(),
            MetricsConfig {
                idempotency_table: "t".into(),
                postgres: None,
                integration: "d".into()
            }
        );
    }
}
