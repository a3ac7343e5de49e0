-- The indexes of the expired-row purge (`PostgresStore::purge_expired`; PostgreSQL has
-- no TTL). Never edit a shipped migration: add the next number.
--
-- Partial, on the purge's own predicate: a record that is expired AND has nothing left to do
-- (not in_flight, no routing pending) is what the purge deletes; in_flight records and pending
-- routings are never in this index, so the purge cannot reach them through it.
CREATE INDEX idempotency_purgeable
    ON idempotency (expires_at_s)
    WHERE status <> 'in_flight' AND NOT route_pending;

CREATE INDEX natural_keys_expires
    ON natural_keys (expires_at_s);
