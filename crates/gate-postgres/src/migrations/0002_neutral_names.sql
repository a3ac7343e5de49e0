-- Version 2: the neutral vocabulary (issue 22). The effect id columns and the multi-effect view
-- and index get the core's names. A rename keeps the data, the indexes and the grants (a view
-- follows its columns by number and keeps its privileges when renamed), so a role granted
-- SELECT on the view `multi_slot` keeps it on `multi_effect`. Applied in the same transaction
-- as every pending migration (`PostgresStore::migrate`); a consumer of the previous version
-- still running meanwhile gets "undefined column" (a transient failure, redelivered) until it
-- is replaced: docs/DEPLOYING.md, "Stored names".
ALTER TABLE idempotency RENAME COLUMN slot_id TO effect_id;
ALTER TABLE idempotency RENAME COLUMN slot_ids TO effect_ids;
ALTER INDEX idempotency_multi_slot RENAME TO idempotency_multi_effect;
ALTER VIEW multi_slot RENAME TO multi_effect;
ALTER TABLE business_rows RENAME COLUMN slot_id TO effect_id;
