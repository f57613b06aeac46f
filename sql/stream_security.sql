\set SHOW_CONTEXT never
--
-- claims by offset: least privilege, the consumer -> role mapping, no
-- search_path attacks, and a positions table that is as the extension made it
--
CREATE ROLE regress_stream_app LOGIN;
CREATE ROLE regress_stream_other LOGIN;
CREATE ROLE regress_stream_monitor LOGIN IN ROLE pg_monitor;
CREATE ROLE regress_stream_connect LOGIN;
CREATE ROLE regress_stream_evil LOGIN;
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;

-- PUBLIC gets nothing: every role below holds only what it is granted
SELECT r.rolname, f.fn,
       has_function_privilege(r.rolname, 'dedup.' || f.fn, 'EXECUTE') AS may_execute
  FROM unnest(ARRAY['regress_stream_app', 'regress_stream_monitor', 'regress_stream_connect']) AS r(rolname),
       unnest(ARRAY['dedup_claim_offset(text,text,integer,bigint)',
                    'dedup_claim_offsets(text,text,integer,bigint[])',
                    'dedup_stream_positions(text,text)',
                    'dedup_set_stream_position(text,text,integer,bigint)',
                    'dedup_forget_stream_positions(text,text)']) AS f(fn)
 WHERE has_function_privilege(r.rolname, 'dedup.' || f.fn, 'EXECUTE');
SELECT r.rolname, p.privilege
  FROM unnest(ARRAY['regress_stream_app', 'regress_stream_monitor', 'regress_stream_connect']) AS r(rolname),
       unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(privilege)
 WHERE has_table_privilege(r.rolname, 'dedup.stream_positions', p.privilege);
SELECT prosecdef, proconfig, provolatile, proparallel, proisstrict
  FROM pg_proc WHERE oid IN ('dedup.dedup_claim_offset(text,text,integer,bigint)'::regprocedure,
                             'dedup.dedup_claim_offsets(text,text,integer,bigint[])'::regprocedure,
                             'dedup.dedup_set_stream_position(text,text,integer,bigint)'::regprocedure)
 GROUP BY 1, 2, 3, 4, 5;

-- a role that can only connect, and a monitoring role, can do nothing here
SET ROLE regress_stream_connect;
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 1);
\echo :SQLSTATE
RESET ROLE;
GRANT USAGE ON SCHEMA dedup TO regress_stream_monitor, regress_stream_app, regress_stream_other;
SET ROLE regress_stream_monitor;
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 1);
\echo :SQLSTATE
SELECT * FROM dedup.dedup_stream_positions('orders-app');
\echo :SQLSTATE
SELECT count(*) FROM dedup.stream_positions;
\echo :SQLSTATE
RESET ROLE;

-- the application: claiming and seeking by an explicit grant, and nothing more
GRANT EXECUTE ON FUNCTION dedup.dedup_claim_offset(text, text, integer, bigint),
	dedup.dedup_claim_offsets(text, text, integer, bigint[]),
	dedup.dedup_stream_positions(text, text)
	TO regress_stream_app, regress_stream_other;
SET ROLE regress_stream_app;
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 1) AS first,
       dedup.dedup_claim_offset('orders-app', 'orders', 0, 1) AS again;
SELECT dedup.dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[1, 2, 3]);
SELECT partition, next_offset FROM dedup.dedup_stream_positions('orders-app');
-- it cannot read, forge, move or delete positions behind the claims' back
SELECT count(*) FROM dedup.stream_positions;
\echo :SQLSTATE
UPDATE dedup.stream_positions SET committed_offset = 0;
\echo :SQLSTATE
INSERT INTO dedup.stream_positions VALUES ('orders-app', 'orders', 1, 99, now());
\echo :SQLSTATE
DELETE FROM dedup.stream_positions;
\echo :SQLSTATE
SELECT dedup.dedup_set_stream_position('orders-app', 'orders', 0, 0);
\echo :SQLSTATE
SELECT dedup.dedup_forget_stream_positions('orders-app');
\echo :SQLSTATE
SELECT dedup.dedup_retire_consumer('orders-app');
\echo :SQLSTATE
RESET ROLE;

-- a consumer mapped to a role: only its members may claim or look
SELECT dedup.dedup_allow_claimant('orders-app', 'regress_stream_app');
SET ROLE regress_stream_other;
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 10);
\echo :SQLSTATE
SELECT dedup.dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[10]);
\echo :SQLSTATE
SELECT dedup.dedup_claim_offsets('orders-app', 'orders', 0, '{}');
\echo :SQLSTATE
SELECT * FROM dedup.dedup_stream_positions('orders-app');
\echo :SQLSTATE
SELECT dedup.dedup_claim_offset('other-app', 'orders', 0, 10) AS unmapped_consumer_open;
RESET ROLE;
SET ROLE regress_stream_app;
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 10) AS mapped_role;
RESET ROLE;
-- a refused claim moved nothing
SELECT consumer_name, stream, partition, committed_offset
  FROM dedup.stream_positions ORDER BY 1, 2, 3;

-- objects planted on the caller's search_path are never used
CREATE SCHEMA regress_evil AUTHORIZATION regress_stream_evil;
SET ROLE regress_stream_evil;
CREATE TABLE regress_evil.stream_positions (consumer_name text, stream text,
	partition integer, committed_offset bigint, updated_at timestamptz,
	PRIMARY KEY (consumer_name, stream, partition));
CREATE FUNCTION regress_evil.evil_int8lt(bigint, bigint) RETURNS boolean
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'planted operator called'; END $$;
CREATE OPERATOR regress_evil.< (LEFTARG = bigint, RIGHTARG = bigint,
	FUNCTION = regress_evil.evil_int8lt);
RESET ROLE;
GRANT USAGE ON SCHEMA regress_evil TO regress_stream_app;
GRANT ALL ON regress_evil.stream_positions TO regress_stream_app;
SET ROLE regress_stream_app;
SET search_path = regress_evil, dedup, pg_catalog;
SELECT dedup_claim_offset('orders-app', 'orders', 0, 11) AS app_claim,
       dedup_claim_offsets('orders-app', 'orders', 0, ARRAY[11, 12]) AS app_batch;
SELECT partition, next_offset FROM dedup_stream_positions('orders-app');
RESET ROLE;
RESET search_path;
SELECT count(*) AS planted_rows FROM regress_evil.stream_positions;

-- the table as the extension made it: what claims would skip is refused
-- (for every claim, by offset or not), with what to undo
CREATE FUNCTION regress_evil.keep() RETURNS trigger LANGUAGE plpgsql
	AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER keep BEFORE UPDATE ON dedup.stream_positions
	FOR EACH ROW EXECUTE FUNCTION regress_evil.keep();
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 20);
\echo :SQLSTATE
SELECT dedup.dedup_claim('orders-app', 'evt-1');
\echo :SQLSTATE
DROP TRIGGER keep ON dedup.stream_positions;
ALTER TABLE dedup.stream_positions ADD CONSTRAINT forward CHECK (committed_offset >= -1);
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 20);
\echo :SQLSTATE
ALTER TABLE dedup.stream_positions DROP CONSTRAINT forward;
ALTER TABLE dedup.stream_positions ADD COLUMN note text;
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 20);
\echo :SQLSTATE
ALTER TABLE dedup.stream_positions DROP COLUMN note;
ALTER TABLE dedup.stream_positions ALTER COLUMN updated_at SET DEFAULT now();
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 20);
\echo :SQLSTATE
ALTER TABLE dedup.stream_positions ALTER COLUMN updated_at DROP DEFAULT;
ALTER TABLE dedup.stream_positions DROP CONSTRAINT stream_positions_pkey;
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 20);
\echo :SQLSTATE
ALTER TABLE dedup.stream_positions ADD CONSTRAINT stream_positions_pkey
	PRIMARY KEY (consumer_name, stream, "partition");
-- an index a DBA adds is kept up to date, even on the moved column
CREATE INDEX stream_positions_offset_idx ON dedup.stream_positions (committed_offset);
SELECT dedup.dedup_claim_offset('orders-app', 'orders', 0, 21) AS after_undo;
SET enable_seqscan = off;
SELECT consumer_name, committed_offset FROM dedup.stream_positions
 WHERE committed_offset = 21;
RESET enable_seqscan;
DROP INDEX dedup.stream_positions_offset_idx;

-- a pre-existing table with the positions' name is never adopted
DROP EXTENSION dedup;
CREATE TABLE dedup.stream_positions (consumer_name text);
CREATE EXTENSION dedup SCHEMA dedup;
\echo :SQLSTATE
DROP TABLE dedup.stream_positions;

DROP SCHEMA regress_evil CASCADE;
DROP SCHEMA dedup;
DROP ROLE regress_stream_app, regress_stream_other, regress_stream_monitor,
	regress_stream_connect, regress_stream_evil;
