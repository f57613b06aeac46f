\set SHOW_CONTEXT never
--
-- dedup_claim: least privilege, and no search_path attacks
--
CREATE ROLE regress_dedup_app LOGIN;
CREATE ROLE regress_dedup_evil LOGIN;
CREATE SCHEMA dedup;
CREATE EXTENSION dedup SCHEMA dedup;

-- PUBLIC gets nothing: neither the records nor the claim
SELECT p.privilege,
       has_table_privilege('regress_dedup_app', 'dedup.processed_messages', p.privilege) AS granted
  FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(privilege);
SELECT has_function_privilege('regress_dedup_app', 'dedup.dedup_claim(text, text)', 'EXECUTE') AS may_claim;
SELECT prosecdef, proconfig, provolatile, proparallel, proisstrict
  FROM pg_proc WHERE oid = 'dedup.dedup_claim(text, text)'::regprocedure;

SET ROLE regress_dedup_app;
SELECT dedup.dedup_claim('app', 'evt-1');
\echo :SQLSTATE
RESET ROLE;

-- the README's recipe: claiming by an explicit grant, and nothing more
GRANT USAGE ON SCHEMA dedup TO regress_dedup_app;
GRANT EXECUTE ON FUNCTION dedup.dedup_claim(text, text) TO regress_dedup_app;
SET ROLE regress_dedup_app;
SELECT dedup.dedup_claim('app', 'evt-1') AS first, dedup.dedup_claim('app', 'evt-1') AS again;
-- the application cannot read, forge, alter or delete records
SELECT count(*) FROM dedup.processed_messages;
\echo :SQLSTATE
INSERT INTO dedup.processed_messages VALUES ('app', 'forged');
\echo :SQLSTATE
UPDATE dedup.processed_messages SET message_id = 'moved';
\echo :SQLSTATE
DELETE FROM dedup.processed_messages;
\echo :SQLSTATE
TRUNCATE dedup.processed_messages;
\echo :SQLSTATE
RESET ROLE;
SELECT consumer_name, message_id FROM dedup.processed_messages ORDER BY 1, 2;

-- objects planted on the caller's search_path are never used
CREATE SCHEMA regress_evil AUTHORIZATION regress_dedup_evil;
SET ROLE regress_dedup_evil;
CREATE TABLE regress_evil.processed_messages (consumer_name text, message_id text,
	processed_at timestamptz, PRIMARY KEY (consumer_name, message_id));
CREATE FUNCTION regress_evil.evil_texteq(text, text) RETURNS boolean
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'planted operator called'; END $$;
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text,
	FUNCTION = regress_evil.evil_texteq);
CREATE FUNCTION regress_evil.now() RETURNS timestamptz
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'planted now() called'; END $$;
RESET ROLE;
GRANT USAGE ON SCHEMA regress_evil TO regress_dedup_app;
GRANT ALL ON regress_evil.processed_messages TO regress_dedup_app;
CREATE TEMP TABLE processed_messages (consumer_name text, message_id text,
	processed_at timestamptz, PRIMARY KEY (consumer_name, message_id));
SET search_path = pg_temp, regress_evil, dedup, pg_catalog;
SELECT dedup_claim('app', 'evt-2') AS superuser_claim;
SET ROLE regress_dedup_app;
SET search_path = regress_evil, dedup, pg_catalog;
SELECT dedup_claim('app', 'evt-3') AS app_claim, dedup_claim('app', 'evt-3') AS app_again;
RESET ROLE;
RESET search_path;
SELECT count(*) AS planted_rows FROM regress_evil.processed_messages;
SELECT count(*) AS temp_rows FROM pg_temp.processed_messages;
SELECT consumer_name, message_id FROM dedup.processed_messages ORDER BY 1, 2;
DROP TABLE pg_temp.processed_messages;

-- a pre-existing object with a clashing name is never adopted
DROP EXTENSION dedup;
CREATE TABLE dedup.processed_messages (consumer_name text, message_id text);
CREATE EXTENSION dedup SCHEMA dedup;
\echo :SQLSTATE
DROP TABLE dedup.processed_messages;
CREATE FUNCTION dedup.dedup_claim(consumer text, message_id text) RETURNS boolean
	LANGUAGE sql AS 'SELECT true';
CREATE EXTENSION dedup SCHEMA dedup;
\echo :SQLSTATE
DROP FUNCTION dedup.dedup_claim(text, text);
SELECT count(*) AS leftover_objects FROM pg_class WHERE relnamespace = 'dedup'::regnamespace;

DROP SCHEMA regress_evil CASCADE;
DROP SCHEMA dedup;
DROP ROLE regress_dedup_app;
DROP ROLE regress_dedup_evil;
