--
-- schema swap: the owner of the extension's schema renames it and puts a
-- look-alike in its place.  Nothing dedup runs may land there or run its
-- code: claims, sweeps and maintenance all keep using the real tables.
--
CREATE ROLE regress_dedup_owner LOGIN;
GRANT CREATE ON DATABASE contrib_regression TO regress_dedup_owner;
CREATE SCHEMA dedup AUTHORIZATION regress_dedup_owner;
CREATE EXTENSION dedup SCHEMA dedup;

-- a warm backend: the claim has run here before the swap
SELECT dedup.dedup_claim('svc', 'before-swap') AS claimed;
SELECT dedup.dedup_set_retention('svc', '1 day');

-- the owner swaps the schema for one with a trap
SET ROLE regress_dedup_owner;
ALTER SCHEMA dedup RENAME TO dedup_real;
CREATE SCHEMA dedup;
CREATE TABLE dedup.trap_log (what text);
CREATE TABLE dedup.processed_messages (consumer_name text, message_id text,
	processed_at timestamptz DEFAULT now(), PRIMARY KEY (consumer_name, message_id));
CREATE TABLE dedup.dedup_retention (consumer_name text PRIMARY KEY, retention interval);
CREATE FUNCTION dedup.trap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO dedup.trap_log VALUES (TG_TABLE_NAME || ' ' || TG_OP || ' as ' || current_user);
	RETURN NEW;
END $$;
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON dedup.processed_messages
	FOR EACH ROW EXECUTE FUNCTION dedup.trap();
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON dedup.dedup_retention
	FOR EACH ROW EXECUTE FUNCTION dedup.trap();
GRANT ALL ON SCHEMA dedup TO PUBLIC;
GRANT ALL ON ALL TABLES IN SCHEMA dedup TO PUBLIC;
RESET ROLE;

-- the same backend claims, sets windows and sweeps, as a superuser, with the
-- look-alike first on its search_path
SET search_path = dedup, dedup_real;
SELECT dedup_real.dedup_claim('svc', 'after-swap') AS claimed,
       dedup_real.dedup_claim('svc', 'before-swap') AS duplicate;
SELECT dedup_real.dedup_set_retention('svc', '2 days');
SELECT dedup_real.dedup_keep_forever('other');
SELECT dedup_real.dedup_reset_retention('other') AS had_own;
INSERT INTO dedup_real.processed_messages VALUES ('svc', 'expired', now() - interval '3 days');
SELECT dedup_real.dedup_sweep() AS swept;
SELECT count(*) AS expired_rows FROM dedup_real.dedup_stats WHERE expired_backlog > 0;
RESET search_path;

-- everything is in the real tables, nothing in the look-alikes, no trap ran
SELECT consumer_name, message_id FROM dedup_real.processed_messages ORDER BY 2;
SELECT consumer_name, retention FROM dedup_real.dedup_retention ORDER BY 1;
SELECT count(*) AS lookalike_claims FROM dedup.processed_messages;
SELECT count(*) AS lookalike_windows FROM dedup.dedup_retention;
SELECT what AS trap_ran FROM dedup.trap_log;

-- a new backend, which has never claimed, is not fooled either
\c -
SET search_path = dedup, dedup_real;
SELECT dedup_real.dedup_claim('svc', 'new-backend') AS claimed;
RESET search_path;
SELECT count(*) AS lookalike_claims FROM dedup.processed_messages;
SELECT what AS trap_ran FROM dedup.trap_log;

-- nor after the schemas are swapped back
SET ROLE regress_dedup_owner;
ALTER SCHEMA dedup RENAME TO dedup_trap;
ALTER SCHEMA dedup_real RENAME TO dedup;
RESET ROLE;
SELECT dedup.dedup_claim('svc', 'swapped-back') AS claimed;
SELECT count(*) AS real_claims FROM dedup.processed_messages;

-- claims refuse a processed_messages that is not the one they know
CREATE TABLE regress_audit (n int);
CREATE FUNCTION regress_audit_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO regress_audit VALUES (1); RETURN NEW; END $$;
CREATE TRIGGER audit AFTER INSERT ON dedup.processed_messages
	FOR EACH ROW EXECUTE FUNCTION regress_audit_trigger();
SELECT dedup.dedup_claim('svc', 'with-trigger');
\echo :SQLSTATE
DROP TRIGGER audit ON dedup.processed_messages;
SELECT dedup.dedup_claim('svc', 'with-trigger') AS claimed;
SELECT count(*) AS audit_rows FROM regress_audit;
DROP TABLE regress_audit;
DROP FUNCTION regress_audit_trigger();
-- nor would a claim check a CHECK constraint or apply row security
ALTER TABLE dedup.processed_messages
	ADD CONSTRAINT regress_short_ids CHECK (length(message_id) < 100);
SELECT dedup.dedup_claim('svc', 'with-check');
\echo :SQLSTATE
ALTER TABLE dedup.processed_messages DROP CONSTRAINT regress_short_ids;
ALTER TABLE dedup.processed_messages ENABLE ROW LEVEL SECURITY;
SELECT dedup.dedup_claim('svc', 'with-row-security');
\echo :SQLSTATE
ALTER TABLE dedup.processed_messages DISABLE ROW LEVEL SECURITY;
SELECT dedup.dedup_claim('svc', 'after-check-and-row-security') AS claimed;

DROP SCHEMA dedup_trap CASCADE;
DROP EXTENSION dedup;
DROP SCHEMA dedup;
REVOKE CREATE ON DATABASE contrib_regression FROM regress_dedup_owner;
DROP ROLE regress_dedup_owner;
