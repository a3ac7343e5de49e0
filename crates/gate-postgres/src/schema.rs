//! The PostgreSQL schema of the store: the versioned migrations the adapter ships
//! ([`MIGRATIONS`], applied by [`migrate`] and recorded in `gate_schema_migrations`) and the
//! statements of every operation, qualified with the store's schema ([`Statements`]).

use tokio_postgres::types::Type;
use tokio_postgres::Client;

use super::codec::{BUSINESS_ROW_COLUMNS, IN_FLIGHT_COLUMNS, RECORD_COLUMNS};
use super::errors::Failure;
use gate::store::StoreError;

/// One migration: its version (applied in ascending order, each once), name and SQL.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The version, from the file name (`0001_init.sql`: 1).
    pub version: i32,
    /// The file name.
    pub name: &'static str,
    /// The SQL, run with `search_path` set to the store's schema (unqualified names).
    pub sql: &'static str,
}

/// The migrations, in order. A shipped migration is never edited: a change is a new file.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_init.sql",
        sql: include_str!("migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "0002_neutral_names.sql",
        sql: include_str!("migrations/0002_neutral_names.sql"),
    },
    Migration {
        version: 3,
        name: "0003_purge_indexes.sql",
        sql: include_str!("migrations/0003_purge_indexes.sql"),
    },
    Migration {
        version: 4,
        name: "0004_audit_history.sql",
        sql: include_str!("migrations/0004_audit_history.sql"),
    },
];

/// The table recording applied migrations (in the store's schema).
pub const MIGRATIONS_TABLE: &str = "gate_schema_migrations";

/// Checks a schema name: 1 to 63 characters (PostgreSQL's `NAMEDATALEN - 1`), lowercase ASCII
/// letters, digits and `_`, not starting with a digit. Such a name needs no quoting, so it cannot
/// carry SQL into the statements it is spliced into.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the rule broken (a configuration error).
pub fn check_schema_name(schema: &str) -> Result<(), StoreError> {
    let ok = (1..=63).contains(&schema.len())
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(StoreError::Corrupt(
            format!("schema name {schema:?}: 1 to 63 of a-z, 0-9 and _, not starting with a digit")
                .into(),
        ))
    }
}

/// Applies the migrations not yet recorded in `{schema}.gate_schema_migrations`, in one
/// transaction under a transaction-scoped advisory lock (so consumers starting at once, each
/// migrating at its cold start, apply each migration once). Creates the schema if needed.
/// Returns the versions applied now (empty when the schema is current).
pub(crate) async fn migrate(client: &mut Client, schema: &str) -> Result<Vec<i32>, Failure> {
    let tx = client.transaction().await?;
    // A migration may build an index over a large table: no statement timeout (a role's
    // setting of a few seconds would roll an upgrade back half-way at every cold start), and the
    // wait for the table's lock bounded (one minute).
    tx.batch_execute("SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = '60s'")
        .await?;
    // The lock key: the schema name's hash (PostgreSQL's own `hashtext`), so that two schemas
    // migrate independently.
    tx.query_typed(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[(&schema, Type::TEXT)],
    )
    .await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema}; \
         CREATE TABLE IF NOT EXISTS {schema}.{MIGRATIONS_TABLE} ( \
             version    integer     PRIMARY KEY, \
             name       text        NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .await?;
    let applied: Vec<i32> = tx
        .query_typed(
            &format!("SELECT version FROM {schema}.{MIGRATIONS_TABLE}"),
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut now = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        tx.batch_execute(&format!("SET LOCAL search_path TO {schema}"))
            .await?;
        tx.batch_execute(m.sql).await?;
        tx.query_typed(
            &format!("INSERT INTO {schema}.{MIGRATIONS_TABLE} (version, name) VALUES ($1, $2)"),
            &[(&m.version, Type::INT4), (&m.name, Type::TEXT)],
        )
        .await?;
        now.push(m.version);
    }
    tx.commit().await?;
    Ok(now)
}

/// One statement of the store and the types of its parameters (`$1`..), in order: it is sent
/// as the protocol's unnamed statement with its types (parse, bind and execute in one round
/// trip), so no named prepared statement outlives its transaction (behind PgBouncer in
/// transaction mode a named one would be missing, or another process's, on the next server
/// connection).
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub text: String,
    pub types: &'static [Type],
}

impl Sql {
    fn new(types: &'static [Type], text: String) -> Self {
        Self { text, types }
    }

    /// The cold-start probe of the session (`PostgresStore::check_session`): the statement
    /// timeout it runs under.
    pub(crate) fn probe() -> Self {
        Self::new(
            &[],
            "SELECT current_setting('statement_timeout') AS statement_timeout".to_string(),
        )
    }
}

/// The parameter types of each statement of [`Statements`], `$1` first.
mod types {
    use tokio_postgres::types::Type;

    const T: Type = Type::TEXT;
    const I: Type = Type::INT8;

    /// [`super::super::codec::RECORD_COLUMNS`], then now (s).
    pub const RESERVE: &[Type] = &[
        T,
        T,
        T,
        T,
        Type::BYTEA,
        T,
        T,
        I,
        I,
        I,
        I,
        T,
        Type::TEXT_ARRAY,
        T,
        T,
        Type::BOOL,
        Type::JSONB,
        I,
    ];
    /// [`RESERVE`], then the guard's: natural-key pk, labels, expires_at (s).
    pub const RESERVE_GUARD: &[Type] = &[
        T,
        T,
        T,
        T,
        Type::BYTEA,
        T,
        T,
        I,
        I,
        I,
        I,
        T,
        Type::TEXT_ARRAY,
        T,
        T,
        Type::BOOL,
        Type::JSONB,
        I,
        T,
        Type::JSONB,
        I,
    ];
    pub const TAKE_OVER: &[Type] = &[T, T, T, I, I];
    pub const COMMIT: &[Type] = &[T, T, T, I, T, Type::JSONB, I];
    pub const GUARD: &[Type] = &[T, T, Type::JSONB, I, I];
    pub const RELEASE: &[Type] = &[T, T, I];
    pub const EXTEND: &[Type] = &[T, T, I, I];
    pub const FINISH: &[Type] = &[T, T, T, T, Type::BYTEA, I, Type::BOOL];
    pub const FINISH_RELEASE: &[Type] = &[T, T, T, T, Type::BYTEA, I, T, T, I];
    pub const ROUTED: &[Type] = &[T, T, I];
    pub const RECORD_EFFECT_ID: &[Type] = &[T, T, I];
    pub const GET: &[Type] = &[T];
    pub const BOOKING: &[Type] = &[T];
    pub const NATURAL_KEY_HOLDER: &[Type] = &[T];
    pub const MULTI_EFFECT_KEYS: &[Type] = &[];
    pub const STALE_IN_FLIGHT: &[Type] = &[T, I, I, T, I];
    pub const PURGE_RECORDS: &[Type] = &[I, I];
    pub const PURGE_NATURAL_KEYS: &[Type] = &[I, I];
    pub const SCAN_RECORDS: &[Type] = &[T, T, T, I];
    pub const MULTI_EFFECT_PKS: &[Type] = &[];
    pub const APPEND_HISTORY: &[Type] = &[T, I, T, T, T, I];
    pub const HISTORY: &[Type] = &[T];
}

/// The statements of the store, with the schema spliced in (checked by [`check_schema_name`]).
/// Each is one statement: one round trip.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub reserve: Sql,
    pub reserve_guard: Sql,
    pub take_over: Sql,
    pub commit: Sql,
    pub guard: Sql,
    pub release: Sql,
    pub extend: Sql,
    pub finish: Sql,
    pub finish_release: Sql,
    pub routed: Sql,
    pub record_effect_id: Sql,
    pub get: Sql,
    pub booking: Sql,
    pub natural_key_holder: Sql,
    pub multi_effect_keys: Sql,
    pub stale_in_flight: Sql,
    pub purge_records: Sql,
    pub purge_natural_keys: Sql,
    pub scan_records: Sql,
    pub multi_effect_pks: Sql,
    pub append_history: Sql,
    pub history: Sql,
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Self {
        let t = format!("{schema}.idempotency");
        let b = format!("{schema}.business_rows");
        let n = format!("{schema}.natural_keys");
        let h = format!("{schema}.audit_history");
        let cols = RECORD_COLUMNS;
        let updates = RECORD_COLUMNS
            .split(", ")
            .filter(|c| *c != "pk")
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        // The existing record, only when the write did not happen (`done` is empty): the outer
        // join gives exactly one row either way. Both read the statement's snapshot.
        let existing_unless = |done: &str| {
            format!("(SELECT 1) AS one LEFT JOIN (SELECT {cols} FROM {t} WHERE pk = $1) AS e ON NOT EXISTS (SELECT 1 FROM {done})")
        };
        Self {
            // Insert, or replace an expired record with nothing left to do; otherwise return
            // the record there (`written` = 0). $1..$17 the record, $18 now in epoch SECONDS.
            reserve: Sql::new(types::RESERVE, format!(
                "WITH written AS ( \
                   INSERT INTO {t} AS r ({cols}) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
                   ON CONFLICT (pk) DO UPDATE SET {updates} \
                   WHERE r.expires_at_s < $18 AND r.status <> 'in_flight' AND NOT r.route_pending \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM written) AS written, e.* FROM {}",
                existing_unless("written")
            )),
            // The reserve above and, only where it wrote, the guard below (`g` reads `written`,
            // so it inserts nothing when the reserve did not write): one statement, one round
            // trip, one transaction. $1..$18 as the reserve ($2 the event key, $18 now in epoch
            // SECONDS), $19 the natural key's pk, $20 its labels, $21 its expires_at (s).
            // `held` and `holder` as the guard's; `holder` only read when the reserve wrote (a
            // duplicate reads nothing more than the reserve alone does).
            reserve_guard: Sql::new(types::RESERVE_GUARD, format!(
                "WITH written AS ( \
                   INSERT INTO {t} AS r ({cols}) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
                   ON CONFLICT (pk) DO UPDATE SET {updates} \
                   WHERE r.expires_at_s < $18 AND r.status <> 'in_flight' AND NOT r.route_pending \
                   RETURNING 1), \
                 g AS ( \
                   INSERT INTO {n} AS k (pk, event_key, labels, expires_at_s) \
                   SELECT $19, $2, $20::jsonb, $21 FROM written \
                   ON CONFLICT (pk) DO UPDATE SET event_key = EXCLUDED.event_key, \
                     labels = EXCLUDED.labels, expires_at_s = EXCLUDED.expires_at_s \
                   WHERE k.event_key = EXCLUDED.event_key OR k.expires_at_s < $18 \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM written) AS written, \
                        (SELECT count(*) FROM g) AS held, \
                        CASE WHEN EXISTS (SELECT 1 FROM written) \
                          THEN (SELECT event_key FROM {n} WHERE pk = $19) END AS holder, \
                        e.* FROM {}",
                existing_unless("written")
            )),
            // $1 pk, $2 old owner, $3 new owner, $4 lease_until (ms), $5 now (ms).
            take_over: Sql::new(types::TAKE_OVER, format!(
                "WITH taken AS ( \
                   UPDATE {t} SET lease_owner = $3, lease_until_ms = $4, updated_at_ms = $5 \
                   WHERE pk = $1 AND (status = 'in_flight' OR route_pending) AND lease_owner = $2 \
                     AND (lease_until_ms IS NULL OR lease_until_ms < $5) \
                   RETURNING {cols}) \
                 SELECT true AS taken, {cols} FROM taken \
                 UNION ALL \
                 SELECT false AS taken, {cols} FROM {t} \
                   WHERE pk = $1 AND NOT EXISTS (SELECT 1 FROM taken)"
            )),
            // One statement, so one transaction: the fenced update of the record and the business
            // row (a plain insert: a row that outlived its record aborts the whole statement
            // with a unique violation).
            // $1 pk, $2 owner, $3 effect id, $4 now (ms), $5 event key, $6 row labels,
            // $7 booked_at (ms).
            commit: Sql::new(types::COMMIT, format!(
                "WITH rec AS ( \
                   UPDATE {t} SET status = 'committed', effect_id = $3, \
                     effect_ids = CASE WHEN $3 = ANY(effect_ids) THEN effect_ids \
                                     ELSE array_append(effect_ids, $3) END, \
                     lease_until_ms = NULL, inflight_shard = NULL, request = '\\x'::bytea, \
                     updated_at_ms = $4 \
                   WHERE pk = $1 AND status = 'in_flight' AND lease_owner = $2 \
                   RETURNING pk), \
                 booked AS ( \
                   INSERT INTO {b} ({BUSINESS_ROW_COLUMNS}) \
                   SELECT $5, $3, $6, $7 FROM rec RETURNING source_event) \
                 SELECT (SELECT count(*) FROM rec) AS committed, \
                        (SELECT count(*) FROM booked) AS booked, \
                        e.* FROM {}",
                existing_unless("rec")
            )),
            // The guard: the natural-key row, written when absent, held by this event key or
            // expired; else the holder (`held` = 0; `holder` NULL when the row was committed
            // after this statement's snapshot: read again).
            // $1 natural-key pk, $2 event key, $3 labels, $4 expires_at (s), $5 now (s).
            guard: Sql::new(types::GUARD, format!(
                "WITH g AS ( \
                   INSERT INTO {n} AS k (pk, event_key, labels, expires_at_s) \
                   VALUES ($1, $2, $3::jsonb, $4) \
                   ON CONFLICT (pk) DO UPDATE SET event_key = EXCLUDED.event_key, \
                     labels = EXCLUDED.labels, expires_at_s = EXCLUDED.expires_at_s \
                   WHERE k.event_key = EXCLUDED.event_key OR k.expires_at_s < $5 \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM g) AS held, \
                        (SELECT event_key FROM {n} WHERE pk = $1) AS holder"
            )),
            // $1 pk, $2 owner, $3 now (ms).
            release: Sql::new(types::RELEASE, format!(
                "UPDATE {t} SET lease_until_ms = 0, updated_at_ms = $3 \
                 WHERE pk = $1 AND (status = 'in_flight' OR route_pending) AND lease_owner = $2"
            )),
            // $1 pk, $2 owner, $3 lease until (ms), $4 now (ms).
            extend: Sql::new(types::EXTEND, format!(
                "UPDATE {t} SET lease_until_ms = $3, updated_at_ms = $4 \
                 WHERE pk = $1 AND status = 'in_flight' AND lease_owner = $2 \
                   AND lease_until_ms IS DISTINCT FROM 0 RETURNING 1"
            )),
            // $1 pk, $2 owner, $3 status, $4 error, $5 manual item, $6 now (ms), $7 no-effect guard.
            finish: Sql::new(types::FINISH, format!(
                "WITH done AS ( \
                   UPDATE {t} SET status = $3, error = $4, request = $5, route_pending = true, \
                     updated_at_ms = $6 \
                   WHERE pk = $1 AND status = 'in_flight' AND lease_owner = $2 \
                     AND (NOT $7::boolean OR cardinality(effect_ids) = 0) \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM done) AS finished, e.* FROM {}",
                existing_unless("done")
            )),
            // The finish (lease guard) and, only where it wrote a record holding no effect id,
            // the natural key's release: its row's expires_at moved to $9 (the second before
            // now) while it names the record's event key. One statement, one transaction.
            // $1..$6 as the finish's, $7 the natural key's pk, $8 the event key, $9 released (s).
            finish_release: Sql::new(types::FINISH_RELEASE, format!(
                "WITH done AS ( \
                   UPDATE {t} SET status = $3, error = $4, request = $5, route_pending = true, \
                     updated_at_ms = $6 \
                   WHERE pk = $1 AND status = 'in_flight' AND lease_owner = $2 \
                   RETURNING cardinality(effect_ids) AS effects), \
                 released AS ( \
                   UPDATE {n} SET expires_at_s = $9 \
                   WHERE pk = $7 AND event_key = $8 \
                     AND EXISTS (SELECT 1 FROM done WHERE effects = 0) \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM done) AS finished, \
                        (SELECT count(*) FROM released) AS released, e.* FROM {}",
                existing_unless("done")
            )),
            // $1 pk, $2 owner, $3 now (ms).
            routed: Sql::new(types::ROUTED, format!(
                "UPDATE {t} SET route_pending = false, request = '\\x'::bytea, \
                   lease_until_ms = NULL, inflight_shard = NULL, updated_at_ms = $3 \
                 WHERE pk = $1 AND route_pending AND lease_owner = $2 RETURNING 1"
            )),
            // $1 pk, $2 effect id, $3 now (ms). One update: no lost update under concurrency.
            record_effect_id: Sql::new(types::RECORD_EFFECT_ID, format!(
                "UPDATE {t} SET effect_ids = CASE WHEN $2 = ANY(effect_ids) \
                                          OR cardinality(effect_ids) >= {max_ids} THEN effect_ids \
                                        ELSE array_append(effect_ids, $2) END, \
                   updated_at_ms = $3 \
                 WHERE pk = $1 RETURNING {cols}",
                max_ids = gate::store::limits::MAX_EFFECT_IDS
            )),
            get: Sql::new(types::GET, format!("SELECT {cols} FROM {t} WHERE pk = $1")),
            booking: Sql::new(types::BOOKING, format!("SELECT {BUSINESS_ROW_COLUMNS} FROM {b} WHERE source_event = $1")),
            natural_key_holder: Sql::new(types::NATURAL_KEY_HOLDER, format!("SELECT event_key FROM {n} WHERE pk = $1")),
            multi_effect_keys: Sql::new(types::MULTI_EFFECT_KEYS, format!("SELECT count(*) FROM {schema}.multi_effect")),
            // $1 shard, $2 created before (ms), $3/$4 the cursor (created_at_ms, pk), $5 limit.
            stale_in_flight: Sql::new(types::STALE_IN_FLIGHT, format!(
                "SELECT {IN_FLIGHT_COLUMNS} FROM {schema}.in_flight \
                 WHERE inflight_shard = $1 AND created_at_ms < $2 \
                   AND (created_at_ms, pk) > ($3, $4) \
                 ORDER BY created_at_ms, pk LIMIT $5"
            )),
            // $1 now (epoch SECONDS), $2 limit. The rows a reserve may replace (expired, nothing
            // left to do), through the partial index `idempotency_purgeable`, oldest first; rows
            // another transaction holds are skipped (the next batch takes them). The predicate
            // is checked again on the row's newest version when it is locked and deleted, so a
            // record reserved anew in the meantime (not expired) is kept.
            purge_records: Sql::new(types::PURGE_RECORDS, format!(
                "WITH doomed AS ( \
                   SELECT pk FROM {t} \
                   WHERE expires_at_s < $1 AND status <> 'in_flight' AND NOT route_pending \
                   ORDER BY expires_at_s LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 DELETE FROM {t} AS r USING doomed \
                 WHERE r.pk = doomed.pk \
                   AND r.expires_at_s < $1 AND r.status <> 'in_flight' AND NOT r.route_pending \
                 RETURNING 1"
            )),
            // $1 now (epoch SECONDS), $2 limit.
            purge_natural_keys: Sql::new(types::PURGE_NATURAL_KEYS, format!(
                "WITH doomed AS ( \
                   SELECT pk FROM {n} WHERE expires_at_s < $1 \
                   ORDER BY expires_at_s LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 DELETE FROM {n} AS k USING doomed \
                 WHERE k.pk = doomed.pk AND k.expires_at_s < $1 RETURNING 1"
            )),
            // The operator's reads (`RecordScan`). $1 the last `pk` of the previous page ('' for
            // the first), $2 a label's name or NULL, $3 its value, $4 the page size.
            scan_records: Sql::new(types::SCAN_RECORDS, format!(
                "SELECT {cols} FROM {t} \
                 WHERE pk > $1 AND ($2::text IS NULL OR labels ->> $2::text = $3::text) \
                 ORDER BY pk LIMIT $4"
            )),
            multi_effect_pks: Sql::new(types::MULTI_EFFECT_PKS, format!("SELECT pk FROM {schema}.multi_effect ORDER BY pk")),
            // The audit history (`AuditLog`), the lines of the record's present life only.
            // $1 pk, $2 at (ms), $3 who, $4 action, $5 detail, $6 the most lines. The FOR KEY
            // SHARE lock keeps the record from being purged under the insert.
            append_history: Sql::new(types::APPEND_HISTORY, format!(
                "WITH rec AS (SELECT pk, created_at_ms FROM {t} WHERE pk = $1 FOR KEY SHARE), \
                 lines AS (SELECT count(*) AS n FROM {h} AS h JOIN rec \
                   ON h.pk = rec.pk AND h.record_created_at_ms = rec.created_at_ms), \
                 added AS ( \
                   INSERT INTO {h} (pk, record_created_at_ms, at_ms, who, action, detail) \
                   SELECT rec.pk, rec.created_at_ms, $2, $3, $4, $5 FROM rec, lines \
                   WHERE lines.n < $6 RETURNING 1) \
                 SELECT (SELECT count(*) FROM rec) AS found, (SELECT count(*) FROM added) AS added"
            )),
            // $1 pk.
            history: Sql::new(types::HISTORY, format!(
                "SELECT h.at_ms, h.who, h.action, h.detail FROM {h} AS h JOIN {t} AS r \
                   ON h.pk = r.pk AND h.record_created_at_ms = r.created_at_ms \
                 WHERE r.pk = $1 ORDER BY h.line"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_that_need_no_quoting_only() {
        for ok in ["gate", "gate_test_1", "_x"] {
            assert!(check_schema_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "Gate",
            "1gate",
            "gate;drop",
            "gate\"x",
            "gate-x",
            long.as_str(),
        ] {
            assert!(check_schema_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn migrations_are_numbered_from_one_in_order() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }
}
