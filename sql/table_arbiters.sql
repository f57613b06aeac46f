--
-- unique indexes and exclusion constraints added to the extension's
-- tables: each write of dedup has its key as its only arbiter, as
-- INSERT ... ON CONFLICT (key) does, so another unique index or exclusion
-- constraint raises its own error where a row of another consumer
-- conflicts, never a silent write to that row or a silent "nothing
-- written"; a table without its key is refused with 55000 and a hint.
-- (processed_messages, whose claims are ON CONFLICT DO NOTHING with every
-- unique index as an arbiter, is in table_tampering and try-claim-arbiters.)
--
\set SHOW_CONTEXT never
CREATE EXTENSION dedup;
CREATE ROLE regress_arbiters_app;

-- stream_positions: a unique index on (stream, partition) makes a second
-- consumer's claims and positions of a partition an error, and leaves the
-- first consumer's position alone
SELECT dedup_claim_offset('a', 'payments', 0, 5) AS claimed;
CREATE UNIQUE INDEX regress_positions_partition
	ON stream_positions (stream, partition);
SELECT dedup_claim_offset('b', 'payments', 0, 100);
\echo :SQLSTATE
SELECT dedup_claim_offsets('b', 'payments', 0, ARRAY[100, 101]);
\echo :SQLSTATE
SELECT dedup_set_stream_position('b', 'payments', 0, 100);
\echo :SQLSTATE
SELECT consumer_name, stream, partition, committed_offset
  FROM stream_positions ORDER BY 1, 2, 3;
-- the first consumer's claims, and the second's elsewhere, go on
SELECT dedup_claim_offset('a', 'payments', 0, 6) AS moved,
       dedup_claim_offset('a', 'payments', 0, 6) AS replay,
       dedup_claim_offset('b', 'payments', 1, 100) AS other_partition;
DROP INDEX regress_positions_partition;
-- an exclusion constraint: a new consumer's first claim is its error, not
-- a replay with no position written
ALTER TABLE stream_positions ADD CONSTRAINT regress_positions_exclusive
	EXCLUDE USING btree (stream WITH =, partition WITH =);
SELECT dedup_claim_offset('c', 'payments', 0, 1);
\echo :SQLSTATE
SELECT dedup_set_stream_position('c', 'payments', 0, 1);
\echo :SQLSTATE
SELECT dedup_claim_offset('a', 'payments', 0, 7) AS moved,
       dedup_set_stream_position('a', 'payments', 0, 3) AS had_position;
SELECT consumer_name, stream, partition, committed_offset
  FROM stream_positions ORDER BY 1, 2, 3;
ALTER TABLE stream_positions DROP CONSTRAINT regress_positions_exclusive;
SELECT dedup_claim_offset('c', 'payments', 0, 1) AS claimed;

-- dedup_retention: ON CONFLICT (consumer_name) DO UPDATE, as its functions
-- always wrote it
CREATE UNIQUE INDEX regress_retention_window ON dedup_retention (retention);
SELECT dedup_set_retention('a', '1 day');
SELECT dedup_set_retention('b', '1 day');
\echo :SQLSTATE
SELECT dedup_set_retention('a', '2 days'), dedup_set_retention('b', '1 day');
SELECT dedup_keep_forever('c'), dedup_keep_forever('d');
DROP INDEX regress_retention_window;
ALTER TABLE dedup_retention ADD CONSTRAINT regress_retention_exclusive
	EXCLUDE USING btree (retention WITH =);
SELECT dedup_set_retention('c', '1 day');
\echo :SQLSTATE
ALTER TABLE dedup_retention DROP CONSTRAINT regress_retention_exclusive;
SELECT consumer_name, retention FROM dedup_retention ORDER BY 1;

-- dedup_consumer_roles: allowing a role is ON CONFLICT (consumer_name,
-- claimant) DO NOTHING, so a unique index on claimant is an error for the
-- second consumer, not a silent "allowed" with nothing written (terse:
-- the errors' details show role OIDs)
\set VERBOSITY terse
CREATE UNIQUE INDEX regress_roles_claimant ON dedup_consumer_roles (claimant);
SELECT dedup_allow_claimant('a', 'regress_arbiters_app');
SELECT dedup_allow_claimant('a', 'regress_arbiters_app');	-- idempotent
SELECT dedup_allow_claimant('b', 'regress_arbiters_app');
\echo :SQLSTATE
DROP INDEX regress_roles_claimant;
ALTER TABLE dedup_consumer_roles ADD CONSTRAINT regress_roles_exclusive
	EXCLUDE USING btree (claimant WITH =);
SELECT dedup_allow_claimant('b', 'regress_arbiters_app');
\echo :SQLSTATE
ALTER TABLE dedup_consumer_roles DROP CONSTRAINT regress_roles_exclusive;
\set VERBOSITY default
SELECT consumer_name, claimant FROM dedup_consumer_roles ORDER BY 1;
SELECT dedup_allow_claimant('b', 'regress_arbiters_app');
SELECT consumer_name, claimant FROM dedup_consumer_roles ORDER BY 1;

-- dedup_colocated_tables (there without Citus too): registrations are ON
-- CONFLICT (records) DO NOTHING, and without its key a table could be
-- registered twice, and swept twice: refused, in every backend, at once
ALTER TABLE dedup_colocated_tables DROP CONSTRAINT dedup_colocated_tables_pkey;
SELECT dedup_claim('a', 'registry-key');
\echo :SQLSTATE
CREATE UNIQUE INDEX regress_registry_partial ON dedup_colocated_tables (records)
	WHERE registered_at > '2000-01-01';
SELECT dedup_claim('a', 'registry-key');
\echo :SQLSTATE
DROP INDEX regress_registry_partial;
ALTER TABLE dedup_colocated_tables ALTER COLUMN records TYPE oid;
SELECT dedup_claim('a', 'registry-key');
\echo :SQLSTATE
ALTER TABLE dedup_colocated_tables ALTER COLUMN records TYPE regclass;
ALTER TABLE dedup_colocated_tables
	ADD CONSTRAINT dedup_colocated_tables_pkey PRIMARY KEY (records);
SELECT dedup_claim('a', 'registry-key') AS claimed;

DROP EXTENSION dedup;
DROP ROLE regress_arbiters_app;
