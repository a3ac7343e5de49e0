-- Version 4: the operators' audit history (`AuditLog`: who did what to a record, when, by a
-- gatectl command), a table of its own so that no statement of the gate's hot path changes. Never
-- edit a shipped migration: add the next number.
--
-- A line belongs to one record's life: `record_created_at_ms` is the `created_at_ms` of the
-- record it was written on (epoch MILLISECONDS; kept by every write of a record, new only when a
-- reserve replaces an expired record). A reserve that replaces a record so starts an empty
-- history, as DynamoDB's `PutItem` does; the old lines are left out of every read and deleted
-- with the record (the purge's DELETE cascades).
CREATE TABLE audit_history (
    pk                   text   NOT NULL REFERENCES idempotency (pk) ON DELETE CASCADE,
    record_created_at_ms bigint NOT NULL,
    line                 bigint GENERATED ALWAYS AS IDENTITY,
    -- When, epoch MILLISECONDS.
    at_ms                bigint NOT NULL,
    who                  text   NOT NULL,
    action               text   NOT NULL,
    detail               text   NOT NULL,
    PRIMARY KEY (pk, line)
);
