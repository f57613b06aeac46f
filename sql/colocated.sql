--
-- Colocated records (Citus): what runs without Citus.  Every bad argument is
-- an error with its SQLSTATE, never a NULL; with good arguments every entry
-- point refuses with 0A000, saying Citus is needed (the cluster itself is
-- tested by test/t/061_citus_colocated.pl where Citus is installed).
--
CREATE EXTENSION dedup;
\set VERBOSITY default
CREATE TABLE business (id bigint PRIMARY KEY);

-- the arguments, checked before anything else
SELECT dedup_claim_routed(NULL, '1', 'svc', 'm-1');
\echo :SQLSTATE
SELECT dedup_claim_routed('business', NULL, 'svc', 'm-1');
\echo :SQLSTATE
SELECT dedup_claim_routed('business', '1', NULL, 'm-1');
\echo :SQLSTATE
SELECT dedup_claim_routed('business', '1', 'svc', NULL);
\echo :SQLSTATE
SELECT dedup_claim_routed('business', '1', '', 'm-1');
\echo :SQLSTATE
SELECT dedup_claim_routed('business', '1', 'svc', '');
\echo :SQLSTATE
SELECT dedup_claim_routed('business', '1', repeat('c', 257), 'm-1');
\echo :SQLSTATE
SELECT dedup_claim_routed('business', '1', 'svc', repeat('k', 1025));
\echo :SQLSTATE
SELECT dedup_claim_routed_many('business', '1', 'svc', NULL);
\echo :SQLSTATE
SELECT dedup_claim_routed_many('business', '1', 'svc', ARRAY['m-1', NULL]);
\echo :SQLSTATE
SELECT dedup_claim_routed_many('business', '1', 'svc', ARRAY['m-1', '']);
\echo :SQLSTATE
SELECT dedup_claim_routed_many('business', '1', 'svc', ARRAY[['a', 'b'], ['c', 'd']]);
\echo :SQLSTATE
SELECT dedup_claim_routed_many('business', '1', 'svc',
	array_fill('k'::text, ARRAY[10001]));
\echo :SQLSTATE
SELECT dedup_seen_routed('business', '1', NULL, 'm-1');
\echo :SQLSTATE
SELECT dedup_forget_routed(NULL, '1', 'svc', 'm-1');
\echo :SQLSTATE
SELECT dedup_forget_routed('business', NULL, 'svc', 'm-1');
\echo :SQLSTATE
SELECT dedup_forget_routed('business', '1', NULL, 'm-1');
\echo :SQLSTATE
SELECT dedup_forget_routed('business', '1', 'svc', NULL);
\echo :SQLSTATE
SELECT dedup_forget_routed('business', '1', '', 'm-1');
\echo :SQLSTATE
SELECT dedup_forget_routed('business', '1', 'svc', repeat('k', 1025));
\echo :SQLSTATE
SELECT dedup_register_colocated_records(NULL);
\echo :SQLSTATE
SELECT dedup_create_colocated_records(NULL, 'business');
\echo :SQLSTATE
SELECT dedup_create_colocated_records('', 'business');
\echo :SQLSTATE
SELECT dedup_create_colocated_records('claims', NULL);
\echo :SQLSTATE
SELECT dedup_claim_routed('no_such_table', '1', 'svc', 'm-1');
\echo :SQLSTATE

-- without Citus: refused, saying so
SELECT dedup_create_colocated_records('claims', 'business');
\echo :SQLSTATE
SELECT dedup_claim_routed('business', '1', 'svc', 'm-1');
\echo :SQLSTATE
SELECT dedup_claim_routed_many('business', '1', 'svc', ARRAY['m-1']);
\echo :SQLSTATE
SELECT dedup_seen_routed('business', '1', 'svc', 'm-1');
\echo :SQLSTATE
SELECT dedup_forget_routed('business', '1', 'svc', 'm-1');
\echo :SQLSTATE
SELECT dedup_register_colocated_records('business');
\echo :SQLSTATE
SELECT dedup_sweep_colocated();
\echo :SQLSTATE
SELECT * FROM dedup_colocated_storage();
\echo :SQLSTATE
-- in a read-only transaction, the claims are refused first
BEGIN READ ONLY;
SELECT dedup_claim_routed('business', '1', 'svc', 'm-1');
\echo :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT dedup_forget_routed('business', '1', 'svc', 'm-1');
\echo :SQLSTATE
ROLLBACK;
BEGIN READ ONLY;
SELECT dedup_register_colocated_records('business');
\echo :SQLSTATE
ROLLBACK;
-- nothing was created or registered
SELECT count(*) FROM dedup_colocated_tables;
SELECT to_regclass('claims');

-- none of them is PUBLIC's (dedup_forget_routed no more than dedup_forget);
-- the storage figures and the registry are pg_monitor's
SELECT p.oid::regprocedure AS function,
	   has_function_privilege('public', p.oid, 'EXECUTE') AS public,
	   has_function_privilege('pg_monitor', p.oid, 'EXECUTE') AS pg_monitor
  FROM pg_proc p
 WHERE p.proname IN ('dedup_create_colocated_records', 'dedup_claim_routed',
					 'dedup_claim_routed_many', 'dedup_seen_routed',
					 'dedup_sweep_colocated', 'dedup_colocated_storage',
					 'dedup_register_colocated_records', 'dedup_forget_routed',
					 'dedup_forget')
 ORDER BY p.proname;
SELECT has_table_privilege('public', 'dedup_colocated_tables', 'SELECT') AS public_select,
	   has_table_privilege('pg_monitor', 'dedup_colocated_tables', 'SELECT') AS monitor_select,
	   has_table_privilege('pg_monitor', 'dedup_colocated_tables', 'INSERT') AS monitor_insert;
-- the registry is kept by pg_dump
SELECT c.relname FROM pg_extension e, unnest(e.extconfig) x(oid)
  JOIN pg_class c ON c.oid = x.oid
 WHERE e.extname = 'dedup' AND c.relname = 'dedup_colocated_tables';

-- a dropped table takes its registry row with it (issue 29, item 8): the
-- extension's sql_drop event trigger, enabled always; rows written by hand
-- here, as no table can be registered without Citus
SELECT evtname, evtevent, evtenabled FROM pg_event_trigger
 WHERE evtname = 'dedup_colocated_dropped';
CREATE TABLE gone (x int);
CREATE TABLE kept (x int);
CREATE SCHEMA dropped_schema;
CREATE TABLE dropped_schema.also_gone (x int);
INSERT INTO dedup_colocated_tables (records)
VALUES ('gone'), ('kept'), ('dropped_schema.also_gone');
DROP TABLE gone;
SELECT records FROM dedup_colocated_tables ORDER BY records::text;
-- with the schema, by a role with no privilege on the registry
CREATE ROLE colocated_dropper;
ALTER SCHEMA dropped_schema OWNER TO colocated_dropper;
ALTER TABLE dropped_schema.also_gone OWNER TO colocated_dropper;
SET ROLE colocated_dropper;
DROP SCHEMA dropped_schema CASCADE;
RESET ROLE;
SELECT records FROM dedup_colocated_tables ORDER BY records::text;
-- under session_replication_role = replica too
SET session_replication_role = replica;
DROP TABLE kept;
RESET session_replication_role;
SELECT count(*) FROM dedup_colocated_tables;
-- not callable but as an event trigger
SELECT dedup_colocated_dropped();
\echo :SQLSTATE
DROP ROLE colocated_dropper;

DROP TABLE business;
DROP EXTENSION dedup;
