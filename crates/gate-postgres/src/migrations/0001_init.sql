-- The gate's tables on PostgreSQL, version 1. Applied by `PostgresStore::migrate` inside one
-- transaction with `search_path` set to the store's schema, and recorded in
-- `gate_schema_migrations`. Never edit a shipped migration: add `0002_*.sql`.
--
-- Units, never mixed: `expires_at_s` is epoch SECONDS; `lease_until_ms`, `created_at_ms`,
-- `updated_at_ms` and `booked_at_ms` are epoch MILLISECONDS.

-- One row per idempotency record (`IdempotencyRecord`), keyed by `pk` = "{integration}#{event_key}".
CREATE TABLE idempotency (
    pk             text    PRIMARY KEY,
    event_key      text    NOT NULL,
    status         text    NOT NULL
                   CHECK (status IN ('in_flight', 'committed', 'failed', 'manual')),
    fingerprint    text    NOT NULL,
    -- The claim request (holds a secret) while in_flight, the manual item while a routing is
    -- pending, empty once finished (data minimisation).
    request        bytea   NOT NULL DEFAULT '\x',
    op_key         text    NOT NULL,
    lease_owner    text,
    lease_until_ms bigint,
    created_at_ms  bigint  NOT NULL,
    updated_at_ms  bigint  NOT NULL,
    expires_at_s   bigint  NOT NULL,
    slot_id        text,
    -- Every effect id ever recorded for the key, sorted, distinct.
    slot_ids       text[]  NOT NULL DEFAULT '{}',
    -- "00".."15" while the record has work left (in_flight, or a routing not yet confirmed).
    inflight_shard text,
    error          text,
    route_pending  boolean NOT NULL DEFAULT false,
    -- The integration's labels: a JSON object of strings.
    labels         jsonb   NOT NULL DEFAULT '{}'
);

-- The in-flight index: partial, so it holds only records with work left (the sparse GSI
-- `InFlight` of the DynamoDB adapter). `stale_in_flight` reads it through the view below.
CREATE INDEX idempotency_in_flight
    ON idempotency (inflight_shard, created_at_ms, pk)
    WHERE inflight_shard IS NOT NULL;

-- Records holding two or more distinct effect ids (the distinct-slot signal; healthy: none).
CREATE INDEX idempotency_multi_slot
    ON idempotency (pk)
    WHERE cardinality(slot_ids) > 1;

-- What the in-flight index shows: never `request` (a secret) nor the labels. A role that only
-- reads signals (the metrics function) is granted SELECT on the two views, not on the table.
CREATE VIEW in_flight AS
    SELECT pk, event_key, status, lease_owner, lease_until_ms, created_at_ms, expires_at_s,
           inflight_shard
      FROM idempotency
     WHERE inflight_shard IS NOT NULL;

CREATE VIEW multi_slot AS
    SELECT pk FROM idempotency WHERE cardinality(slot_ids) > 1;

-- The business rows the commit writes in the same transaction as the record (`BusinessRow`).
CREATE TABLE business_rows (
    source_event  text   PRIMARY KEY,
    slot_id       text   NOT NULL,
    labels        jsonb  NOT NULL DEFAULT '{}',
    booked_at_ms  bigint NOT NULL
);

-- Natural-key items (signal 4): `pk` = "{integration}#nk#{natural key}", held by the first event
-- key committed for it.
CREATE TABLE natural_keys (
    pk            text   PRIMARY KEY,
    event_key     text   NOT NULL,
    labels        jsonb  NOT NULL DEFAULT '{}',
    expires_at_s  bigint NOT NULL
);
