--
-- dedup_claim: the claim itself, in and across transactions
--
CREATE EXTENSION dedup;

-- the objects the extension owns, and that pg_dump keeps the claims
SELECT pg_describe_object(classid, objid, objsubid) AS object
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dedup')
   -- 17 and later also list the row types of tables and views: leave them out
   AND (classid <> 'pg_type'::regclass OR (SELECT typtype FROM pg_type WHERE oid = objid) = 'e')
 ORDER BY 1;
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'dedup';
-- a churning table: autovacuum comes early
SELECT reloptions FROM pg_class WHERE oid = 'processed_messages'::regclass;

-- first delivery true, redelivery false; consumers are independent
BEGIN;
SELECT dedup_claim('loyalty-service', 'evt-91827') AS first,
       dedup_claim('loyalty-service', 'evt-91827') AS again,
       dedup_claim('billing-service', 'evt-91827') AS other_consumer;
SELECT consumer_name, message_id, processed_at = now() AS stamped_now
  FROM processed_messages ORDER BY 1, 2;
COMMIT;
SELECT dedup_claim('loyalty-service', 'evt-91827') AS redelivered;

-- a claim commits with the work, and a rollback keeps neither
CREATE TABLE loyalty (customer_id text PRIMARY KEY, points int NOT NULL);
INSERT INTO loyalty VALUES ('CUS-291', 0);
BEGIN;
UPDATE loyalty SET points = points + 120
 WHERE customer_id = 'CUS-291' AND dedup_claim('loyalty-service', 'evt-1');
ROLLBACK;
SELECT points FROM loyalty;
SELECT count(*) FROM processed_messages WHERE message_id = 'evt-1';
BEGIN;
UPDATE loyalty SET points = points + 120
 WHERE customer_id = 'CUS-291' AND dedup_claim('loyalty-service', 'evt-1');
COMMIT;
-- the redelivery changes nothing
UPDATE loyalty SET points = points + 120
 WHERE customer_id = 'CUS-291' AND dedup_claim('loyalty-service', 'evt-1');
SELECT points FROM loyalty;

-- the same key twice in one transaction: true, then false
BEGIN;
SELECT dedup_claim('c', 'twice') AS first, dedup_claim('c', 'twice') AS second;
COMMIT;

-- ROLLBACK TO SAVEPOINT releases a claim made after the savepoint only
BEGIN;
SELECT dedup_claim('c', 'before-savepoint');
SAVEPOINT s;
SELECT dedup_claim('c', 'after-savepoint');
ROLLBACK TO SAVEPOINT s;
SELECT dedup_claim('c', 'before-savepoint') AS before_again,
       dedup_claim('c', 'after-savepoint') AS after_again;
ROLLBACK;
SELECT count(*) FROM processed_messages WHERE consumer_name = 'c' AND message_id <> 'twice';

-- a failed statement after the claim aborts the claim with it
BEGIN;
SELECT dedup_claim('c', 'then-error');
SELECT 1 / 0;
COMMIT;
SELECT dedup_claim('c', 'then-error') AS claimable_again;

-- keys up to the documented limits are accepted, counted in bytes
SELECT dedup_claim(repeat('c', 256), repeat('k', 1024)) AS longest,
       dedup_claim('c', repeat('k', 512)) AS k512,
       dedup_claim('c', repeat('é', 512)) AS two_byte_chars;
-- keys are compared exactly: no trimming, no case folding
SELECT dedup_claim('c', 'Key') AS upper, dedup_claim('c', 'key') AS lower,
       dedup_claim('c', 'key ') AS trailing_space;

-- the claim finds its table through the extension's schema, wherever it is
DROP EXTENSION dedup;
CREATE SCHEMA dedup_elsewhere;
CREATE EXTENSION dedup SCHEMA dedup_elsewhere;
SET search_path = public;
SELECT dedup_elsewhere.dedup_claim('c', 'k1') AS in_new_schema;
ALTER SCHEMA dedup_elsewhere RENAME TO dedup_renamed;
SELECT dedup_renamed.dedup_claim('c', 'k1') AS after_rename,
       dedup_renamed.dedup_claim('c', 'k2') AS new_key;
SELECT message_id FROM dedup_renamed.processed_messages ORDER BY 1;

-- indexes a DBA adds are maintained by claims, and a unique one is an
-- arbiter, as for INSERT ... ON CONFLICT DO NOTHING
CREATE INDEX regress_by_time ON dedup_renamed.processed_messages (processed_at);
CREATE UNIQUE INDEX regress_one_consumer_per_id ON dedup_renamed.processed_messages (message_id);
SELECT dedup_renamed.dedup_claim('c', 'k3') AS claimed,
       dedup_renamed.dedup_claim('other', 'k3') AS unique_index_conflict,
       dedup_renamed.dedup_claim('c', 'k3') AS duplicate;
SET enable_seqscan = off;
SELECT count(*) AS found_through_added_index FROM dedup_renamed.processed_messages
 WHERE processed_at = (SELECT processed_at FROM dedup_renamed.processed_messages WHERE message_id = 'k3');
RESET enable_seqscan;
DROP INDEX dedup_renamed.regress_by_time;
DROP INDEX dedup_renamed.regress_one_consumer_per_id;

-- a claim inserts at once unless the session's last claim was a duplicate
-- (the last one above was): a duplicate found by inserting leaves a killed
-- tuple behind, one found by looking first none
-- (counted within one transaction: the counts shown may include earlier
-- transactions' not yet reported)
BEGIN;
SELECT n_tup_ins AS ins0, n_tup_del AS del0 FROM pg_stat_xact_user_tables
 WHERE relid = 'dedup_renamed.processed_messages'::regclass \gset
SELECT dedup_renamed.dedup_claim('c', 'k4') AS claimed_after_looking,
       dedup_renamed.dedup_claim('c', 'k4') AS found_by_inserting,
       dedup_renamed.dedup_claim('c', 'k4') AS found_by_looking,
       dedup_renamed.dedup_claim('c', 'k5') AS claimed_after_looking;
SELECT n_tup_ins - :ins0 AS inserted, n_tup_del - :del0 AS killed
  FROM pg_stat_xact_user_tables
 WHERE relid = 'dedup_renamed.processed_messages'::regclass;
COMMIT;
SELECT message_id FROM dedup_renamed.processed_messages WHERE message_id IN ('k4', 'k5') ORDER BY 1;
-- under SERIALIZABLE a claim always looks first: no killed tuple after a
-- new key (k6) either
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT n_tup_ins AS ins0, n_tup_del AS del0 FROM pg_stat_xact_user_tables
 WHERE relid = 'dedup_renamed.processed_messages'::regclass \gset
SELECT dedup_renamed.dedup_claim('c', 'k6') AS claimed,
       dedup_renamed.dedup_claim('c', 'k6') AS found_by_looking;
SELECT n_tup_ins - :ins0 AS inserted, n_tup_del - :del0 AS killed
  FROM pg_stat_xact_user_tables
 WHERE relid = 'dedup_renamed.processed_messages'::regclass;
COMMIT;
DROP EXTENSION dedup;
DROP SCHEMA dedup_renamed;
DROP TABLE loyalty;
RESET search_path;
